"""Safe YAML reading and validation of descriptions into typed specs.

* Only the safe loader is used: tags that construct Python objects are refused.
* A mapping with the same key twice is an error (PyYAML would keep the last one silently).
* Files over :data:`MAX_FILE_BYTES` are refused before parsing, as are FIFOs and devices.
* The text's size, nesting depth, alias expansion and number lengths are checked before it is
  composed (:mod:`archsim.spec.yamlguard`; limits in :mod:`archsim.limits`).
* Any problem becomes a :class:`~archsim.errors.SpecError` naming the file and the YAML path.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from archsim.errors import SpecError
from archsim.limits import MAX_FILE_BYTES as MAX_FILE_BYTES  # re-exported: traces use it
from archsim.spec.yamlguard import check_yaml_structure

if TYPE_CHECKING:
    from pydantic import BaseModel

_BaseLoader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_BaseLoader):  # type: ignore[misc]
    """Safe loader that rejects duplicate keys in a mapping."""


def _construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            ) from None
        if key in mapping:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=deep)
    return mapping


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def parse_yaml_text(text: str, source: str) -> Any:
    """Parse YAML text safely; errors name ``source`` and the line."""
    try:
        check_yaml_structure(text, source)
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}" if mark is not None else ""
        problem = err.problem or err.context or "malformed YAML"
        raise SpecError(source, where, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        # a reader error (a control character, say) spans lines: keep the first
        raise SpecError(source, "", f"not valid YAML: {str(err).splitlines()[0]}") from None
    except (ValueError, OverflowError, RecursionError) as err:
        # a value the constructor cannot build (e.g. a date out of range); the guard stops the rest
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise SpecError(source, "", f"not valid YAML: {first[:120]}") from None


def read_yaml(path: Path) -> dict[str, Any]:
    """Read a YAML file that must hold one mapping; every failure is a one-line SpecError."""
    source = str(path)
    try:
        info = path.stat()
    except FileNotFoundError:
        raise SpecError(source, "", "no such file") from None
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror}") from None
    except ValueError:
        raise SpecError(source, "", "not a valid file name") from None
    size = info.st_size
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(source, "", "is a directory, expected a YAML file")
    if not stat.S_ISREG(info.st_mode):
        # a FIFO or a device would block or never end
        raise SpecError(source, "", "not a regular file")
    if size > MAX_FILE_BYTES:
        raise SpecError(source, "", f"file is {size} bytes, larger than the {MAX_FILE_BYTES} allowed")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise SpecError(source, "", "not a text file (invalid UTF-8)") from None
    except OSError as err:
        raise SpecError(source, "", f"cannot read: {err.strerror}") from None
    data = parse_yaml_text(text, source)
    if data is None:
        raise SpecError(source, "", "file is empty")
    if not isinstance(data, dict):
        raise SpecError(source, "", f"expected a mapping at the top level, got {type(data).__name__}")
    return data


def _field_path(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not text:
            text = str(part)
        else:
            text += f".{part}"
    return text


def _problem(error: Any) -> str:
    kind = error["type"]
    if kind == "missing":
        return "missing required field"
    if kind == "extra_forbidden":
        return "unknown field"
    message = str(error["msg"])
    if message.startswith("Value error, "):
        return message[len("Value error, ") :]
    shown = repr(error.get("input"))
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return f"{message[0].lower()}{message[1:]}, got {shown}"


Model = TypeVar("Model", bound="BaseModel")


def validate(cls: type[Model], data: Any, source: str) -> Model:
    """Validate ``data`` as ``cls``; the first problem becomes a SpecError naming source and field."""
    from pydantic import ValidationError  # imported by cls's module already; here only by name

    if isinstance(data, dict):
        version = data.get("schema_version")
        if version is not None and (type(version) is not int or version != 1):  # not True, not 1.0
            raise SpecError(source, "schema_version", f"unsupported version {version!r}, this archsim reads 1")
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        first = err.errors(include_url=False)[0]
        raise SpecError(source, _field_path(tuple(first["loc"])), _problem(first)) from None
