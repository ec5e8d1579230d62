"""The discrete-event engine: replays traces through cost models on SimPy resources."""

from archsim.engine.replay import OpTiming, replay

__all__ = ["OpTiming", "replay"]
