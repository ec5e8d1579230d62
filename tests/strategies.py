"""The property tests' strategies: archsim's public ones (:mod:`archsim.testing.strategies`), re-exported."""

from __future__ import annotations

from archsim.testing import strategies as _public
from archsim.testing.strategies import *  # noqa: F403

__all__ = list(_public.__all__)
