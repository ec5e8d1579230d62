"""One run: a validated request and the one function that runs it.

* :mod:`archsim.run.request` -- :class:`~archsim.run.request.RunRequest`, every argument of a run
  (target, workload, mode, batch, precision, lengths, the parallel layout, software and trace
  options), checked once when it is built; the CLI, the API, sweeps, baselines and validation rows
  all build one.
* :mod:`archsim.run.runner` -- :func:`~archsim.run.runner.run`: resolves the target once (a chip is a
  system of one chip), builds the trace once (the default batch halved until it fits, once), and
  replays it, watched by the caller's observers.
* :mod:`archsim.run.observers` -- what a caller attaches to a run (``run(request, library,
  observers=[...])``): :class:`~archsim.run.observers.TimelineRecorder` records the timeline.
* :mod:`archsim.run.target` -- what a target name resolves to (a system; a chip is a system of one
  chip, :data:`~archsim.run.target.ONE_CHIP`), and a system's fabric.
* :mod:`archsim.run.replay` -- :func:`~archsim.run.replay.replay_on_target`, the one replay seam: a
  built trace on any target. A system of one chip replays in the one-chip list scheduler; a system
  joined by links runs :func:`~archsim.run.system.system_step`, data parallel
  (:mod:`~archsim.run.data_parallel`) or pipelined (:mod:`~archsim.run.pipeline`), the result
  assembled by :mod:`~archsim.run.system_result`.

This package imports nothing at its top, so that importing one of its modules stays cheap.
"""
