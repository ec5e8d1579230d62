"""Numba kernels: arrays and scalars in, arrays and scalars out, each behind a plain-Python wrapper.

Importing this package does not import numba; each wrapper compiles (or loads from numba's on-disk
cache, ``cache=True``) its kernel on first use, so that only the paths that need a kernel pay
numba's import and start-up cost (see :func:`archsim.kernels.fold_schedule.warm_up`).
"""
