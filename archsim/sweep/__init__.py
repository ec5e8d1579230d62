"""Design-space sweeps: expand a sweep description, run it on local processes or Dask, get a DataFrame.

>>> from archsim.sweep import run_sweep
>>> table = run_sweep("sweeps/systolic-shape-sweep.yaml", out="out/shape")  # doctest: +SKIP

* :func:`load_sweep` -- a sweep description by name or path, validated;
* :func:`count` -- how many configurations and rows a sweep has (``archsim sweep --dry-run``);
* :func:`run_sweep` -- run it (resuming from ``out`` if rows are stored there) and return the table;
  rows of single chips are priced together (:mod:`archsim.sweep.batch`), systems one at a time;
* :func:`optimize` -- search its axes with Optuna for the best designs (``archsim optimize``,
  :mod:`archsim.sweep.optimize`).

The table has one row per configuration and workload, ordered as the sweep expands: ``target``,
``workload``, every axis by its path (quantities as SI numbers), the design figures of the variant
(:data:`~archsim.sweep.worker.DESIGN_COLUMNS`), the scalar results of the run
(:data:`~archsim.sweep.worker.RESULT_COLUMNS`), ``error`` (None, or why archsim refused the run) and
``key``.
"""

from archsim.sweep.optimize import optimize
from archsim.sweep.run import count, load_sweep, run_sweep

__all__ = ["count", "load_sweep", "optimize", "run_sweep"]
