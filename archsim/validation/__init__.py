"""Validation against published measurements, and calibration of the efficiency parameters.

:func:`validate` runs every row of a validation table (``validation/published.yaml``) and returns the
predicted and published values with their errors; :mod:`archsim.validation.calibrate` fits the family
efficiency parameters to those rows.
"""

from archsim.validation.run import Prepared, RowResult, ValidationReport, predict, prepare, validate

__all__ = ["Prepared", "RowResult", "ValidationReport", "predict", "prepare", "validate"]
