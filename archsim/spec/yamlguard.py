"""Checks on YAML text before it is composed into Python objects.

libyaml's composer recurses once per level of nesting in C, so ``[[[[...`` thirty thousand levels deep
crashes the interpreter; aliases let a few hundred bytes stand for billions of values (the
"billion laughs"), or for a structure that contains itself; a plain scalar of thousands of digits
becomes an int that Python refuses to convert or print. :func:`check_yaml_structure` walks the
parser's event stream -- flat, in constant stack -- and refuses such text with a one-line
:class:`~archsim.errors.SpecError` naming the file and the line, before any object is built. The
limits are in :mod:`archsim.limits`.
"""

from __future__ import annotations

from collections.abc import Iterator

import yaml

from archsim.errors import SpecError
from archsim.limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES

_Loader: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_NUMBER_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"})
MAX_NUMBER_CHARS = 100
"""Longest plain scalar that may be read as a number (a 64-bit integer has 20 digits)."""


def _line(event: yaml.Event) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}" if mark is not None else ""


def check_yaml_structure(text: str, source: str) -> None:
    """Refuse YAML ``text`` that is too large, nested too deep, or expands too far through aliases.

    Syntax errors are left for the loader to report; only the shape of well-formed events is
    checked here. Raises SpecError naming ``source`` and, where known, the line.
    """
    if len(text) > MAX_YAML_BYTES:
        raise SpecError(
            source,
            "",
            f"{len(text)} characters of YAML, more than the {MAX_YAML_BYTES} archsim parses "
            "(a larger trace file must hold one op per line, as write_trace writes them)",
        )
    starts: list[int] = []  # the expanded count where each open collection began
    open_anchors: list[str | None] = []
    sizes: dict[str, int] = {}  # expanded values under each closed anchor
    expanded = 0
    for event in _events(text, source):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(starts) >= MAX_YAML_DEPTH:
                raise SpecError(source, _line(event), f"nested deeper than {MAX_YAML_DEPTH} levels")
            starts.append(expanded)
            open_anchors.append(event.anchor)
            expanded += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            start = starts.pop()
            anchor = open_anchors.pop()
            if anchor is not None:
                sizes[anchor] = expanded - start
        elif isinstance(event, yaml.ScalarEvent):
            value = event.value
            if len(value) > MAX_NUMBER_CHARS and not event.style:  # plain: None, or "" from libyaml
                tag = _RESOLVER.resolve(yaml.ScalarNode, value, event.implicit)  # type: ignore[no-untyped-call]
                if tag in _NUMBER_TAGS:
                    raise SpecError(source, _line(event), f"a number of {len(value)} characters is not a valid value")
            if event.anchor is not None:
                sizes[event.anchor] = 1
            expanded += 1
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor in open_anchors:
                raise SpecError(source, _line(event), f"alias *{event.anchor} refers to a value that contains it")
            expanded += sizes.get(event.anchor or "", 0)  # an undefined alias is the loader's error
        if expanded > MAX_YAML_NODES:
            raise SpecError(
                source,
                _line(event),
                f"more than {MAX_YAML_NODES} values once aliases are expanded; not a description "
                "(a larger trace file must hold one op per line, as write_trace writes them)",
            )


def _events(text: str, source: str) -> Iterator[yaml.Event]:
    """The parser's events of ``text``; its own nesting limit reported as archsim's.

    libyaml's scanner (PyYAML 6.0.4 on) refuses flow collections nested beyond 1,000 levels while it
    looks ahead, before the deeper collections' events reach :func:`check_yaml_structure`; such text is
    nested deeper than archsim's limit too, and is refused with the same message.
    """
    try:
        yield from yaml.parse(text, Loader=_Loader)
    except yaml.MarkedYAMLError as err:
        if err.problem is None or "nesting depth" not in err.problem:
            raise
        mark = err.problem_mark
        line = f"line {mark.line + 1}" if mark is not None else ""
        raise SpecError(source, line, f"nested deeper than {MAX_YAML_DEPTH} levels") from None
