"""Neutral shared types: what a measurement is, and what a config is.

Every layer imports these (tile spaces, backends, records, the measurement session, agents) and this
module imports nothing of the package, so no import cycle is possible (as SB3's
``common/type_aliases.py``). Errors are values (as in TVM MetaSchedule): a :class:`MeasureResult`
carries either timings or an error message.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Config", "ERROR_KINDS", "MACHINE", "MeasureResult", "ResultCallback"]

#: A tile configuration: one tuple of loop factors per dimension of the task, in the task's order.
Config = tuple[tuple[int, ...], ...]

#: The ``error_kind`` of a failure of the machine the config was built on (a file-size limit, a full disk,
#: a missing compiler or linker, the builder out of memory), which says nothing about the config: it is
#: never recorded, and a resumed run measures the config again (:attr:`MeasureResult.machine_failure`).
MACHINE = "machine"

#: What ``MeasureResult.error_kind`` may say: failures of the config (it does not build, crashes, hangs,
#: computes a wrong answer), and :data:`MACHINE`.
ERROR_KINDS = ("build", "run", "timeout", "wrong_result", "crash", "other", MACHINE)


@dataclass(frozen=True, slots=True)
class MeasureResult:
    """The outcome of measuring one config: timings, or an error.

    ``latency_s`` is the statistic the backend reports (e.g. the mean of ``costs_s``); it is ``None``
    exactly when ``error`` is set.

    A **censored** result (``censored=True``) says only "slower than ``latency_s``": the kernel was
    stopped once it had run that long (the bound, see ``MeasureProtocol.censor_ratio`` of the TVM
    backend). It is error-free, carries no timed run (``costs_s`` is empty) and no correctness check,
    is never a best-so-far, and is measured again in full when an exact latency is asked for
    (``MeasureSession.measure(..., exact=True)``, :meth:`LatencyBackend.measure_exact`). Code that
    needs one number may read ``latency_s`` as the latency (the most the config could be credited
    with); code that ranks or reports latencies should check :attr:`exact`.
    """

    config: Config
    latency_s: float | None
    costs_s: tuple[float, ...] = ()
    error: str | None = None
    error_kind: str | None = None
    build_s: float = 0.0
    run_s: float = 0.0
    #: the latency is one unrepeated run: the config was far slower than the best so far, or slow in
    #: absolute terms, and timing it precisely would only cost time (see ``MeasureProtocol``)
    coarse: bool = False
    #: the kernel was stopped at ``latency_s``: it is slower than that, by how much is unknown
    censored: bool = False

    def __post_init__(self) -> None:
        if (self.latency_s is None) == (self.error is None):
            raise ValueError(
                f"a MeasureResult has either a latency or an error, got latency_s={self.latency_s!r}, "
                f"error={self.error!r}"
            )
        if self.latency_s is not None and not (math.isfinite(self.latency_s) and self.latency_s > 0):
            raise ValueError(f"latency_s must be a positive finite number, got {self.latency_s!r}")
        if self.error_kind is not None and self.error_kind not in ERROR_KINDS:
            raise ValueError(f"error_kind must be one of {ERROR_KINDS}, got {self.error_kind!r}")
        if self.censored and (self.error is not None or self.coarse or self.costs_s):
            raise ValueError(
                "a censored MeasureResult has a bound as latency_s and nothing else: no error, not coarse, no "
                f"costs_s; got error={self.error!r}, coarse={self.coarse!r}, costs_s={self.costs_s!r}"
            )

    @property
    def ok(self) -> bool:
        """No error (a censored result is ok: it is a valid, if partial, measurement)."""
        return self.error is None

    @property
    def machine_failure(self) -> bool:
        """A failure of the machine, not of the config (:data:`MACHINE`): never recorded, measured again."""
        return self.error_kind == MACHINE

    @property
    def exact(self) -> bool:
        """A latency was measured (no error, not censored): the result may be a best-so-far."""
        return self.error is None and not self.censored

    @classmethod
    def censored_at(cls, config: Config, bound_s: float, **timing: float) -> MeasureResult:
        """The result of a kernel stopped after running ``bound_s`` seconds: "slower than ``bound_s``"."""
        return cls(config=config, latency_s=bound_s, censored=True, **timing)

    @classmethod
    def failure(cls, config: Config, error: str, kind: str = "other", **timing: float) -> MeasureResult:
        return cls(config=config, latency_s=None, error=error, error_kind=kind, **timing)


#: ``on_result(position in the batch, result)``. Backends call it on the thread that called
#: ``measure`` (see :meth:`schedule_gym.backends.LatencyBackend.measure`).
ResultCallback = Callable[[int, MeasureResult], None]
