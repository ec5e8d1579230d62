from pathlib import Path

import pytest

from archsim.errors import SpecError
from archsim.spec.yamlio import MAX_FILE_BYTES, parse_yaml_text, read_yaml


def write(tmp_path: Path, text: str, name: str = "f.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_duplicate_keys_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "a: 1\nb: 2\na: 3\n")
    with pytest.raises(SpecError, match=r"f\.yaml: line 3: not valid YAML: duplicate key 'a'"):
        read_yaml(path)


def test_nested_duplicate_keys_rejected() -> None:
    with pytest.raises(SpecError, match="duplicate key 'x'"):
        parse_yaml_text("top:\n  x: 1\n  x: 2\n", "s")


def test_object_constructing_tags_refused() -> None:
    with pytest.raises(SpecError, match="not valid YAML"):
        parse_yaml_text("a: !!python/object/apply:os.system ['true']\n", "s")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "file is empty"), ("- 1\n- 2\n", "expected a mapping"), ("a: [1, 2\n", "not valid YAML")],
)
def test_bad_files(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(SpecError, match=fragment):
        read_yaml(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        read_yaml(tmp_path / "absent.yaml")


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SpecError, match="not a text file"):
        read_yaml(path)


def test_oversized_file_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(SpecError, match="larger than"):
        read_yaml(path)
