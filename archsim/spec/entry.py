"""One description file of the library (:class:`Entry`), and where the built-in library is.

:func:`display_path` is how messages name a description file.

:data:`SPEC_CLASSES` maps each ``kind`` to its spec class, importing the class's module when the kind
is first asked for: a run imports the few spec modules it uses.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from archsim.errors import SpecError
from archsim.spec.cache import Header, header_of

BUILTIN_FOLDERS = (
    "chips",
    "memory",
    "interconnect",
    "energy",
    "software",
    "workloads",
    "validation",
    "sweeps",
    "convergence",
)


class _SpecClasses(Mapping[str, type[Any]]):
    """The spec class of each ``kind``, its module imported when first asked for (a run needs a few)."""

    _WHERE: ClassVar[dict[str, tuple[str, str]]] = {
        "chip": ("archsim.spec.chip", "ChipSpec"),
        "family": ("archsim.spec.family", "FamilySpec"),
        "memory": ("archsim.spec.memory", "MemorySpec"),
        "link": ("archsim.spec.link", "LinkSpec"),
        "model": ("archsim.spec.model", "ModelSpec"),
        "system": ("archsim.spec.system", "SystemSpec"),
        "collective-library": ("archsim.spec.collective_library", "CollectiveLibrarySpec"),
        "energy": ("archsim.spec.energy", "EnergySpec"),
        "validation": ("archsim.spec.validation", "ValidationSpec"),
        "sweep": ("archsim.spec.sweep", "SweepSpec"),
        "software": ("archsim.spec.software", "SoftwareSpec"),
        "convergence": ("archsim.spec.convergence", "ConvergenceSpec"),
        "mlperf": ("archsim.spec.mlperf", "MlperfSpec"),
        "uncertainty": ("archsim.spec.uncertainty", "UncertaintySpec"),
    }

    def __getitem__(self, kind: str) -> type[Any]:
        module, name = self._WHERE[kind]
        spec_class: type[Any] = getattr(importlib.import_module(module), name)
        return spec_class

    def __iter__(self) -> Iterator[str]:
        return iter(self._WHERE)

    def __len__(self) -> int:
        return len(self._WHERE)


SPEC_CLASSES: Mapping[str, type[Any]] = _SpecClasses()
"""The spec class of each ``kind`` of description."""


@functools.cache
def _builtin_base() -> Path:
    """The folder holding the built-in library's folders: packaged in the wheel, or the source checkout."""
    package = Path(__file__).resolve().parent.parent
    packaged = package / "_library"
    return packaged if packaged.is_dir() else package.parent


def builtin_roots() -> list[Path]:
    """Folders of the built-in library: packaged in the wheel, or in the source checkout."""
    base = _builtin_base()
    return [base / folder for folder in BUILTIN_FOLDERS if (base / folder).is_dir()]


def display_path(path: Path) -> str:
    """How messages name a description file: relative to its library or the working directory.

    A built-in description is named from the library's folder (``chips/v100-16gb.yaml``), a file under
    the working directory from there; anything else as it was given.
    """
    if not path.is_absolute():
        return str(path)
    cwd = Path.cwd()
    bases = [_builtin_base()] + ([cwd] if cwd != Path(cwd.anchor) else [])
    for base in bases:
        try:
            return str(path.relative_to(base))
        except ValueError:
            continue
    return str(path)


class Entry:
    """One indexed description file: its kind, name, aliases and one-line description.

    ``path`` is where the file is; ``source`` how messages name it (:func:`display_path`); ``data``
    its parsed YAML, read from the file when first asked for if the entry came from the index
    (``indexed``: built from a ``header`` alone).
    """

    __slots__ = ("_data", "_source", "aliases", "description", "indexed", "kind", "name", "path")

    def __init__(self, path: Path, data: dict[str, Any] | None, header: Header | None = None) -> None:
        self.path = path
        self._source: str | None = None
        self._data = data
        self.indexed = data is None
        if header is None:
            if data is None:
                raise ValueError("an entry needs its data or its header")
            header = header_of(data, self.source)
        self.kind = header.kind
        self.name = header.name
        self.aliases = header.aliases
        self.description = header.description

    @property
    def source(self) -> str:
        """How messages name the file: :func:`display_path` of ``path``."""
        if self._source is None:
            self._source = display_path(self.path)
        return self._source

    @property
    def data(self) -> dict[str, Any]:
        """The file's parsed YAML (read once, when first asked for)."""
        if self._data is None:
            from archsim.spec.yamlio import read_yaml

            try:
                self._data = read_yaml(self.path)
            except SpecError as err:  # named as every message names a description file
                raise SpecError(self.source, err.field, err.problem) from None
        return self._data
