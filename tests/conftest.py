"""Shared fixtures: the built-in library (environment ignored) and small hand-made traces."""

from __future__ import annotations

import pytest

from archsim.spec.library import Library


@pytest.fixture(scope="session")
def library() -> Library:
    """The built-in library only, whatever ARCHSIM_PATH says."""
    return Library(use_env=False)
