"""The ``"features"`` observation space: what the tiled loop nest does on the machine, and where the search is.

Built from the one description of the nest (:class:`~schedule_gym.loopnest.LoopNest`, operand footprints from
:func:`~schedule_gym.loopnest.operand_extents`) and the machine's numbers (a
:class:`~schedule_gym.backends.mock.CPUProfile`: vector width, registers, cores, cache sizes), so a new operator
such as a depthwise convolution is described in the same terms as the ones a policy was trained on. Every
entry is in [0, 1]; the layout is fixed for a :class:`~schedule_gym.envs.observations.TaskLayout`:

=============================  =========================================================================================
entries                        meaning
=============================  =========================================================================================
``layout.size``                the multi-task layout: operator one-hot; per dimension slot the factors
                               (``log s / log extent``), ``log2(extent) / 24`` and the reduction flag
9 operator parameters          ``stride / 4``, ``dilation / 4``, groups as ``log(groups) / log(channels)`` (1: depthwise),
                               kernel height and width ``/ 7``, the two transposes, bias, a non-trivial activation
14 nest features               parallel extent (``log2 / 16``) and its balance over the cores; vector loop extent
                               (``log2 / 10``) and the share of vector lanes it fills; unrolled extent (``log2 / 10``);
                               accumulators against the vector registers and whether they spill; per cache level (3)
                               the depth in the nest where the tile first fits (0 outermost, 1 innermost) and
                               ``log2(footprint / capacity)`` of the tile below the first reduction loop (``/ 20 + 1/2``);
                               arithmetic intensity of that tile (flops per byte, ``log2 / 12 + 1/2``)
4 search state                 latency of the current config and best latency of the session relative to the
                               episode's start (``log10 ratio / 6 + 1/2``; 1/2 when unknown), budget left (fraction),
                               whether the current config's measurement failed
``layout.max_actions``         per action: 1 if the move leads to a config this session has already measured
``layout.max_actions * 14``    ``"move_features"`` only: per action, the 14 nest features of the config the move leads
                               to (all 0 for an illegal move), so a policy can score every move by where it goes in the
                               same terms for every operator (a shared scorer over actions)
=============================  =========================================================================================

:class:`FeatureTables` computes the config part for many configs of one task at once (NumPy over arrays:
the vector environments call it once per step for all their configs, one NumPy pass per group of tasks with equal
loop nests and operand expressions, the single ones with one config), so single and
vector environments observe the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from schedule_gym.backends import LatencyBackend
from schedule_gym.backends.mock.selection import select_profile
from schedule_gym.envs.observations import GatherTables, TaskLayout
from schedule_gym.loopnest import LoopNest, operand_extents
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks.task import Task

__all__ = ["N_NEST", "N_PARAMS", "N_SEARCH", "FeatureTables", "machine_profile"]

N_PARAMS = 9
N_NEST = 14
N_SEARCH = 4
#: the cache levels described (a profile with fewer repeats its last)
LEVELS = 3
_LOG10_SPAN = 6.0  # a latency ratio of 10**-3 .. 10**3 maps onto [0, 1]


def machine_profile(backend: LatencyBackend) -> object:
    """The CPU profile the features describe: the one the backend models, else the mock's pick for this machine."""
    profile = backend.cpu_profile()
    return select_profile()[0] if profile is None else profile


def _param(task: Task, name: str, default: object) -> object:
    return task.param(name, default)


def operator_parameters(task: Task) -> np.ndarray:
    """The operator's parameters beyond its shape, as the 9 entries of the table above."""
    stride = _param(task, "stride", (1, 1))
    dilation = _param(task, "dilation", (1, 1))
    groups = int(_param(task, "groups", 1))  # type: ignore[arg-type]
    channels = groups * (task.dim("rc").extent if "rc" in task.dim_names else 1)
    kh = task.dim("rh").extent if "rh" in task.dim_names else 1
    kw = task.dim("rw").extent if "rw" in task.dim_names else 1
    activation = _param(task, "activation", "none")
    values = [
        max(stride) / 4.0,  # type: ignore[arg-type]
        max(dilation) / 4.0,  # type: ignore[arg-type]
        math.log(groups) / math.log(channels) if groups > 1 and channels > 1 else 0.0,
        kh / 7.0,
        kw / 7.0,
        float(bool(_param(task, "transpose_a", False))),
        float(bool(_param(task, "transpose_b", False))),
        float(bool(_param(task, "bias", False))),
        float(activation != "none"),
    ]
    return np.clip(np.array(values, dtype=np.float64), 0.0, 1.0).astype(np.float32)


class _TaskNest:
    """One task's nest facts, precomputed: loop order, kinds, operands, per-position dimensions."""

    def __init__(self, space: TileSpace, profile: object) -> None:
        task = space.task
        self.space = space
        self.task = task
        self.nest = LoopNest.cpu(task)
        self.dim_pos = {name: x for x, name in enumerate(task.dim_names)}
        self.params = operator_parameters(task)
        self.lanes = max(1, int(profile.vector_bits) // (8 * task.dtype_bytes))  # type: ignore[attr-defined]
        self.cores = float(profile.cores)  # type: ignore[attr-defined]
        self.registers = float(profile.vector_registers)  # type: ignore[attr-defined]
        self.line = float(profile.cache_line_bytes)  # type: ignore[attr-defined]
        caches = list(profile.caches)  # type: ignore[attr-defined]
        fill = float(profile.cache_fill_fraction)  # type: ignore[attr-defined]
        self.capacity = [fill * caches[min(c, len(caches) - 1)].size_bytes for c in range(LEVELS)]
        self.point_flops = float(task.flops) / float(np.prod([d.extent for d in task.dims]))
        #: tasks with equal signatures run the same operations on their factors (one pass serves them all):
        #: the same dimensions, operand index expressions, loop nest and element size, on one profile
        self.signature = (task.dim_names, tuple(task.operands), self.nest.loops, task.dtype_bytes)

    def config_part(self, indices: np.ndarray) -> np.ndarray:
        """``(n, N_PARAMS + N_NEST)`` float32 for the configs ``indices`` of this task."""
        n = indices.shape[0]
        return self.features(self.space.factors_of_indices(indices), np.full(n, self.point_flops),
                             np.broadcast_to(self.params, (n, N_PARAMS)))

    def features(self, factors: list[np.ndarray], point_flops: np.ndarray, params: np.ndarray) -> np.ndarray:
        """:meth:`config_part` from the configs' factors (one ``(n, splits)`` array per dimension), their tasks'
        flops per point of the iteration space and their operator parameters: of any task of this signature."""
        task, nest = self.task, self.nest
        n = point_flops.shape[0]
        ext = [factors[self.dim_pos[d]][:, level].astype(np.float64) for d, level in nest.order]
        n_loops = len(ext)
        par = np.ones(n)
        for q in range(nest.n_parallel):
            par = par * ext[q]
        balance = par / (np.ceil(par / self.cores) * self.cores)
        vec = ext[nest.vector] if nest.vector is not None else np.ones(n)
        unroll = ext[nest.unroll] if nest.unroll is not None else np.ones(n)
        nvec = np.ceil(vec / self.lanes)
        lane_share = vec / (nvec * self.lanes)
        last_reduction = max((q for q, loop in enumerate(nest.loops) if loop.reduction), default=-1)
        acc = nvec.copy()
        for q in range(max(last_reduction + 1, nest.n_parallel), n_loops):
            if q != nest.vector:
                acc = acc * ext[q]
        # tile extents per dimension at and inside each loop position (position n_loops: one point), as
        # (n_loops + 1, n) arrays, so each operand's footprint is one elementwise pass
        ext_stack = np.stack(ext)
        tile = {}
        for d in task.dims:
            mine = np.array([loop.dim == d.name for loop in nest.loops])
            column = np.ones((n_loops + 1, n))
            column[:n_loops] = np.multiply.accumulate(np.where(mine[:, None], ext_stack, 1.0)[::-1], axis=0)[::-1]
            tile[d.name] = column
        footprint = np.zeros((n_loops + 1, n))
        bytes_ = task.dtype_bytes
        for operand in task.operands:
            rows, run = operand_extents(operand, {d: tile[d] for d in set(operand.dims)}, np.ceil, np.minimum)
            footprint += rows * np.ceil(run * bytes_ / self.line) * self.line
        inner = nest.first_reduction if nest.first_reduction is not None else n_loops
        tile_bytes = footprint[inner]
        tile_flops = point_flops
        for d in task.dims:
            tile_flops = tile_flops * tile[d.name][inner]
        out = [np.log2(par) / 16.0, balance, np.log2(vec) / 10.0, lane_share, np.log2(unroll) / 10.0,
               np.minimum(acc / self.registers, 4.0) / 4.0, (acc + nvec + 1 > self.registers).astype(np.float64)]
        for c in range(LEVELS):
            fits = footprint <= self.capacity[c]
            depth = np.where(fits.any(axis=0), np.argmax(fits, axis=0), n_loops)
            out.append(depth / n_loops)
            out.append(np.log2(np.maximum(tile_bytes, 1.0) / self.capacity[c]) / 20.0 + 0.5)
        out.append(np.log2(np.maximum(tile_flops / np.maximum(tile_bytes, 1.0), 1e-6)) / 12.0 + 0.5)
        nest_part = np.clip(np.stack(out, axis=1), 0.0, 1.0)
        return np.concatenate([params, nest_part], axis=1).astype(np.float32)


class FeatureTables:
    """The ``"features"`` observation of sub-environments on any of ``spaces``' tasks (see the module docstring)."""

    def __init__(self, spaces: Sequence[TileSpace], layout: TaskLayout, profile: object, moves: bool = False) -> None:
        self.layout = layout
        self.moves = bool(moves)
        self.factors = GatherTables(spaces, "fraction", False, layout)
        self._nests = [_TaskNest(s, profile) for s in spaces]
        signatures: dict[object, int] = {}
        self._group = np.array([signatures.setdefault(n.signature, len(signatures)) for n in self._nests], dtype=np.int64)
        # per group, each dimension's factor tables of its tasks stacked, and each task's first row in them: a batch's
        # factors are then one gather per dimension and group, whatever tasks it mixes
        self._leader: dict[int, _TaskNest] = {}
        self._stacked: dict[int, list[np.ndarray]] = {}
        self._row_base = np.zeros((len(spaces), max(len(s.dims) for s in spaces)), dtype=np.int64)
        for g in np.unique(self._group).tolist():
            members = np.flatnonzero(self._group == g).tolist()
            self._leader[g] = self._nests[members[0]]
            self._stacked[g] = []
            for x in range(len(spaces[members[0]].dims)):
                parts = [spaces[t].dims[x].table for t in members]
                self._row_base[members, x] = np.cumsum([0] + [p.shape[0] for p in parts])[:-1]
                self._stacked[g].append(np.concatenate(parts))
        self._point_flops = np.array([n.point_flops for n in self._nests])
        self._params = np.stack([n.params for n in self._nests])
        self.config_size = layout.size + N_PARAMS + N_NEST
        self.size = self.config_size + N_SEARCH + layout.max_actions + (layout.max_actions * N_NEST if moves else 0)
        self.space = gym.spaces.Box(0.0, 1.0, shape=(self.size,), dtype=np.float32)

    def config_part(self, tasks: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(N, config_size)``: the factor layout and the nest features of each sub-environment's config, given as
        its task (position in ``spaces``) and its row in each dimension's factor table."""
        out = np.empty((tasks.shape[0], self.config_size), dtype=np.float32)
        out[:, : self.layout.size] = self.factors.of_rows(tasks, rows)
        out[:, self.layout.size:] = self._nest_features(tasks, rows)
        return out

    def _nest_features(self, tasks: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(N, N_PARAMS + N_NEST)``: the operator parameters and nest features of the configs (tasks, rows)."""
        out = np.empty((tasks.shape[0], N_PARAMS + N_NEST), dtype=np.float32)
        groups = self._group[tasks]
        present = np.unique(groups).tolist()
        for g in present:  # one pass per signature (NumPy's per-call overhead is most of the cost of a few rows)
            at = slice(None) if len(present) == 1 else np.flatnonzero(groups == g)
            t, r = tasks[at], rows[at]
            base = self._row_base[t]
            factors = [table[base[:, x] + r[:, x]] for x, table in enumerate(self._stacked[g])]
            out[at] = self._leader[g].features(factors, self._point_flops[t], self._params[t])
        return out

    def move_part(self, n: int, env: np.ndarray, action: np.ndarray, tasks: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``(n, layout.max_actions * N_NEST)``: the ``"move_features"`` part of ``n`` observations. Each legal move
        is given as its sub-environment (``env``), its action, the task and the rows of the config it leads to; the
        entries of every other action are 0."""
        out = np.zeros((n, self.layout.max_actions, N_NEST), dtype=np.float32)
        if env.size:
            out[env, action] = self._nest_features(tasks, rows)[:, N_PARAMS:]
        return out.reshape(n, -1)

    @staticmethod
    def search_part(current_s: np.ndarray, best_s: np.ndarray, start_s: np.ndarray, budget_left: np.ndarray,
                    failed: np.ndarray) -> np.ndarray:
        """``(N, N_SEARCH)``: current and best latency against the start, budget left, current failed."""
        with np.errstate(invalid="ignore", divide="ignore"):
            current = np.log10(current_s / start_s) / _LOG10_SPAN + 0.5
            best = np.log10(best_s / start_s) / _LOG10_SPAN + 0.5
        current = np.where(np.isfinite(current), current, 0.5)
        best = np.where(np.isfinite(best), best, 0.5)
        out = np.stack([current, best, budget_left, failed.astype(np.float64)], axis=1)
        return np.clip(out, 0.0, 1.0).astype(np.float32)
