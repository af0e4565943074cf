"""Add a latency backend

A latency backend turns configs of a task into `MeasureResult`s: a latency, or an error kind and message.
Everything above it (measurement sessions, environments, agents, records, the benchmark) works with any
backend, and asks it what it is through its traits instead of its name. This tutorial writes one, a
roofline model of the tiled loop nest, uses it in an environment, an agent and a vector environment, and
keeps its measurements in a record file.

    python examples/tutorials/08_add_a_latency_backend.py
"""

# %% [markdown]
# ## The backend
# A `LatencyBackend` subclass implements `measure(task, configs, on_result)`: one result per config, in
# order, each handed to `on_result` as soon as it is known (on the calling thread), so a caller can record
# it before the batch ends. A failure is a value (`MeasureResult.failure(config, message, kind)`), never an
# exception. This one models a CPU as a roofline over the nest the CPU template builds
# (`LoopNest.cpu(task)`: the parallel prefix, the vectorised innermost loop, the unrolled one outside it):
#
# * compute: the task's flops at two per FMA, on the cores the parallel loops keep busy, on the vector
#   lanes the vectorised loop fills, slowed when the register tile has too few independent accumulators to
#   hide the FMA latency;
# * memory: the tile below the parallel loops (each operand's footprint, from its index expressions) loaded
#   once per parallel iteration, and re-streamed in proportion when it overflows the L2 cache;
# * a register tile larger than the register file fails, as a kernel that does not compile does (kind
#   `"build"`).
#
# It computes latencies for a whole array of configs at once, so it can also serve the native vector
# environments.

import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.agents import make_agent
from schedule_gym.backends import LatencyBackend, MeasureResult, ReplayBackend, ResultCallback, make_backend
from schedule_gym.envs import TilingEnv, TilingVectorEnv
from schedule_gym.errors import TaskError
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import Task, get_task
from schedule_gym.types import Config

#: what this model's records are keyed by: a change of its formula is a new version
ROOFLINE_VERSION = "roofline-v1"


class RooflineLatencies:
    """The :class:`~schedule_gym.backends.LatencyTable` a vector environment reads: latencies by dense index."""

    censored = None  # a model never stops a kernel early

    def __init__(self, backend: "RooflineBackend", task: Task, space: TileSpace) -> None:
        self.backend, self.task, self.space = backend, task, space

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        return self.backend.model_latency_s(self.task, self.space, indices)

    def require_exact(self, index: int) -> None:
        """Every latency of a model is exact."""


class RooflineBackend(LatencyBackend):
    """A roofline model of the tiled loop nest (see the tutorial's text): deterministic, no kernel built."""

    name = "roofline"
    deterministic = True
    measures_hardware = False  # nothing is timed: no record file by default, no noise
    needs_tvm = False
    #: the template versions this backend records, so that a record file of its results can be read back
    template_versions = (ROOFLINE_VERSION,)

    def __init__(self, cores: int = 2, lanes: int = 16, ghz: float = 3.0, fma_latency: int = 4,
                 vector_registers: int = 32, l2_bytes: int = 1 << 20, bandwidth_gbps: float = 20.0) -> None:
        if not all(isinstance(v, int) and v > 0 for v in (cores, lanes, fma_latency, vector_registers, l2_bytes)):
            raise ValueError(f"cores, lanes, fma_latency, vector_registers and l2_bytes must be positive integers, got "
                             f"{(cores, lanes, fma_latency, vector_registers, l2_bytes)!r}")
        if not (ghz > 0 and bandwidth_gbps > 0):
            raise ValueError(f"ghz and bandwidth_gbps must be positive, got {ghz!r} and {bandwidth_gbps!r}")
        self.cores, self.lanes, self.ghz, self.fma_latency = cores, lanes, ghz, fma_latency
        self.vector_registers, self.l2_bytes, self.bandwidth_gbps = vector_registers, l2_bytes, bandwidth_gbps
        self._spaces: dict[Task, TileSpace] = {}

    # ---- traits: what callers ask instead of switching on names
    @property
    def scores_in_bulk(self) -> bool:
        """Deterministic and vectorised: the native vector environments may read :meth:`latency_table`."""
        return True

    def latency_table(self, task: Task, space: TileSpace) -> RooflineLatencies:
        return RooflineLatencies(self, task, space)

    def record_context(self, task: Task) -> tuple[str, str]:
        """``(target, template version)`` of the records: the machine's numbers are in the target, so records of
        two machines never mix."""
        return (f"roofline:{self.cores}c{self.lanes}l{self.ghz:g}GHz", ROOFLINE_VERSION)

    def protocol_dict(self) -> dict:
        return {"l2_bytes": self.l2_bytes, "bandwidth_gbps": self.bandwidth_gbps, "fma_latency": self.fma_latency,
                "vector_registers": self.vector_registers}

    def check_task(self, task: Task) -> None:
        """Refuse, when an environment is made, a task this model cannot describe (its peak is float32's)."""
        if task.dtype != "float32":
            raise TaskError(f"the roofline backend models float32 kernels; task {task.name!r} is {task.dtype}")

    # ---- the model, over an array of dense indices
    def model_latency_s(self, task: Task, space: TileSpace, indices: np.ndarray) -> np.ndarray:
        """Latency in seconds of each config (NaN where its register tile does not fit: a build failure)."""
        nest = LoopNest.cpu(task)
        factors = dict(zip(task.dim_names, space.factors_of_indices(np.asarray(indices, dtype=np.int64))))

        def factor(position: int | None) -> np.ndarray:
            if position is None:
                return np.ones(len(indices))
            loop = nest.loops[position]
            return factors[loop.dim][:, loop.level].astype(np.float64)

        parallel = np.prod([factor(p) for p in range(nest.n_parallel)], axis=0) if nest.n_parallel else np.ones(len(indices))
        busy_cores = parallel / np.ceil(parallel / self.cores)  # iterations spread over the cores, rounds rounded up
        vector = factor(nest.vector)
        lanes_filled = vector / np.ceil(vector / self.lanes)  # lanes doing work per vector instruction
        accumulators = np.ceil(vector / self.lanes) * factor(nest.unroll)
        latency_hidden = np.minimum(1.0, accumulators / (2 * self.fma_latency))  # two FMA ports
        compute_s = task.flops / (2 * lanes_filled * latency_hidden * busy_cores * self.ghz * 1e9)

        below = {d: np.ones(len(indices)) for d in task.dim_names}  # the tile each parallel iteration works on
        for loop in nest.loops[nest.n_parallel:]:
            below[loop.dim] = below[loop.dim] * factors[loop.dim][:, loop.level]
        tile_bytes = sum(np.multiply(*operand_extents(o, below, np.ceil, np.minimum)) for o in task.operands)
        tile_bytes = tile_bytes * task.dtype_bytes
        restreams = np.maximum(1.0, tile_bytes / self.l2_bytes)
        memory_s = tile_bytes * parallel * restreams / (self.bandwidth_gbps * 1e9)

        latency = np.maximum(compute_s, memory_s)
        return np.where(accumulators > self.vector_registers - 2, np.nan, latency)  # two registers for operands

    def measure(self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
                ) -> list[MeasureResult]:
        space = self._spaces.setdefault(task, TileSpace(task))
        latencies = self.model_latency_s(task, space, np.array([space.index(c) for c in configs], dtype=np.int64))
        results = []
        for position, (config, latency) in enumerate(zip(configs, latencies.tolist())):
            if np.isnan(latency):
                result = MeasureResult.failure(config, f"the register tile needs more than the {self.vector_registers} "
                                                       "vector registers", "build")
            else:
                result = MeasureResult(config, latency, costs_s=(latency,))
            results.append(result)
            if on_result is not None:
                on_result(position, result)
        return results


# %% [markdown]
# ## Its traits
# Callers never ask a backend for its name or class: the command line decides on a record file from
# `measures_hardware`, on importing TVM from `needs_tvm`, the vector environments on `scores_in_bulk`; the
# `"features"` observation asks `cpu_profile()` (None here: the mock's profile of this machine is used),
# kernel export asks `kernel_target` (None: it builds no kernels), and `record_store` /
# `measuring_backend` say which file a wrapper appends to and whose measurements those are.

roofline = RooflineBackend()
for trait in ("measures_hardware", "needs_tvm", "scores_in_bulk", "kernel_target", "record_store"):
    print(f"{trait:>18}: {getattr(roofline, trait)}")
print(f"{'cpu_profile()':>18}: {roofline.cpu_profile()}")

task = get_task("gemm-256")
space = TileSpace(task)
s0, failing = space.initial_config(), ((1, 1, 1, 256), (256, 1), (1, 1, 1, 256))
for result in roofline.measure(task, [s0, failing]):
    print(result.config, "->", f"{result.latency_s * 1e3:.3f} ms" if result.ok else f"{result.error_kind}: {result.error}")

# %% [markdown]
# ## In an environment and an agent
# An environment takes the backend object wherever a name would go (`backend=roofline`); it calls
# `check_task` when it is made, so a task the backend cannot measure is refused at once. An agent drives the
# environment's measurement session, so it runs on the new backend unchanged.

env = TilingEnv(task=task, backend=roofline, reward="log_speedup_prev")
obs, info = env.reset(seed=0)
obs, reward, terminated, truncated, info = env.step(env.unwrapped.space.parse_action("n: 2x[3] /2[0]"))
print(f"one step: reward {reward:.3f}, latency {info['latency_s'] * 1e3:.3f} ms")
result = make_agent("gbfs", seed=0).run(env, 300)
print(f"G-BFS on the roofline: {result.num_measurements} measurements, best {result.best_latency_s * 1e3:.4f} ms "
      f"at {result.best_config}")
env.close()

try:
    TilingEnv(task=get_task("gemm-256", dtype="float64"), backend=roofline)
except TaskError as exc:
    print("refused:", exc)

# %% [markdown]
# Since it `scores_in_bulk`, the native vector environment reads its `latency_table` and steps N
# sub-environments as arrays; a failing config is a NaN in the table and the same `failure_penalty` as in
# the single environment.

envs = TilingVectorEnv(32, task=task, backend=roofline, start="random", reward="log_speedup_prev")
obs, info = envs.reset(seed=0)
rng = np.random.default_rng(0)
for _ in range(50):
    actions = np.array([rng.choice(np.flatnonzero(row)) for row in envs.action_masks()])
    obs, rewards, terminated, truncated, info = envs.step(actions)
print("vector environment:", envs.num_envs, "sub-environments, last mean reward", round(float(rewards.mean()), 3))
envs.close()

# %% [markdown]
# ## Records
# `make_backend("replay", records=path, delegate=backend)` (what `backend_options={"records": path}` builds for
# a named backend) serves configs from a record file and measures the misses with the delegate, appending
# each result the moment it is known, keyed by task, `record_context` (target and template version) and
# config. So a second run measures nothing its file holds. Records are read back only with template
# versions the code knows: a backend of one's own declares them in `template_versions`.

folder = Path(tempfile.mkdtemp())
records = folder / "roofline.jsonl"


class CountingRoofline(RooflineBackend):
    """The roofline, counting the configs it is asked to measure (to show what the records save)."""

    asked = 0

    def measure(self, task: Task, configs: Sequence[Config], on_result: ResultCallback | None = None
                ) -> list[MeasureResult]:
        CountingRoofline.asked += len(configs)
        return super().measure(task, configs, on_result)


for run in (1, 2):
    CountingRoofline.asked = 0
    backend = make_backend("replay", records=str(records), delegate=CountingRoofline())
    print(f"run {run}: measuring backend {backend.measuring_backend.name!r}, appends to {backend.record_store.path.name}")
    result = make_agent("random", seed=0).run(TilingEnv(task=task, backend=backend), 100)
    print(f"run {run}: {result.num_measurements} measurements, {CountingRoofline.asked} asked of the model")
    backend.close()

# %% [markdown]
# Without a delegate, `ReplayBackend` serves the file alone (every config must be there: a miss is a
# `MissingRecordError` naming it). Its template version is not one of the package's, so it is named
# (`template=`); a record file may hold several backends' records, and `target=` chooses among them.

replay = ReplayBackend(str(records), template=ROOFLINE_VERSION)
target, template = replay.record_context(task)
held = replay.stores[0].records_of(task, target, template)
print(f"{records.name}: {len(held)} records of {task.name} for {target} / {template}")
again = replay.measure(task, [held[0].result.config])[0]
print("replayed:", again.config, f"{again.latency_s * 1e3:.4f} ms")
replay.close()

# %% [markdown]
# ## A name of its own
# Backends by name (`backend="roofline"`, `--backend roofline`) are the entries of `BACKENDS` in
# `schedule_gym/backends/__init__.py`, each a `BackendSpec` (its maker and what it is, known before it is
# made); the maker wraps the backend in the record file it is given:
#
# ```python
# def _roofline(records: Any = None, **options: Any) -> LatencyBackend:
#     return _with_records(RooflineBackend(**options), records)
#
# BackendSpec("roofline", _roofline),   # measures_hardware, needs_tvm, serves_records, remote: all False
# ```
#
# `BACKENDS` is a table of the package, with no function that adds a backend at run time; until a backend
# has its line, pass the object, as above. Its tests: a few configs measured, failures as values and
# `on_result` called once per position, `check_task`, an environment episode on it (and the vector
# environment equal to it), its records read back; and the golden rollouts of the existing ids unchanged.
