"""Error types of archsim, one per failure kind.

Every error a user can cause carries the file (or input name) and the field it concerns, so that the
CLI can print exactly one line -- ``FILE: FIELD: PROBLEM`` -- and exit with status 2.
"""

from __future__ import annotations


class ArchsimError(Exception):
    """Base of every error archsim raises on purpose; the CLI prints it as one line, exit status 2."""

    def __init__(self, source: str, field: str, problem: str) -> None:
        self.source = source
        self.field = field
        self.problem = problem
        super().__init__(self.line())

    def line(self) -> str:
        """The one-line message: ``source: field: problem`` (empty parts left out).

        Characters that are not printable (a newline inside a value quoted from a bad file) are
        written as escapes, so the message is one line whatever it quotes.
        """
        text = ": ".join(p for p in (self.source, self.field, self.problem) if p)
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class SpecError(ArchsimError):
    """A description file (chip, memory, link, system, workload, trace) is malformed."""


class UnitError(ArchsimError):
    """A quantity string has no unit, an unknown unit, or a unit of the wrong dimension."""


class LookupFailed(ArchsimError):
    """A chip, system or workload name is not in the library search path."""


class CapacityError(ArchsimError):
    """A workload does not fit the target (e.g. a batch larger than the chip's memory)."""


class UsageError(ArchsimError):
    """A command-line argument or API argument has an invalid value."""


class LimitError(ArchsimError):
    """An input is beyond what archsim simulates in bounded time and memory (see :mod:`archsim.limits`)."""


class PluginError(ArchsimError):
    """A user cost model (an entry point or a registered function) failed to load or returned a bad cost."""
