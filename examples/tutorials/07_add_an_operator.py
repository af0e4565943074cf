"""Add an operator

An operator is everything schedule-gym knows about one kind of tensor computation: how to describe it as a
loop nest (the task builder and its names), what it is to a measurement (its workload: definition, inputs,
reference, check) and where it appears (templates, model mapping, environment). Each lives in one module
of `schedule_gym/operators/` that ends with one `Operator`, and the registry
(`schedule_gym/operators/__init__.py`) lists the modules: adding an operator is adding its module and one
line there. This tutorial writes such a module for a 1-D convolution, following
`schedule_gym/operators/pool2d.py`, checks it, and tunes it on the mock backend.

    python examples/tutorials/07_add_an_operator.py
"""

# %% [markdown]
# ## The module: the builder
# A builder returns a `Task`: plain data. The loop dimensions come spatial first (the innermost spatial one
# last: the CPU template vectorises it), then the reductions, each with its split count (4 per spatial
# dimension and 2 per reduction by default: MetaSchedule's CPU structure). Each operand lists one index
# expression per axis, a sum of `Term`s: the input of a strided convolution is read at `w*stride + rw`.
# Parameters that are not shapes go in `params`; the default name must parse back (below). Impossible
# geometry is an error naming the bad value, as for every builder.
#
# In the package this is `schedule_gym/operators/conv1d.py`; here it is the top of the script.

import re
from typing import Any

import gymnasium
import numpy as np

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.agents import make_agent
from schedule_gym.envs import TilingEnv, TilingVectorEnv
from schedule_gym.operators import Operator, Workload
from schedule_gym.operators.base import REDUCTION_SPLITS, SPATIAL_SPLITS, split_tuple
from schedule_gym.tasks import LoopDim, Operand, Task, Term, check_positive_int


def conv1d(n: int, w: int, ci: int, co: int, kernel: int, stride: int = 1, padding: int = 0,
           splits: Any = None, dtype: str = "float32", name: str | None = None) -> Task:
    """1-D convolution (PyTorch's semantics) of an ``n x w x ci`` input (NWC) with ``co`` filters of width
    ``kernel``: ``O[n, w, co] = sum_{rw, rc} I[n, w*stride + rw - padding, rc] * W[rw, rc, co]``."""
    n, w, ci, co, kernel, stride = (check_positive_int(v, x) for v, x in (
        (n, "n"), (w, "w"), (ci, "ci"), (co, "co"), (kernel, "kernel"), (stride, "stride")))
    if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
        raise ValueError(f"padding must be a non-negative integer, got {padding!r}")
    wo = (w + 2 * padding - kernel) // stride + 1
    if wo < 1:
        raise ValueError(f"the kernel of width {kernel} is wider than the input of width {w} padded by {padding}")
    names = ("n", "w", "co", "rw", "rc")
    sizes = {"n": n, "w": wo, "co": co, "rw": kernel, "rc": ci}
    default = tuple(REDUCTION_SPLITS if x.startswith("r") else SPATIAL_SPLITS for x in names)
    s = split_tuple(default if splits is None else splits, 5, "conv1d splits (n w co rw rc)")
    dims = tuple(LoopDim(x, sizes[x], sx, reduction=x.startswith("r")) for x, sx in zip(names, s))
    operands = (
        Operand("I", ((Term("n"),), (Term("w", stride), Term("rw")), (Term("rc"),))),
        Operand.of_dims("W", ("rw", "rc", "co")),
        Operand.of_dims("O", ("n", "w", "co"), output=True),
    )
    label = f"conv1d-{n}x{w}x{ci}-{co}-k{kernel}-s{stride}-p{padding}"
    params = (("in_w", w), ("stride", stride), ("padding", padding))
    return Task(name=name or label, op="conv1d", dims=dims, operands=operands, dtype=dtype, params=params)


_NAME = re.compile(r"^conv1d-(\d+)x(\d+)x(\d+)-(\d+)-k(\d+)-s(\d+)-p(\d+)$")


def parse_name(name: str) -> dict[str, Any] | None:
    """``conv1d-1x128x64-64-k3-s1-p1`` -> the builder's arguments (None: not a conv1d name)."""
    match = _NAME.match(name)
    if match is None:
        return None
    n, w, ci, co, k, s, p = (int(x) for x in match.groups())
    return {"n": n, "w": w, "ci": ci, "co": co, "kernel": k, "stride": s, "padding": p}


# %% [markdown]
# ## The module: the workload
# The workload is what a measurement builds, runs and checks: the TE definition (TVM is imported inside
# the method, so importing the module compiles nothing; the main block is named `C` and its loops are the
# task's spatial then reduction dimensions, each in task order; a padding stage is inlined by the
# template), the input and output shapes, and the float64 NumPy reference. The default tolerance is
# Higham's bound on a `K`-term sum of products (`dot_tolerance`), evaluated on the inputs' absolute values,
# which is right for any sum of products.

class Conv1dWorkload(Workload):
    """``O[n, w, co] = sum_{rw, rc} I[n, w*stride + rw - padding, rc] * W[rw, rc, co]`` (zero padding)."""

    op = "conv1d"

    def blocks_to_inline(self, task: Task) -> tuple[str, ...]:
        return ("pad",) if task.param("padding") else ()

    def te_tensors(self, task: Task) -> list[Any]:
        from tvm import te, tirx

        n, wo, co, k, ci = (task.dim(x).extent for x in ("n", "w", "co", "rw", "rc"))
        w, stride, pad = task.param("in_w"), task.param("stride"), task.param("padding")
        inp = te.placeholder((n, w, ci), name="I", dtype=task.dtype)
        weight = te.placeholder((k, ci, co), name="W", dtype=task.dtype)
        if pad:
            padded = te.compute((n, w + 2 * pad, ci), lambda b, x, c: tirx.if_then_else(
                tirx.all(x >= pad, x < w + pad), inp[b, x - pad, c], te.const(0.0, task.dtype)), name="pad")
        else:
            padded = inp
        rw, rc = te.reduce_axis((0, k), name="rw"), te.reduce_axis((0, ci), name="rc")
        out = te.compute((n, wo, co), lambda b, x, o: te.sum(padded[b, x * stride + rw, rc] * weight[rw, rc, o],
                                                              axis=[rw, rc]), name="C")
        return [inp, weight, out]

    def input_shapes(self, task: Task) -> list[tuple[int, ...]]:
        n, k, ci, co = (task.dim(x).extent for x in ("n", "rw", "rc", "co"))
        return [(n, task.param("in_w"), ci), (k, ci, co)]

    def output_shape(self, task: Task) -> tuple[int, ...]:
        return tuple(task.dim(x).extent for x in ("n", "w", "co"))

    def compute(self, task: Task, inputs: list[np.ndarray]) -> np.ndarray:
        inp, weight = inputs
        stride, pad = task.param("stride"), task.param("padding")
        padded = np.pad(inp, ((0, 0), (pad, pad), (0, 0)))
        wo = task.dim("w").extent
        out = np.zeros(self.output_shape(task))
        for r in range(weight.shape[0]):  # one matrix product per kernel tap
            out += padded[:, r:r + stride * (wo - 1) + 1:stride, :] @ weight[r]
        return out

    def formula(self, task: Task) -> str:
        return f"conv1d of I (NWC) with W (kernel, ci, co), stride {task.param('stride')}, padding {task.param('padding')}"


# %% [markdown]
# ## The module: the `Operator`
# The module ends with one `Operator` gathering its parts. Besides the builder, the names and the workload
# it names the default template per target kind (the generic CPU template builds any operator whose nest
# follows the common rules: `<op>-cpu` with version `<op>-cpu-v1`), the registered environment and its
# default arguments, and optionally a PyTorch reference (`torch_kernel`), CUDA axes, a packed form and
# model-mapping patterns (see `pool2d.py` for all of them). Making the `Operator` checks that its parts
# agree (the workload's operator, its patterns' operators).

def torch_kernel(task: Task, inputs: Any) -> Any:
    """``F.conv1d`` on the NWC input and the (kernel, ci, co) weight, permuted to PyTorch's layouts."""
    import torch.nn.functional as F

    inp, weight = inputs
    x, w = inp.permute(0, 2, 1), weight.permute(2, 1, 0)
    return lambda: F.conv1d(x, w, stride=task.param("stride"), padding=task.param("padding")).permute(0, 2, 1)


CONV1D = Operator(
    name="conv1d",
    build=conv1d,
    parse_name=parse_name,
    workload=Conv1dWorkload(),
    templates={"llvm": "conv1d-cpu"},
    torch_kernel=torch_kernel,
    # a WaveNet-style layer: 64 channels, kernel 3, same padding
    env_id="schedule_gym/Conv1d-v0",
    env_kwargs={"n": 1, "w": 1024, "ci": 64, "co": 64, "kernel": 3, "padding": 1},
)

# %% [markdown]
# ## Checks: names, errors, the reference, the check
# What the tests of a new operator assert (`tests/test_pool2d.py` is the model): every name parses back to
# its task, bad input names the bad value, the NumPy reference equals an independent one (PyTorch's), and
# the workload's check rejects wrong outputs while accepting right ones.

import torch  # noqa: E402

task = conv1d(1, 256, 32, 64, kernel=3, stride=2, padding=1)
print(task.describe())
print("input read as", task.operands[0].describe(), "| flops", task.flops)
assert CONV1D.task_of_name(task.name) == task

try:
    conv1d(1, 4, 8, 8, kernel=9)
except ValueError as exc:
    print("refused:", exc)

inputs = CONV1D.workload.inputs(task, seed=0)
expected, tolerance = CONV1D.workload.reference(task, inputs)
by_torch = CONV1D.torch_kernel(task, [torch.from_numpy(x).double() for x in inputs])().numpy()
assert np.allclose(expected, by_torch, rtol=0, atol=1e-12), "the NumPy reference differs from PyTorch's"
right = by_torch.astype(np.float32)
assert CONV1D.workload.check(task, right, expected, tolerance) is None
wrong = right.copy()
wrong[0, 5, 7] += 1e-3  # one output off by a little
print("a wrong output:", CONV1D.workload.check(task, wrong, expected, tolerance))

# %% [markdown]
# ## The registry line
# In the package, the module is registered by importing its `Operator` in
# `schedule_gym/operators/__init__.py` and adding it last to `OPERATORS` (new operators go last: the
# model mapping tries patterns of one size in registration order):
#
# ```python
# from schedule_gym.operators.conv1d import CONV1D
#
# OPERATORS: dict[str, Operator] = {op.name: op for op in (GEMM, CONV2D, DENSE, BATCH_MATMUL, POOL2D, CONV1D)}
# ```
#
# That line is all the rest of the package needs: `get_task("conv1d-1x256x32-64-k3-s2-p1")` and
# `schedule-gym tune --task conv1d-...` find its tasks by name, the template registry gets `conv1d-cpu`
# (so `backend="tvm"` compiles and checks its kernels against the reference above), `schedule_gym/Conv1d-v0`
# and its native vector environment are registered with `env_kwargs`, and the model mapping adds its
# patterns. The registry is a module-level table built at import: it has no function that adds an
# operator at run time, and the tables read from it (templates, environment ids) are made when the package
# is imported. So this script, which leaves the package as it is, uses what needs no registration below.

# %% [markdown]
# ## A TilingEnv on it
# The tile space, the environments, the loop-nest description and the mock backend read everything from
# the task itself, so a `Task` of the new operator can be tuned before it is registered: pass the object
# where a name would go.

env = TilingEnv(task=task, backend="mock", reward="log_speedup_prev")
obs, info = env.reset(seed=0)
print(env.space, "| s0:", info["config"], f"{info['latency_s'] * 1e6:.1f} us")
result = make_agent("gbfs", seed=0).run(env, 200)
print(f"G-BFS, 200 measurements: best {result.best_latency_s * 1e6:.1f} us at {result.best_config}")
env.close()

# %% [markdown]
# The vector environment takes the same task (`gymnasium.make_vec` does this once the id is registered):

envs = TilingVectorEnv(16, task=task, backend="mock", start="random")
obs, info = envs.reset(seed=0)
rng = np.random.default_rng(0)
for _ in range(20):
    actions = np.array([rng.choice(np.flatnonzero(row)) for row in envs.action_masks()])
    obs, rewards, terminated, truncated, info = envs.step(actions)
print("vector environment:", envs.num_envs, "sub-environments, observations", obs.shape)
envs.close()

# %% [markdown]
# ## An id of its own
# The registry line registers `schedule_gym/Conv1d-v0` with the package's factory. Until then, Gymnasium's
# own `register` gives the operator an id under another namespace, splitting keyword arguments between the
# builder and the environment as the package's factory does:

import inspect  # noqa: E402

BUILDER_ARGS = set(inspect.signature(conv1d).parameters) - {"name"}


def conv1d_env(**kwargs: Any) -> TilingEnv:
    task = conv1d(**{k: v for k, v in kwargs.items() if k in BUILDER_ARGS})
    return TilingEnv(task=task, **{k: v for k, v in kwargs.items() if k not in BUILDER_ARGS})


gymnasium.register(id="tutorial/Conv1d-v0", entry_point=conv1d_env, kwargs=dict(CONV1D.env_kwargs),
                   max_episode_steps=100)
env = gymnasium.make("tutorial/Conv1d-v0", reward="log_speedup_prev")
obs, info = env.reset(seed=0)
print(env.unwrapped.task.name, "| actions:", env.action_space, "| observation:", env.observation_space.shape)
env.close()

# %% [markdown]
# ## Next
# In the package: the module in `schedule_gym/operators/`, its line in the registry, the tests of the
# checks above plus the TVM ones (the CPU template's kernels checked against the reference on odd shapes
# and every parameter; `tests/test_pool2d.py`), the builder in `schedule_gym.tasks`' exports, and whether
# the mock ranks real kernels of the new operator (`schedule-gym calibrate` on a sample). A new id starts
# at `-v0` (see [Versioning](../versioning.md)); the v0 suites, ids and protocol keep their task lists
# (`V0_OPERATORS`), so adding an operator changes none of them.
