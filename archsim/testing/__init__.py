"""Helpers for testing with archsim: hypothesis strategies (:mod:`archsim.testing.strategies`).

The baseline fixture lives in :mod:`archsim.pytest_plugin`. Importing this package imports nothing;
:mod:`archsim.testing.strategies` needs hypothesis (``pip install 'archsim[testing]'``).
"""
