"""Weights packed once (the packed dense and conv2d templates' v5): the layout, its one definition for measurements
and model builds, the kernels that take it, measured and exported, and whole models built with it equal to
PyTorch (schedule_gym.templates.layouts, packed_matmul, packed_conv2d, the TVM backend's runner, models.build)."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from schedule_gym import conv2d, dense
from schedule_gym.operators import packed_task
from schedule_gym.spaces import TileSpace
from schedule_gym.templates import PACKED, get_template
from schedule_gym.templates.layouts import PREPACKED_WEIGHTS, kernel_inputs, tile_columns, tiled_shape


@pytest.mark.parametrize("shape, tile", [((6, 12), 4), ((6, 12), 12), ((6, 12), 1), ((3, 3, 5, 8), 4), ((2, 3, 6), 2)])
def test_tile_columns_is_its_definition(shape, tile):
    array = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    out = tile_columns(array, tile)
    assert out.shape == tiled_shape(shape, tile) == (shape[-1] // tile, *shape[:-1], tile)
    assert out.flags.c_contiguous
    for j in range(shape[-1] // tile):
        for t in range(tile):
            np.testing.assert_array_equal(out[j, ..., t], array[..., j * tile + t])


def test_tile_columns_names_bad_input():
    with pytest.raises(ValueError, match=r"a tile of columns must be a positive divisor of the last axis \(12\), got 5"):
        tile_columns(np.zeros((3, 12)), 5)
    with pytest.raises(ValueError, match="got 0"):
        tile_columns(np.zeros((3, 12)), 0)
    with pytest.raises(ValueError, match="got True"):
        tile_columns(np.zeros((3, 12)), True)
    with pytest.raises(ValueError, match=r"an array of rank 2 or more, got shape \(12,\)"):
        tile_columns(np.zeros(12), 4)


def test_kernel_inputs_lay_out_only_the_named_inputs():
    x, w, b = np.ones((2, 3)), np.arange(12.0).reshape(3, 4), np.zeros(4)
    out = kernel_inputs([x, w, b], ((1, 2),))
    assert out[0] is x and out[2] is b and out[1].shape == (2, 3, 2)
    assert kernel_inputs([x, w, b], ()) == [x, w, b]


def test_v5_and_v8_are_the_packed_templates_of_conv2d_and_dense_and_name_their_weight_layout():
    assert PREPACKED_WEIGHTS == 5
    assert (PACKED["dense"], PACKED["conv2d"], PACKED["gemm"], PACKED["batch_matmul"]) == (
        "dense-cpu-v8", "conv2d-cpu-v5", "gemm-cpu-v6", "batch_matmul-cpu-v4")
    task = packed_task(dense(128, 96, 48, bias=True))
    config = ((1, 32, 4), (2, 48), (2, 1, 24))
    assert get_template("dense-cpu-v5").input_layout(task, config) == ((1, 24),)
    assert get_template("dense-cpu-v7").input_layout(task, config) == ((1, 24),)
    assert get_template("dense-cpu-v8").input_layout(task, config) == ((1, 24),)
    assert get_template("dense-cpu-v4").input_layout(task, config) == ()
    conv = packed_task(conv2d(1, 8, 8, 16, 32, 3, padding=1))
    conv_config = ((1,), (2, 4), (1, 2, 4), (2, 2, 8), (1,), (1,), (2, 8))
    assert get_template("conv2d-cpu-v5").input_layout(conv, conv_config) == ((1, 8),)
    assert get_template("conv2d-cpu-v3").input_layout(conv, conv_config) == ()
    from schedule_gym.backends.tvm.export import kernel_signature

    assert "W: float32[4, 3, 3, 16, 8] (tile_columns(W, 8))" in kernel_signature(conv, "main", ((1, 8),))
    assert "W: float32[3, 3, 16, 32]" in kernel_signature(conv)


@pytest.mark.tvm
def test_v5_kernels_take_the_weight_packed_and_copy_none_of_it():
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(dense(128, 96, 48, bias=True))
    config = ((1, 32, 4), (2, 48), (2, 1, 24))
    v5, v4 = schedule_script(task, config, "dense-cpu-v5"), schedule_script(task, config, "dense-cpu-v4")
    assert 'W: T.Buffer((2, 96, 24), "float32")' in v5 and "W_global" not in v5
    assert 'W: T.Buffer((96, 48), "float32")' in v4 and "W_global" in v4
    assert "W[v_j // 24, v_k, v_j % 24]" in v5  # the micro-kernel reads the packed weight where it is
    for version in ("v7", "v8"):
        script = schedule_script(task, config, f"dense-cpu-{version}")
        assert 'W: T.Buffer((2, 96, 24), "float32")' in script and "W_global" not in script
    conv = packed_task(conv2d(1, 8, 8, 16, 32, 3, padding=1))
    conv_config = ((1,), (2, 4), (1, 2, 4), (2, 2, 8), (1,), (1,), (2, 8))
    v5 = schedule_script(conv, conv_config, "conv2d-cpu-v5")
    assert 'W: T.Buffer((4, 3, 3, 16, 8), "float32")' in v5 and "W_global" not in v5
    assert "W_global" in schedule_script(conv, conv_config, "conv2d-cpu-v3")


@pytest.mark.tvm
def test_v7_runs_the_column_blocks_outer_and_with_one_row_block_builds_v5s_kernel():
    """v7's parallel loop takes the column blocks outer, so each thread's contiguous range of its iterations is a
    range of the weight's column blocks, every row block of each in turn; v5's takes the row blocks outer. With one
    row block the two loops run the same iterations in the same order."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(dense(16, 32, 48, bias=True, activation="relu"))
    config = ((2, 2, 4), (2, 16), (3, 2, 8))
    v7, v5 = schedule_script(task, config, "dense-cpu-v7"), schedule_script(task, config, "dense-cpu-v5")
    assert "for j_0_i_0_fused in T.parallel(6):" in v7 and "i_0_j_0_fused" not in v7
    assert "for i_0_j_0_fused in T.parallel(6):" in v5
    # the fused loop's iteration splits into the column block (outer) and the row block (inner)
    assert "j_0_i_0_fused // 2" in v7 and "j_0_i_0_fused % 2" in v7
    one_row_block = ((1, 4, 4), (2, 16), (3, 2, 8))
    v7, v5 = (schedule_script(task, one_row_block, f"dense-cpu-{v}") for v in ("v7", "v5"))
    assert v7.replace("j_0_i_0_fused", "blocks") == v5.replace("i_0_j_0_fused", "blocks")


def test_v8_prefetches_the_sliver_its_thread_uses_next():
    """Walked in a thread's order (its blocks, fused column block outer, then the reduction blocks and micro-tile
    columns), each call's prefetch names the sliver of the call after it, across micro-tile columns, reduction
    blocks, row blocks and column blocks."""
    from schedule_gym.templates.packed_matmul import next_sliver

    for mo, ko, ni, no in ((1, 1, 1, 3), (1, 4, 8, 2), (3, 2, 5, 2), (2, 1, 3, 4)):
        order = [((n0, m0), k0, n1) for n0 in range(no) for m0 in range(mo) for k0 in range(ko) for n1 in range(ni)]
        used = [(block[0] * ni + n1, k0) for block, k0, n1 in order]
        prefetched = [next_sliver(block, k0, n1, (mo, ko, ni)) for block, k0, n1 in order]
        assert prefetched[:-1] == used[1:], (mo, ko, ni, no)
        assert prefetched[-1] == (no * ni, 0)  # past the weight's last column: a prefetch that never faults


@pytest.mark.tvm
def test_v8_is_v7_with_the_next_slivers_lines_prefetched_before_each_micro_kernel_call():
    """v8's script is v7's with, at the top of the loop over a block's micro-tiles of rows, a loop of prefetches (into
    L2: locality 2) of the call's share of the next sliver's cache lines: KC x NR = 16 x 8 values, 8 lines of 16
    floats, over the 2 calls of a micro-tile column, 4 each. Its kernels' outputs are checked in
    test_packed_templates.py."""
    pytest.importorskip("tvm")
    from schedule_gym.templates import schedule_script

    task = packed_task(dense(16, 32, 48, bias=True, activation="relu"))
    config = ((2, 2, 4), (2, 16), (3, 2, 8))
    v8, v7 = schedule_script(task, config, "dense-cpu-v8"), schedule_script(task, config, "dense-cpu-v7")
    assert "T.prefetch" not in v7 and v8.count("T.prefetch(") == 1
    v8_lines = [line.strip() for line in v8.splitlines()]
    calls = v8_lines.index("for k_0, j_1, i_1 in T.grid(2, 2, 2):")
    assert v8_lines[calls + 1:calls + 3] == ["for p in range(4):", "if i_1 * 4 + p < 8:"]
    assert re.fullmatch(r"T\.prefetch\(T\.address_of\(W\[.*\]\), 0, 2, 1\)", v8_lines[calls + 3])
    assert v8_lines[calls + 4] == "for k_1 in range(16):"
    # without the prefetches and with the loops merged again, v8 is v7
    merged = v8_lines[:calls] + ["for k_0, j_1, i_1, k_1 in T.grid(2, 2, 2, 16):"] + v8_lines[calls + 5:]
    assert merged == [line.strip() for line in v7.splitlines()]
    if platform.machine() in ("x86_64", "AMD64"):  # LLVM lowers the intrinsic to x86's prefetch into L2
        import tvm

        from schedule_gym.backends.tvm.targets import host_llvm_target

        module = get_template("dense-cpu-v8").schedule(task, config)
        assembly = tvm.compile(module, target=host_llvm_target(2)).mod.inspect_source("asm")
        assert "prefetcht1" in assembly and "prefetcht1" not in tvm.compile(
            get_template("dense-cpu-v7").schedule(task, config), target=host_llvm_target(2)).mod.inspect_source("asm")


@pytest.mark.tvm
def test_an_exported_v5_kernel_is_checked_with_its_weight_packed_and_says_so(tmp_path):
    pytest.importorskip("tvm")
    import tvm

    from schedule_gym.backends.tvm.export import export_kernel
    from schedule_gym.operators import get_workload

    task = packed_task(dense(16, 24, 40, bias=True, activation="relu"))
    config = ((2, 2, 4), (3, 8), (1, 5, 8))
    kernel = export_kernel(task, config, tmp_path / "k.so", template="dense-cpu-v5")
    assert kernel.max_abs_error is not None and kernel.template == "dense-cpu-v5"
    assert "W: float32[5, 24, 8] (tile_columns(W, 8))" in kernel.signature
    workload = get_workload("dense")
    (x, w, b), (expected, tol) = workload.inputs(task), workload.reference(task, workload.inputs(task))
    main = tvm.runtime.load_module(kernel.path)["main"]

    def problem(weight):
        out = tvm.runtime.empty((16, 40), "float32", tvm.cpu())
        main(*(tvm.runtime.tensor(a) for a in (x, weight, b)), out)
        return workload.check(task, out.numpy(), expected, tol)

    assert problem(tile_columns(w, 8)) is None
    # the weight reshaped to the packed shape but not laid out: the check rejects the answer
    assert problem(np.ascontiguousarray(w.reshape(5, 24, 8))) is not None


@pytest.mark.tvm
def test_tile_columns_expr_computes_tile_columns():
    """What a model build does to a kernel input that is not a constant, run in TVM's VM."""
    pytest.importorskip("tvm")
    import tvm
    from tvm import relax

    from schedule_gym.templates.layouts import tile_columns_expr

    for shape, tile in (((6, 12), 4), ((3, 3, 5, 8), 4)):
        builder = relax.BlockBuilder()
        x = relax.Var("x", relax.TensorType(shape, "float32"))
        with builder.function("main", [x]):
            builder.emit_func_output(builder.emit(tile_columns_expr(x, tile)))
        vm = relax.VirtualMachine(tvm.compile(builder.get(), target="llvm"), tvm.cpu())
        array = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(array)).numpy(), tile_columns(array, tile))
    with pytest.raises(ValueError, match="a tile of columns must be a positive divisor of the last axis"):
        tile_columns_expr(relax.Var("y", relax.TensorType((4, 6), "float32")), 4)


torch = pytest.importorskip("torch")


class _Net(torch.nn.Module):
    """A 3x3 convolution, a grouped one, 1x1 ones (one with a bias alone, one of the same shape with the residual add
    and ReLU: the first's kernel name begins the second's) and two dense layers: each a packed task of v5."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.grouped = torch.nn.Conv2d(16, 16, 3, padding=1, groups=2)
        self.point = torch.nn.Conv2d(16, 24, 1)
        self.shortcut = torch.nn.Conv2d(24, 24, 1)
        self.residual = torch.nn.Conv2d(24, 24, 1)
        self.fc = torch.nn.Linear(24, 40)
        self.out = torch.nn.Linear(40, 8)

    def forward(self, x):
        y = torch.relu(self.point(torch.relu(self.grouped(torch.relu(self.conv(x))))))
        y = torch.relu(self.residual(y) + self.shortcut(y))
        return self.out(torch.nn.functional.gelu(self.fc(y.mean((2, 3)))))


@pytest.mark.tvm
def test_models_built_with_v5_take_packed_constants_and_equal_pytorch():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.targets import host_llvm_target
    from schedule_gym.models.build import compile_model, run_model, schedule_kernels
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.mapping import map_model
    from schedule_gym.models.pipeline import check_outputs

    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(1, 3, 8, 8)
    reference = [model(x).detach().numpy()]
    mapped = map_model(import_model(model, (x,))).packed()
    ops = sorted(t.task.op for t in mapped.tasks)
    assert ops == ["conv2d"] * 5 + ["dense", "dense", "pool2d"]
    names = [t.function for t in mapped.tasks]
    assert any(a != b and b.startswith(a) for a in names for b in names), names  # one name begins another
    rng = np.random.default_rng(0)
    configs = {t.task.name: TileSpace(t.task).sample(rng) for t in mapped.tasks}
    for templates, rank_up in (((), 1), (("dense-cpu-v4", "conv2d-cpu-v3"), 0)):
        mod = schedule_kernels(mapped, configs, templates=templates)
        weights = {}  # each kernel's weight parameter, and the constants its calls pass for it
        for model_task in mapped.tasks:
            if model_task.task.op in ("dense", "conv2d"):
                weights[model_task.function] = len(mod[model_task.function].params[1].shape)
        calls = [b.value for block in mod["main"].body.blocks for b in block.bindings
                 if getattr(b.value, "op", None) is not None and getattr(b.value.op, "name", "") == "relax.call_tir"]
        assert sum(call.args[0].name_hint in weights for call in calls) == 7
        for call in calls:
            name = call.args[0].name_hint
            if name in weights:
                constant = call.args[1].fields[1]
                assert len(constant.ty.shape) == weights[name], name  # the call passes what the kernel takes
                base = 4 if name.startswith("sg_conv2d") else 2
                assert weights[name] == base + rank_up, (name, templates)
        outputs = run_model(compile_model(mod, host_llvm_target(1)), (x,))
        assert check_outputs(outputs, reference) is None, templates
    with pytest.raises(ValueError, match="unknown template 'dense-cpu-v9'"):
        schedule_kernels(mapped, configs, templates=("dense-cpu-v9",))


@pytest.mark.tvm
def test_a_named_template_builds_only_the_tasks_it_can():
    """``templates=["conv2d-cpu-v3"]`` builds the packed convolutions with v3 and leaves a depthwise one (whose packed
    form v5 alone builds) to ``"auto"``'s template, and a grouped one with two channels a group (no packed form) to its
    default template, as the model's records were measured."""
    pytest.importorskip("tvm")
    from schedule_gym.models.build import schedule_kernels
    from schedule_gym.models.importer import import_model
    from schedule_gym.models.mapping import map_model

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3, padding=1, groups=4)).eval()
    mapped = map_model(import_model(model, (torch.randn(1, 3, 6, 6),))).packed()
    kinds = {t.task.param("groups"): t for t in mapped.tasks}
    assert sorted(kinds) == [1, 4, 8]
    assert [kinds[g].task.name.endswith("-packed") for g in (1, 4, 8)] == [True, False, True]
    mod = schedule_kernels(mapped, templates=("conv2d-cpu-v3",))
    scripts = {g: mod[t.function].script() for g, t in kinds.items()}
    assert "W_global" in scripts[1]  # v3 copies its weight blocks
    assert "W_global" not in scripts[8] and re.search(r"W: T.Buffer\(\(\d+, 3, 3, 1, \d+\)", scripts[8])  # v5: W tiled
    assert "W_global" not in scripts[4] and "W: T.Buffer((3, 3, 2, 8)" in scripts[4]  # the direct template
