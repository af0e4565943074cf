"""From a mapped model and tuned configs to a compiled, runnable, checked model.

* :func:`schedule_kernels` puts each task's kernel, scheduled by its template with its config, in
  place of the unscheduled definition the mapping inserted. A task without a config (never measured,
  e.g. a budget smaller than one round per task) gets the mock's pick (:func:`untuned_config`: the
  best of 4,096 random configs on the calibrated mock, no measurement), or ``s0`` (the whole extent
  outermost) with ``untuned="s0"``. The kernels are marked opaque, so TVM's operator fusion leaves
  them as they are (their epilogue is already fused by the mapping).
* :func:`compile_model` builds the module with TVM's CPU pipeline (legalise, fuse, lower); the
  operators left to TVM are given a default schedule first (:func:`default_schedule`: TVM's dlight CPU
  rules for reductions — softmax, layer norm — and, for the rest, parallel outer loops and a vectorised
  inner loop). ``schedule_rest=False`` leaves them as TVM's default pipeline does: unscheduled. ``fast_math``
  replaces softmax, ``exp``, ``tanh``, ``erf`` and the GELUs left to TVM by vectorisable approximations first
  (:mod:`~schedule_gym.models.fast_math`).
* :func:`run_model` and :func:`time_model` run the compiled model in TVM's Relax virtual machine;
  :func:`profile_model` times each kernel it calls (where a model's time goes: tuned tasks, operators
  left to TVM, the VM's own builtins).

TVM's thread pool takes ``TVM_NUM_THREADS`` when it starts: set it before the first run (the CLI and
the benchmark do).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedule_gym.models.mapping import MappedModel
from schedule_gym.models.symbols import OPAQUE
from schedule_gym.types import Config

__all__ = ["KernelTime", "compile_model", "default_schedule", "fused_module", "profile_model", "run_model",
           "schedule_kernels", "time_model", "untuned_config", "virtual_machine"]

SCHEDULED_ATTR = "schedule_gym.task"


def untuned_config(task: Any, samples: int = 4096, seed: int = 0) -> Config:
    """The calibrated mock's best of ``samples`` uniform configs of ``task`` (scored, not measured)."""
    from schedule_gym.backends import MockBackend
    from schedule_gym.session import MeasureSession

    session = MeasureSession(task, MockBackend())
    n = min(samples, session.space.size)
    session.start(measurements=n)
    session.measure([int(i) for i in session.space.sample_indices(np.random.default_rng(seed), n)])
    best = session.best
    return session.space.initial_config() if best is None else best.config


def schedule_kernels(mapped: MappedModel, configs: Mapping[str, Config | None] | None = None,
                     untuned: str = "mock", templates: Sequence[str] = ()) -> Any:
    """``mapped.mod`` with every task's kernel scheduled by its template with ``configs[task name]``;
    tasks without one get :func:`untuned_config` (``untuned="mock"``) or ``s0`` (``untuned="s0"``).
    ``templates``: template names that build the tasks of their operators they can build instead of the default
    (``"auto"``'s), e.g. ``["dense-cpu-v4"]`` for the kernels of records measured with it. A kernel that takes an
    input laid out otherwise (dense's and conv2d's v5 their weight) is called with it so laid out: a constant
    once, when the module is built."""
    if untuned not in ("mock", "s0"):
        raise ValueError(f"untuned must be 'mock' or 's0', got {untuned!r}")
    from schedule_gym.spaces import TileSpace
    from schedule_gym.templates import get_template, template_of

    chosen = {}
    for name in templates:
        template = get_template(name)
        chosen.update({op: template for op in template.ops})

    configs = dict(configs or {})
    unknown = sorted(set(configs) - {t.task.name for t in mapped.tasks})
    if unknown:
        raise ValueError(f"configs for tasks the model does not have: {unknown}")
    mod = mapped.mod
    layouts: dict[str, tuple[tuple[int, int], ...]] = {}
    for model_task in mapped.tasks:
        task = model_task.task
        space = TileSpace(task)
        config = configs.get(task.name)
        if config is not None:
            config = space.validate(config)
        elif untuned == "mock":
            config = untuned_config(task)
        else:
            config = space.initial_config()
        template = chosen.get(task.op)
        try:
            if template is not None:
                template.check(task, "llvm")
        except ValueError:  # not a task it builds (a depthwise convolution for conv2d-cpu-v3): "auto"'s
            template = None
        template = template or template_of(task, "llvm")
        kernel = template.schedule(task, config)["main"]
        kernel = kernel.with_attr("global_symbol", model_task.function).with_attr("op_pattern", OPAQUE)
        mod[model_task.function] = kernel.with_attr(SCHEDULED_ATTR, task.name)
        layout = template.input_layout(task, config)
        if layout:
            layouts[model_task.function] = layout
    return _lay_out_inputs(mod, layouts) if layouts else mod


def _lay_out_inputs(mod: Any, layouts: Mapping[str, tuple[tuple[int, int], ...]]) -> Any:
    """``mod`` with the inputs of every call of a kernel in ``layouts`` (its template's ``input_layout``) laid out
    as the kernel takes them: a constant (a layer's weight) once, here; anything else by operators at run
    time. Each such kernel is called through a new GlobalVar: the old one keeps the type of the definition it
    replaced, which the calls' new arguments no longer match."""
    import tvm
    from tvm import relax
    from tvm.relax.dpl import is_op, rewrite_call, wildcard

    from schedule_gym.templates.layouts import tile_columns, tile_columns_expr

    def lay_out(arg: Any, tile: int) -> Any:
        if isinstance(arg, tvm.ir.expr.Constant):
            return relax.const(tile_columns(arg.value.numpy(), tile))
        return tile_columns_expr(arg, tile)

    builder = relax.BlockBuilder(tvm.IRModule({gvar: func for gvar, func in mod.functions_items()
                                               if gvar.name_hint not in layouts}, attrs=mod.attrs))
    renamed = {function: builder.add_func(mod[function], function) for function in layouts}

    def rewrite(call: Any) -> Any:
        # the callee by its exact name (a GlobalVarPattern would also match the names it begins, as the ``+bias``
        # kernel's name begins its ``+bias+res+relu`` sibling's); a call already rewritten is left (``rewrite_call``
        # matches its own results again until nothing changes)
        function = getattr(call.args[0], "name_hint", None)
        if function not in layouts or call.args[0].same_as(renamed[function]):
            return call
        args = list(call.args[1].fields)
        for index, tile in layouts[function]:
            args[index] = lay_out(args[index], tile)
        return relax.call_tir(renamed[function], args, call.ty_args[0])

    main = rewrite_call(is_op("relax.call_tir")(wildcard(), wildcard()), lambda call, _matched: rewrite(call),
                        mod["main"])
    out = builder.get()
    out["main"] = main
    return relax.transform.Normalize()(out)


def _parallel_vectorize(sch: Any, info: Any, vector: int) -> None:
    """Fuse the leading data-parallel loops of a block and run them in parallel; if every loop is data
    parallel, vectorise the innermost (split to ``vector`` lanes). ``info`` is dlight's block info (after
    ``normalize_prim_func`` each loop binds one block variable, of kind S, R or O)."""
    import tvm.s_tir as s_tir

    iters = list(info.iters)
    lead = []
    for it in iters:
        if it.kind != "S":
            break
        lead.append(it.loop_rv)
    if not lead:
        return
    if len(lead) == len(iters):
        extent = sch.get(lead[-1]).extent
        if hasattr(extent, "value") and extent.value > vector and extent.value % vector == 0:
            outer, vec = sch.split(lead[-1], [None, vector])
            lead[-1] = outer
            try:
                sch.vectorize(vec)
            except s_tir.ScheduleError:
                pass
    fused = sch.fuse(*lead) if len(lead) > 1 else lead[0]
    sch.parallel(fused)


def default_schedule(func: Any, target: Any) -> Any:
    """A default CPU schedule of a PrimFunc left to TVM (see the module docstring)."""
    import tvm
    import tvm.s_tir as s_tir
    from tvm.s_tir import dlight

    for rule in (dlight.cpu.Reduction(), dlight.cpu.GEMV()):
        try:
            sch = rule.apply(func, target, False)
        except (RuntimeError, ValueError):  # a rule that does not fit (TVM raises built-in types)
            sch = None
        if isinstance(sch, list):
            sch = sch[0] if sch else None
        if sch is not None:
            return sch.mod["main"]
    sch = s_tir.Schedule(tvm.IRModule({"main": func}))
    infos = dlight.normalize_prim_func(sch)
    if infos is None:
        return func
    infos = dlight.try_inline(sch, infos)
    for info in infos:
        try:
            _parallel_vectorize(sch, info, vector=8)
        except s_tir.ScheduleError:
            continue
    return sch.mod["main"]


def _default_schedule_pass(target: Any) -> Any:
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="ScheduleGymDefaultSchedule")
    def apply(mod: Any, _ctx: Any) -> Any:
        from tvm import tirx

        for gvar, func in list(mod.functions.items()):
            # ours (a task's kernel) or scheduled already (a fixed kernel, a MetaSchedule record applied): left as it is
            if not isinstance(func, tirx.PrimFunc) or (
                func.attrs is not None and (SCHEDULED_ATTR in func.attrs or func.attrs.get("tirx.is_scheduled"))):
                continue
            scheduled = default_schedule(func, target)
            if scheduled is not None:
                mod[gvar] = scheduled.with_attr("tir.is_scheduled", True)
        return mod

    return apply


def _schedule_passes(target: Any, schedule_rest: bool, apply_database: bool, fast_math: bool = False) -> list:
    """The passes of :func:`compile_model` up to its schedules: fast math (``fast_math``), TVM's CPU dispatch,
    legalisation and fusion, then the current MetaSchedule database's records (``apply_database``), then the
    default schedules."""
    from tvm import relax
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    from schedule_gym.models.fast_math import fast_math_pass

    passes = ([fast_math_pass()] if fast_math else []) + cpu.library_dispatch_passes(target) + cpu.legalize_passes(target)
    if apply_database:
        passes.append(relax.transform.MetaScheduleApplyDatabase())
    if schedule_rest:
        passes.append(_default_schedule_pass(target))
    return passes


def fused_module(mod: Any, target: Any) -> Any:
    """``mod`` legalised and fused as :func:`compile_model` does it, before any schedule: its PrimFuncs are
    the workloads a MetaSchedule tuning must see (``extract_tasks``, ``tune_relax``) for
    ``compile_model(database=...)`` to find their records."""
    import tvm

    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target
    with target:
        return tvm.transform.Sequential(_schedule_passes(target, False, False))(mod)


def compile_model(mod: Any, target: Any, schedule_rest: bool = True, database: Any = None,
                  fast_math: bool = False) -> Any:
    """The compiled model (a Relax ``Executable``): TVM's CPU pipeline, with the operators left to TVM
    given :func:`default_schedule` if ``schedule_rest``, and their softmax, ``exp``, ``tanh``, ``erf`` and GELUs
    replaced by TVM's fast approximations if ``fast_math`` (:mod:`~schedule_gym.models.fast_math`).

    ``database``: a MetaSchedule database (``tvm.s_tir.meta_schedule.database.Database``) whose records
    schedule the fused functions they were tuned for (``MetaScheduleApplyDatabase``, after legalisation and
    fusion, as ``compile_relax`` does) before the default schedules, which then take only the rest. Give
    ``mod`` before legalisation: the database's workloads are the functions this pipeline fuses.
    ``compile_relax`` itself leaves the functions without a record unscheduled on a CPU."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    target = tvm.target.Target(target) if not isinstance(target, tvm.target.Target) else target

    @tvm.transform.module_pass(opt_level=0, name="ScheduleGymPipeline")
    def pipeline(m: Any, _ctx: Any) -> Any:
        with target:
            passes = _schedule_passes(target, schedule_rest, database is not None, fast_math)
            passes += cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target)
            return tvm.transform.Sequential(passes)(m)

    with database if database is not None else contextlib.nullcontext():  # the pass reads the current database
        return tvm.compile(mod, target=target, relax_pipeline=pipeline)


def virtual_machine(executable: Any, device: Any = None) -> Any:
    """A Relax virtual machine running ``executable`` on ``device`` (default: the CPU; reused, it saves loading
    the executable on every run)."""
    import tvm
    from tvm import relax

    if isinstance(executable, relax.VirtualMachine):
        return executable
    return relax.VirtualMachine(executable, tvm.cpu() if device is None else device)


def _tvm_inputs(inputs: Sequence[Any], device: Any = None) -> list[Any]:
    import tvm

    device = tvm.cpu() if device is None else device
    return [tvm.runtime.tensor(np.ascontiguousarray(x.detach().numpy() if hasattr(x, "detach") else x), device)
            for x in inputs]


def _flatten(out: Any) -> list[np.ndarray]:
    if hasattr(out, "numpy"):
        return [out.numpy()]
    return [a for item in out for a in _flatten(item)]


def run_model(executable: Any, inputs: Sequence[Any], device: Any = None) -> list[np.ndarray]:
    """The model's outputs (flattened to a list of arrays) on ``inputs`` (tensors or arrays), run on ``device``
    (default: the CPU); ``executable`` may also be a :func:`virtual_machine` of it on that device."""
    vm = virtual_machine(executable, device)
    return _flatten(vm["main"](*_tvm_inputs(inputs, device)))


def time_model(executable: Any, inputs: Sequence[Any], repeat: int = 10, min_repeat_ms: int = 200) -> list[float]:
    """Seconds per run of the whole model, ``repeat`` times (each the mean over ``min_repeat_ms``)."""
    import tvm

    vm = virtual_machine(executable)
    args = _tvm_inputs(inputs)
    timer = vm.time_evaluator("main", tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return list(timer(*args).results)


@dataclass(frozen=True)
class KernelTime:
    """One function the compiled model calls: its symbol, the task it is the kernel of (``None`` for an
    operator left to TVM or a VM builtin), calls per run and seconds per run (the median over the runs)."""

    symbol: str
    task: str | None
    calls: int
    seconds: float


def profile_model(executable: Any, inputs: Sequence[Any], runs: int = 5, warmup: int = 1,
                  tasks: Mapping[str, str] | None = None) -> list[KernelTime]:
    """Seconds per run spent in each function the model calls, largest first.

    Uses the Relax VM's instrument hook (called before and after every call instruction), so each
    kernel is timed where it runs, with the model's own inputs and caches. The hook runs Python between
    calls, so each time includes the hook's cost and the wake-up of TVM's thread pool after it: the sum
    can exceed the model's latency (:func:`time_model`), most on models of many small kernels. Compare
    kernels within a profile; take the model's latency from :func:`time_model`.
    ``tasks`` maps kernel symbols to task names (:meth:`MappedModel.kernel_tasks`)."""
    if runs < 1 or warmup < 0:
        raise ValueError(f"runs must be >= 1 and warmup >= 0, got runs={runs!r}, warmup={warmup!r}")
    vm = virtual_machine(executable)
    args = _tvm_inputs(inputs)
    for _ in range(warmup):
        vm["main"](*args)
    starts: list[float] = []
    calls: dict[str, int] = {}
    per_run: dict[str, list[float]] = {}

    def instrument(_func: Any, symbol: str, before: bool, _ret: Any, *_args: Any) -> int:
        if before:
            starts.append(time.perf_counter())
        else:
            elapsed = time.perf_counter() - starts.pop()
            calls[symbol] = calls.get(symbol, 0) + 1
            per_run.setdefault(symbol, [0.0] * runs)[run] += elapsed
        return 0  # VMInstrumentReturnKind.NO_OP: run the call as usual

    vm.set_instrument(instrument)
    try:
        for run in range(runs):
            vm["main"](*args)
    finally:
        vm.set_instrument(None)
    tasks = dict(tasks or {})
    rows = [KernelTime(symbol, tasks.get(symbol), calls[symbol] // runs, statistics.median(times))
            for symbol, times in per_run.items()]
    return sorted(rows, key=lambda r: -r.seconds)
