"""Named tasks and suites: the layers of real networks that the field tunes, each with its weight.

* :data:`PRESETS`: single GEMMs by name (the paper's square shapes, BERT/GPT-2/ResNet matmuls);
* :data:`SUITES`: the distinct tunable layers of a network, each with how often it occurs (its weight
  in the network's latency): ``resnet50`` (ResNet-50 v1 at batch 1, 224x224: its 20 distinct conv2d
  layers, the 3x3 stride-2 max pool after the stem, the global average pool and the classifier),
  ``resnet18`` (11 conv2d, the two pools and the classifier: 14 tasks), ``mobilenetv2`` (MobileNet-V2 1.0
  at 224x224: its depthwise and pointwise convolutions, the global average pool and the classifier),
  ``bert-base`` (BERT-base at 128 tokens: its dense layers with their epilogues and the attention batch
  matmuls), ``zoo-<network>`` (every network of the model zoo, :mod:`schedule_gym.models.zoo`, as its import and
  mapping give its tasks: :mod:`schedule_gym.tasks.suite_files`), ``metaschedule`` (TVM MetaSchedule's
  single-operator workloads C2D, GMM, DEP, GRP, DIL at the shapes of
  ``tvm.s_tir.meta_schedule.testing.te_workload``), and the protocols' frozen splits
  (``v1-validation``: protocol v1's validation split, its tasks kept as they were drawn).

A suite task is named ``suite/layer`` (``resnet50/conv2``, ``resnet50/maxpool``); :func:`get_task` resolves
every name. ``get_suite(name, operators)`` keeps the layers of some operators only (:data:`V0_OPERATORS`:
those the suites held when the v0 environment ids and benchmark protocol were defined).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from schedule_gym.operators import OPERATORS, get_operator, packed_task
from schedule_gym.operators.batch_matmul import batch_matmul
from schedule_gym.operators.conv2d import conv2d, conv2d_output_hw
from schedule_gym.operators.dense import dense
from schedule_gym.operators.gemm import GEMM, gemm
from schedule_gym.operators.pool2d import pool2d
from schedule_gym.tasks.suite_files import (
    load_shipped_suite, load_suite_file, shipped_split_files, shipped_suite_files,
)
from schedule_gym.tasks.task import SuiteTask, Task

__all__ = ["PRESETS", "SUITES", "V0_OPERATORS", "SuiteTask", "expand_suites", "get_suite", "get_task", "parse_operators",
           "suite_names", "task_names"]

#: The operators of the suites' layers when the v0 environment ids and benchmark protocol were defined: they
#: keep their suites to these (``get_suite(name, V0_OPERATORS)``), so their task lists stay as they were.
V0_OPERATORS = "conv2d,dense,batch_matmul"

#: Named tasks: (m, k, n) of GEMMs. The square ones are the paper's (Section 5); the others are the
#: matrix multiplications of well-known models at batch x sequence = 128 x ... tokens.
PRESETS: dict[str, tuple[int, int, int]] = {
    "gemm-64": (64, 64, 64),
    "gemm-128": (128, 128, 128),
    "gemm-256": (256, 256, 256),
    "gemm-512": (512, 512, 512),
    "gemm-1024": (1024, 1024, 1024),
    "gemm-2048": (2048, 2048, 2048),
    # BERT-base (hidden 768, FFN 3072), 128 tokens: fused QKV projection, attention output, FFN up/down.
    "bert-base-qkv": (128, 768, 2304),
    "bert-base-attn-out": (128, 768, 768),
    "bert-base-ffn-up": (128, 768, 3072),
    "bert-base-ffn-down": (128, 3072, 768),
    # GPT-2 small (hidden 768), 1024 tokens: the MLP's first layer; ResNet-50's classifier at batch 32.
    "gpt2-mlp-up": (1024, 768, 3072),
    "resnet50-fc": (32, 2048, 1000),
}


def _conv(h: int, ci: int, co: int, k: int, s: int = 1, groups: int = 1) -> dict:
    return dict(n=1, h=h, w=h, ci=ci, co=co, kernel=k, stride=s, padding=k // 2, groups=groups)


#: the builder and the layer name of each kind of layer a network lists (convolutions are numbered in order)
_LAYERS = {"conv2d": (conv2d, "conv"), "dense": (dense, "fc"), "maxpool": (pool2d, "maxpool"), "avgpool": (pool2d, "avgpool")}


def _counted(layers: list[tuple[str, dict]], prefix: str) -> list[SuiteTask]:
    """Distinct layers in first-seen order, with their multiplicity."""
    seen: dict[tuple, list] = {}
    for kind, kw in layers:
        key = (kind, tuple(sorted(kw.items())))
        if key in seen:
            seen[key][1] += 1
        else:
            seen[key] = [kw, 1]
    out = []
    convs = 0
    for (kind, _), (kw, weight) in seen.items():
        build, label = _LAYERS[kind]
        if kind == "conv2d":
            label, convs = f"{label}{convs}", convs + 1
        name = f"{prefix}/{label}"
        out.append(SuiteTask(name, build(**kw, name=name), weight))
    return out


def _global_avgpool(h: int, c: int) -> tuple[str, dict]:
    return ("avgpool", dict(n=1, h=h, w=h, c=c, kernel=h, kind="avg"))


def _resnet(blocks: tuple[int, ...], bottleneck: bool, prefix: str) -> list[SuiteTask]:
    """ResNet v1 at batch 1, 224x224 (He et al. 2016): the stride of a stage sits on its first convolution
    (the 1x1 of a bottleneck), the downsampling shortcut is a strided 1x1 convolution."""
    layers: list[tuple[str, dict]] = [("conv2d", _conv(224, 3, 64, 7, 2)),
                                      ("maxpool", dict(n=1, h=112, w=112, c=64, kernel=3, stride=2, padding=1, kind="max"))]
    h, cin = 56, 64  # after the 3x3 stride-2 max pool
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        cout = width * 4 if bottleneck else width
        for b in range(count):
            s = 2 if (b == 0 and stage > 0) else 1
            if bottleneck:
                layers.append(("conv2d", _conv(h, cin, width, 1, s)))
                ho = h // s
                layers.append(("conv2d", _conv(ho, width, width, 3)))
                layers.append(("conv2d", _conv(ho, width, cout, 1)))
            else:
                layers.append(("conv2d", _conv(h, cin, width, 3, s)))
                ho = h // s
                layers.append(("conv2d", _conv(ho, width, width, 3)))
            if b == 0 and (s != 1 or cin != cout):
                layers.append(("conv2d", _conv(h, cin, cout, 1, s)))
            h, cin = ho, cout
    layers.append(_global_avgpool(h, cin))
    layers.append(("dense", dict(m=1, k=cin, n=1000, bias=True)))
    return _counted(layers, prefix)


def _mobilenetv2() -> list[SuiteTask]:
    """MobileNet-V2 1.0 at batch 1, 224x224 (Sandler et al. 2018, Table 2): stem, inverted residual blocks
    (1x1 expansion, 3x3 depthwise, 1x1 projection), the last 1x1 convolution, the global average pool and the
    classifier."""
    layers: list[tuple[str, dict]] = [("conv2d", _conv(224, 3, 32, 3, 2))]
    h, cin = 112, 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            if t != 1:
                layers.append(("conv2d", _conv(h, cin, hidden, 1)))
            layers.append(("conv2d", _conv(h, hidden, hidden, 3, stride, groups=hidden)))
            h = conv2d_output_hw(h, h, 3, 3, (stride, stride), (1, 1), (1, 1))[0]
            layers.append(("conv2d", _conv(h, hidden, c, 1)))
            cin = c
    layers.append(("conv2d", _conv(h, cin, 1280, 1)))
    layers.append(_global_avgpool(h, 1280))
    layers.append(("dense", dict(m=1, k=1280, n=1000, bias=True)))
    return _counted(layers, "mobilenetv2")


def _bert_base(tokens: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, layers: int = 12) -> list[SuiteTask]:
    """BERT-base's encoder at batch 1, 128 tokens: per layer Q, K, V and output projections (dense with
    bias), the FFN (dense + bias + GELU, dense + bias), and the attention's ``Q @ K^T`` and ``P @ V`` batch
    matmuls over the 12 heads."""
    d = hidden // heads
    return [
        SuiteTask("bert-base/qkv-proj", dense(tokens, hidden, hidden, name="bert-base/qkv-proj"), 4 * layers),
        SuiteTask("bert-base/ffn-up", dense(tokens, hidden, ffn, activation="gelu", name="bert-base/ffn-up"), layers),
        SuiteTask("bert-base/ffn-down", dense(tokens, ffn, hidden, name="bert-base/ffn-down"), layers),
        SuiteTask("bert-base/attn-qk", batch_matmul(heads, tokens, d, tokens, transpose_b=True, name="bert-base/attn-qk"), layers),
        SuiteTask("bert-base/attn-pv", batch_matmul(heads, tokens, tokens, d, name="bert-base/attn-pv"), layers),
    ]


def _metaschedule() -> list[SuiteTask]:
    """The C2D, GMM, DEP, GRP and DIL entries of MetaSchedule's ``te_workload.CONFIGS`` (each weight 1)."""
    out = []
    c2d = [(1, 224, 224, 3, 64, 7, 2, 3), (1, 56, 56, 64, 64, 1, 1, 0), (1, 14, 14, 256, 256, 3, 1, 1), (1, 7, 7, 512, 512, 3, 1, 1)]
    for i, (n, h, w, ci, co, k, s, p) in enumerate(c2d):
        out.append(SuiteTask(f"metaschedule/C2D-{i}", conv2d(n, h, w, ci, co, k, s, p, name=f"metaschedule/C2D-{i}"), 1))
    for i, (b, m, n, k) in enumerate([(1, 128, 128, 128), (1, 512, 32, 512), (1, 512, 512, 512), (1, 1024, 1024, 1024)]):
        out.append(SuiteTask(f"metaschedule/GMM-{i}", batch_matmul(b, m, k, n, name=f"metaschedule/GMM-{i}"), 1))
    for i, (n, h, w, c, k, s, p) in enumerate([(1, 112, 112, 32, 3, 1, 1), (1, 112, 112, 64, 3, 2, 1), (1, 14, 14, 512, 3, 2, 1), (1, 7, 7, 1024, 3, 1, 1)]):
        name = f"metaschedule/DEP-{i}"
        out.append(SuiteTask(name, conv2d(n, h, w, c, c, k, s, p, groups=c, name=name), 1))
    for i, (n, h, w, ci, co, k, s, p, d, g) in enumerate([(1, 56, 56, 64, 128, 3, 2, 1, 1, 4), (1, 56, 56, 64, 64, 1, 1, 0, 1, 4)]):
        name = f"metaschedule/GRP-{i}"
        out.append(SuiteTask(name, conv2d(n, h, w, ci, co, k, s, p, dilation=d, groups=g, name=name), 1))
    for i, (n, h, w, ci, co, k, s, p, d) in enumerate([(1, 224, 224, 3, 64, 7, 2, 3, 2), (1, 56, 56, 64, 64, 1, 1, 0, 2)]):
        name = f"metaschedule/DIL-{i}"
        out.append(SuiteTask(name, conv2d(n, h, w, ci, co, k, s, p, dilation=d, name=name), 1))
    return out


_SUITE_BUILDERS = {
    "resnet50": lambda: _resnet((3, 4, 6, 3), True, "resnet50"),
    "resnet18": lambda: _resnet((2, 2, 2, 2), False, "resnet18"),
    "mobilenetv2": _mobilenetv2,
    "bert-base": _bert_base,
    "metaschedule": _metaschedule,
    # the zoo's networks as mapped from PyTorch (schedule_gym/data/suites/zoo-<network>.json)
    **{name: (lambda name=name: load_shipped_suite(name)) for name in shipped_suite_files()},
    # the protocols' frozen splits (schedule_gym/data/splits/<name>.json: v1-validation)
    **{name: (lambda path=path: load_suite_file(path)) for name, path in shipped_split_files().items()},
}
#: Suite names; :func:`get_suite` builds one (a few milliseconds).
SUITES: tuple[str, ...] = tuple(_SUITE_BUILDERS)
_BUILT: dict[str, list[SuiteTask]] = {}


def parse_operators(operators: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """Operator names from ``"conv2d,dense"`` or a sequence of names, each checked against the registry;
    None (every operator) stays None."""
    if operators is None:
        return None
    names = operators.split(",") if isinstance(operators, str) else list(operators)
    return tuple(get_operator(name.strip() if isinstance(name, str) else name).name for name in names)


def get_suite(name: str, operators: str | Sequence[str] | None = None) -> list[SuiteTask]:
    """The distinct layers of a suite with their weights; ``operators`` (``"conv2d,dense"``) keeps the
    layers of those operators only (None: every layer).

    >>> [len(get_suite(s)) for s in ("resnet50", "resnet18")]
    [23, 14]
    >>> [t.name for t in get_suite("resnet18", operators="pool2d")]
    ['resnet18/maxpool', 'resnet18/avgpool']
    >>> sum(t.weight for t in get_suite("resnet50", operators="conv2d"))
    53
    """
    if not isinstance(name, str) or name not in _SUITE_BUILDERS:
        raise ValueError(f"unknown suite {name!r}; known suites: {', '.join(SUITES)}")
    if name not in _BUILT:
        _BUILT[name] = _SUITE_BUILDERS[name]()
    kept = parse_operators(operators)
    return [t for t in _BUILT[name] if kept is None or t.task.op in kept]


def expand_suites(tasks: str | Sequence[Task | str], operators: str | Sequence[str] | None) -> list[Task | str]:
    """The items of a task list (comma-separated or a sequence) with every suite name replaced by its layers of
    ``operators`` (:func:`get_suite`); task names and tasks are kept as they are."""
    items: list[Task | str] = tasks.split(",") if isinstance(tasks, str) else list(tasks)
    out: list[Task | str] = []
    for item in items:
        if isinstance(item, str) and item.strip() in _SUITE_BUILDERS:
            out.extend(s.task for s in get_suite(item.strip(), operators))
        else:
            out.append(item)
    return out


def suite_names() -> list[str]:
    return list(SUITES)


def task_names() -> list[str]:
    """Every named task: the GEMM presets, then every suite's layers."""
    return list(PRESETS) + [t.name for s in SUITES for t in get_suite(s)]


def _task_of_name(name: str, split_counts: dict[str, int], dtype: str) -> Task | None:
    """The task a builder's name stands for (``conv2d-1x56x56x64-64-k3-s1-p1``, ``bmmNT-12x128x64x128``...), each
    operator parsing its own names; a GEMM takes ``split_counts``, the others their default splits."""
    for op in OPERATORS.values():
        task = op.task_of_name(name, dtype=dtype, **(split_counts if op is GEMM else {}))
        if task is not None:
            return task
    return None


def get_task(name: str, d_m: int = 4, d_k: int = 2, d_n: int = 4, dtype: str = "float32") -> Task:
    """A task by name: a GEMM preset (:data:`PRESETS`), a GEMM named by its shape (``gemm-MxKxN``; both
    take the split counts ``d_m, d_k, d_n``), the name an operator builder gives its task
    (``conv2d-1x56x56x64-64-k3-s1-p1``, ``bmmNT-12x128x64x128``, ``dense-128x768x3072+bias+gelu``; default
    splits), the packed form of one of those for its operator's packed template (``gemm-``, ``batch_matmul-cpu-v4``, ``dense-``, ``conv2d-cpu-v5``)
    (its name + ``-packed``: ``gemm-MxKxN-packed``, ``dense-128x768x3072+bias+gelu-packed``), or a suite layer
    (``resnet50/conv2``).

    >>> get_task("conv2d-1x8x8x4-8-k3x1-s2-p1x0-g2-nchw").name
    'conv2d-1x8x8x4-8-k3x1-s2-p1x0-g2-nchw'
    """
    if isinstance(name, str) and "/" in name:
        suite = name.split("/", 1)[0]
        if suite not in _SUITE_BUILDERS:
            raise ValueError(f"unknown suite {suite!r} in task name {name!r}; known suites: {', '.join(SUITES)}")
        for entry in get_suite(suite):
            if entry.name == name:
                return entry.task if dtype == entry.task.dtype else replace(entry.task, dtype=dtype)
        known = ", ".join(t.name.split("/", 1)[1] for t in get_suite(suite))
        raise ValueError(f"unknown layer {name!r} of suite {suite!r}; its layers: {known}")
    split_counts = {"d_m": d_m, "d_k": d_k, "d_n": d_n}
    if isinstance(name, str) and name in PRESETS:
        return gemm(*PRESETS[name], **split_counts, dtype=dtype, name=name)
    by_name = _task_of_name(name, split_counts, dtype) if isinstance(name, str) else None
    if by_name is not None:
        return by_name
    if isinstance(name, str) and name.endswith("-packed"):
        base = name[: -len("-packed")]
        if base not in PRESETS and _task_of_name(base, {}, dtype) is None:
            packable = ", ".join(op.name for op in OPERATORS.values() if op.packed is not None)
            raise ValueError(f"unknown task {name!r}: -packed follows the name of a GEMM preset or of a task of an "
                             f"operator with a packed form ({packable})")
        return packed_task(get_task(base, dtype=dtype))
    raise ValueError(
        f"unknown task {name!r}; known tasks: {', '.join(PRESETS)}, gemm-MxKxN, operator task names (+ -packed), or "
        f"SUITE/LAYER with a suite from {', '.join(SUITES)} (schedule-gym tasks lists them)"
    )
