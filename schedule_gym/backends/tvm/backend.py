"""The TVM backend: TVM-compiled kernels, built in worker processes and timed in an isolated one.

Measuring a batch (:meth:`TVMBackend.measure`):

1. **Build**, concurrently (:class:`~schedule_gym.backends.tvm.builder.LocalBuilder`): schedule each
   config with the template, compile it for the target, export it to a fresh ``.so``.
2. **Run**, one artifact at a time, in a separate long-lived runner process (so timings never overlap
   builds and a crashing kernel kills only the runner): load the module, run it once on seeded random
   inputs; a first run past the censor bound (``MeasureProtocol.censor_ratio`` times the best so far)
   is stopped there (the runner is killed) and reported **censored**, "slower than the bound", neither
   checked nor timed; otherwise compare with NumPy (a wrong answer is an error, not a latency); a config
   whose first run is far slower than the best so far, or slow in absolute terms, is reported from that
   one run (``coarse``); the others are timed with ``time_evaluator`` under the
   :class:`~schedule_gym.backends.tvm.protocol.MeasureProtocol`. :meth:`TVMBackend.measure_exact` never
   censors.

The runner is forked from a zygote (:mod:`schedule_gym.backends.tvm.workers`), warms up (``warmup_s``)
before its first run, and runs NumPy's OpenBLAS on one thread. Every failure is a result: a build error,
a build or run timeout (the worker is killed and respawned), a crash (the runner process dies; a new one
starts), a wrong answer. Timeouts are enforced from the parent, so a kernel that never returns cannot stall
the search. The workers stay alive across batches, and bad configs stop early; MetaSchedule's
``LocalBuilder``/``LocalRunner``, which start a worker pool per batch and time every candidate fully, are
the comparison in ``examples/benchmarks/measure_cost.py``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from schedule_gym.backends.base import LatencyBackend, MeasureResult, ResultCallback, valid_configs
from schedule_gym.backends.tvm.builder import Built, LocalBuilder
from schedule_gym.backends.tvm.export import KernelTarget
from schedule_gym.backends.tvm.protocol import STATISTICS, MeasureProtocol, censor_kill_s
from schedule_gym.backends.tvm.runner import (
    device_exists,
    finish_loaded,
    first_run_loaded,
    load_artifact,
    prepare_runner,
    task_memory_bytes,
)
from schedule_gym.backends.tvm.targets import device_of, resolve_target, target_key, usable_cores, usable_cpus
from schedule_gym.backends.tvm.workers import ForkedWorker, short_error, start_zygote
from schedule_gym.errors import MachineError, TaskError
from schedule_gym.extras import require
from schedule_gym.hardware import available_memory_bytes
from schedule_gym.tasks.task import Task
from schedule_gym.templates import Template, get_template, template_of
from schedule_gym.types import Config
from schedule_gym.operators import get_workload

__all__ = ["TVMBackend"]


class TVMBackend(LatencyBackend):
    """Latencies of TVM-compiled kernels on this machine (``target="llvm"``) or its GPU (``"cuda"``).

    Args:
        target: ``"llvm"`` (this CPU, detected; never a silent ``generic``), ``"cuda"``, or a TVM
            target dict such as ``{"kind": "llvm", "mcpu": "znver5"}``.
        template: a name from :data:`schedule_gym.templates.TEMPLATES`; ``"auto"`` picks each task's
            template for the target kind: its packed template for a task in packed form, else its
            operator's default (:func:`schedule_gym.templates.template_of`).
        num_threads: threads of the TVM runtime when timing (default: every core this process may run
            on, :func:`~schedule_gym.backends.tvm.targets.usable_cores`, so ``taskset`` and a cluster
            scheduler's affinity are honoured).
        build_workers: concurrent build processes (default: as many as those cores).
        runner_cpus: pin the process that runs kernels to these CPUs (e.g. ``(0,)`` with
            ``num_threads=1`` to time on one core while other work uses the rest).
        protocol: a :class:`MeasureProtocol` or a dict of its fields.
    """

    name = "tvm"
    deterministic = False
    measures_hardware = True
    needs_tvm = True

    def __init__(
        self,
        target: str | dict = "llvm",
        template: str = "auto",
        num_threads: int | None = None,
        build_workers: int | None = None,
        protocol: MeasureProtocol | dict | None = None,
        runner_cpus: Sequence[int] | None = None,
    ) -> None:
        require(f"the {self.name} backend", "tvm")  # before anything imports TVM: name the extra
        cores = usable_cores()
        for name, value in (("num_threads", num_threads), ("build_workers", build_workers)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
        self.num_threads = num_threads or cores
        self.protocol = MeasureProtocol.from_value(protocol)
        self.target = resolve_target(target, self.num_threads)
        self.target_kind = self.target["kind"]
        #: the template every task is built with, or None: each operator's default (``"auto"``)
        self.template: Template | None = None if template == "auto" else get_template(template)
        if self.template is not None:
            self.template.check_target(self.target_kind)
        self.device = device_of(self.target)
        self.runner_cpus = tuple(int(c) for c in runner_cpus) if runner_cpus else None
        allowed = usable_cpus()
        if self.runner_cpus and allowed is not None and not set(self.runner_cpus) <= allowed:
            raise ValueError(f"runner_cpus {list(self.runner_cpus)} are not all among this process's CPUs {sorted(allowed)}")
        self.target_key = target_key(self.target, self.num_threads)
        #: builds the candidates (its processes and build directory live as long as this backend)
        self.builder = LocalBuilder(self.target, build_workers or cores)
        self._runner: ForkedWorker | None = None
        #: per task key: the best precise latency (the early-stop rule's reference) and the best exact one,
        #: coarse included (the censor bound's)
        self._best_s: dict[str, float] = {}
        self._reference_s: dict[str, float] = {}
        self._device_seen = self.device == "cpu"  # another device is looked for by the runner, once
        self._closed = False
        start_zygote()  # the runners' parent starts importing TVM now, while the first batch builds

    @property
    def build_workers(self) -> int:
        """Concurrent build processes."""
        return self.builder.workers

    # -------------------------------------------------------------------------------- traits
    @property
    def kernel_target(self) -> KernelTarget:
        """The resolved target, the template (``"auto"`` unless one was named) and the timing threads."""
        template = "auto" if self.template is None else self.template.name
        return KernelTarget(self.target, template, self.num_threads, remote=False)

    def template_of(self, task: Task) -> Template:
        """The template that builds ``task`` here (checked against its operator and the target)."""
        template = template_of(task, self.target_kind) if self.template is None else self.template
        template.check(task, self.target_kind)
        return template

    def record_context(self, task: Task) -> tuple[str, str]:
        return (self.target_key, self.template_of(task).version)

    def check_task(self, task: Task) -> None:
        """Refuse, up front, a task this backend could only fail config by config: an operator the
        template cannot build, a dtype and reduction length whose result cannot be checked soundly (with
        ``check_correctness``), or buffers larger than this machine's available memory."""
        self.template_of(task)
        workload = get_workload(task.op)
        need, available = task_memory_bytes(task), available_memory_bytes()
        if available is not None and need > available:
            raise TaskError(
                f"task {task.name!r} needs about {need / 2**30:.1f} GiB for its inputs, output and float64 "
                f"reference; this machine has {available / 2**30:.1f} GiB available"
            )
        if self.protocol.check_correctness:
            try:
                workload.check_is_sound(task)
            except TaskError as exc:
                raise TaskError(f"{exc} (or measure with protocol check_correctness=False)") from None

    def protocol_dict(self) -> dict:
        return self.protocol.to_dict()

    # ---------------------------------------------------------------------------------- build
    def build(self, task: Task, configs: Sequence[Config]) -> list[Built]:
        """Build every config concurrently; an artifact path or an error for each."""
        return self.builder.build(task, self.template_of(task).name, configs, self.protocol.build_timeout_s)

    # ------------------------------------------------------------------------------------ run
    def _runner_worker(self) -> ForkedWorker:
        if self._runner is None:
            self._runner = ForkedWorker({"TVM_NUM_THREADS": str(self.num_threads)}, maximum_uses=1024, cpus=self.runner_cpus)
        return self._runner

    def _result(self, task: Task, built: Built, outcome: dict | None, error: tuple[str, str] | None, run_s: float) -> MeasureResult:
        if error is not None:
            return MeasureResult.failure(built.config, error[0], error[1], build_s=built.build_s, run_s=run_s)
        assert outcome is not None
        if "error" in outcome:
            return MeasureResult.failure(built.config, outcome["error"], outcome["kind"], build_s=built.build_s, run_s=run_s)
        if "censored_s" in outcome:
            return MeasureResult.censored_at(built.config, outcome["censored_s"], build_s=built.build_s, run_s=run_s)
        costs = tuple(outcome["costs"])
        latency = STATISTICS[self.protocol.statistic](costs)
        reference = self._reference_s.get(task.key)
        if reference is None or latency < reference:
            self._reference_s[task.key] = latency
        if not outcome["coarse"]:
            best = self._best_s.get(task.key)
            if best is None or latency < best:
                self._best_s[task.key] = latency
        return MeasureResult(built.config, latency, costs_s=costs, build_s=built.build_s, run_s=run_s, coarse=outcome["coarse"])

    def run_one(self, task: Task, built: Built, protocol: MeasureProtocol | None = None) -> MeasureResult:
        """Check and time one built artifact in the runner process (under ``protocol``, default ours).

        Three calls to the runner: load (and, in a new runner, inputs and warm-up), the first run, then
        check and timing. The first run's call times out at the censor bound
        (:func:`~schedule_gym.backends.tvm.protocol.censor_kill_s`): the runner is killed and the config
        reported censored. The three calls together have ``run_timeout_s``.
        """
        protocol = protocol or self.protocol
        best_s, reference_s = self._best_s.get(task.key), self._reference_s.get(task.key)
        bound = protocol.censor_bound_s(reference_s)
        try:  # a fork, or once per process the zygote's start (importing TVM): not part of the run
            self._runner_worker().task = task
            self._runner_worker().start()
        except ChildProcessError:
            pass  # the call below fails the same way and reports it
        t0 = time.perf_counter()
        deadline = t0 + protocol.run_timeout_s

        def left() -> float:
            return max(1e-3, deadline - time.perf_counter())

        outcome, error = None, None
        try:
            runner = self._runner_worker()
            layout = self.template_of(task).input_layout(task, built.config)
            runner.call(load_artifact, (built.path, task, self.device, protocol.warmup_s, protocol.check_correctness,
                                        layout), left())
            kill_s = None if bound is None else censor_kill_s(bound)
            if kill_s is not None and kill_s < left():
                try:
                    first_s = runner.call(first_run_loaded, (task, False), kill_s)
                except TimeoutError:  # stopped at the bound: the runner was killed
                    outcome = {"censored_s": bound}
                    # Its replacement (forked with the task's inputs and reference) is made ready now, while
                    # the caller goes on. No warm-up: the killed kernel kept the cores busy to this moment.
                    runner.send_ahead(prepare_runner, (task, self.device, 0.0))
            else:
                first_s = runner.call(first_run_loaded, (task, False), left())
            if outcome is None:
                outcome = runner.call(finish_loaded, (task, protocol.to_dict(), best_s, first_s, reference_s), left())
        except TimeoutError:
            error = (f"run timed out after {protocol.run_timeout_s:g} s (the runner was restarted)", "timeout")
        except ChildProcessError:
            error = (self._death_cause(task), "crash")
        except MemoryError:
            error = (self._out_of_memory(task), "run")
        except Exception as exc:  # noqa: BLE001 - a failed run is a result
            text = short_error(exc)
            if "MemoryError" in text or "out of memory" in text.lower() or "failed to allocate" in text.lower():
                error = (f"{self._out_of_memory(task)}: {text}", "run")
            else:
                error = (f"run failed: {text}", "run")
        finally:
            built.discard()
        return self._result(task, built, outcome, error, time.perf_counter() - t0)

    def measure_exact(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        """:meth:`measure` with ``censor_ratio=None``: every kernel is run and timed in full."""
        saved = self.protocol
        self.protocol = replace(saved, censor_ratio=None)
        try:
            return self.measure(task, configs, on_result)
        finally:
            self.protocol = saved

    def _require_device(self) -> None:
        """Raise :class:`~schedule_gym.errors.MachineError` if the runner process sees no device of the target's
        kind (a CUDA target on a machine without a GPU): every run would fail, and say nothing of its config."""
        if self._device_seen:
            return
        try:
            seen = self._runner_worker().call(device_exists, (self.device,), self.protocol.run_timeout_s)
        except (TimeoutError, ChildProcessError):
            return  # the first run fails the same way and reports it
        if not seen:
            raise MachineError(
                f"target {self.target_kind!r} runs kernels on a {self.device} device, and this machine has none (TVM's "
                f"runtime sees no {self.device} device 0): measure where there is one (or through an RPC device farm, "
                "--backend rpc)"
            )
        self._device_seen = True

    def _out_of_memory(self, task: Task) -> str:
        available = available_memory_bytes()
        return (
            f"out of memory allocating the task's buffers (about {task_memory_bytes(task) / 2**30:.2f} GiB for inputs, "
            f"output and float64 reference; {'?' if available is None else f'{available / 2**30:.1f}'} GiB available)"
        )

    def _death_cause(self, task: Task) -> str:
        """Why the runner process died: a kernel crash, or (killed while its buffers fill most of the
        available memory) the out-of-memory killer."""
        available = available_memory_bytes()
        if available is not None and 2 * task_memory_bytes(task) > available:
            return f"the runner process was killed, probably {self._out_of_memory(task)} (it was restarted)"
        return "the kernel crashed the runner process (it was restarted)"

    def measure(
        self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
    ) -> list[MeasureResult]:
        if self._closed:
            raise RuntimeError(f"this {type(self).__name__} is closed")
        configs = valid_configs(task, configs)
        self._require_device()
        results = []
        for position, built in enumerate(self.build(task, configs)):  # builds first: never during timings
            if built.path is None:
                results.append(built.failure())
            else:
                results.append(self.run_one(task, built))
            if on_result is not None:
                on_result(position, results[-1])
        return results

    def close(self) -> None:
        self.builder.close()
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        self._closed = True
