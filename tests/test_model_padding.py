"""Dense layers, batch matmuls and pointwise convolutions with odd extents padded for the packed template (``schedule_gym.models.padding``): which
extents are padded, how the calls are rewritten, and that the padded model still computes PyTorch's outputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tvm")

from schedule_gym.models.build import compile_model, run_model, schedule_kernels  # noqa: E402
from schedule_gym.models.padding import flattened_pixels, pad_odd_extents, padded_extents  # noqa: E402
from schedule_gym.models.pipeline import check_outputs, prepare_model, torch_outputs  # noqa: E402
from schedule_gym.models.tuning import tune_model  # noqa: E402
from schedule_gym.tasks import batch_matmul, conv2d, dense  # noqa: E402


def test_only_extents_without_a_small_divisor_are_padded():
    assert padded_extents(dense(197, 768, 3072)) == (200, 3072)  # ViT-B/16's 197 tokens, a prime
    assert padded_extents(dense(128, 768, 50257, bias=False)) == (128, 50304)  # GPT-2's LM head, 29 x 1,733
    assert padded_extents(dense(13, 24, 37)) == (16, 48)  # both, below 1,024 columns: a multiple of 16
    for task in (dense(128, 768, 768), dense(1, 768, 1000), dense(36, 64, 24), dense(7, 64, 10), dense(6, 8, 15)):
        assert padded_extents(task) is None, task.name  # a divisor 4, 6 or 8 (rows), 8 (columns), or small
    # ViT-B/16's attention: Q K^T pads its rows and columns; P V, whose columns need none, is left as it is
    assert padded_extents(batch_matmul(12, 197, 64, 197, transpose_b=True)) == (200, 208)
    assert padded_extents(batch_matmul(12, 197, 197, 64)) is None
    assert padded_extents(batch_matmul(12, 128, 64, 128, transpose_b=True)) is None
    assert padded_extents(conv2d(1, 7, 7, 13, 13, 3, padding=1)) is None  # dense layers and batch matmuls only


class OddLinears(torch.nn.Module):
    """Two Linears on 13 tokens (a prime): 24 -> 37 with GELU (rows and columns padded), then 37 -> 8
    (rows padded only)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(24, 37), torch.nn.Linear(37, 8)

    def forward(self, x):
        return self.down(torch.nn.functional.gelu(self.up(x)))


def test_padded_layers_get_new_kernels_on_padded_operands_and_the_model_still_equals_pytorch(tmp_path):
    from schedule_gym.backends.tvm.targets import host_llvm_target

    torch.manual_seed(0)
    loaded = prepare_model(OddLinears(), (torch.randn(1, 13, 24),), name="odd-linears")
    assert sorted(t.task.name for t in loaded.mapped.tasks) == ["dense-13x24x37+bias+gelu", "dense-13x37x8+bias"]
    padded = pad_odd_extents(loaded.mapped)
    assert sorted(t.task.name for t in padded.tasks) == ["dense-16x24x48+bias+gelu", "dense-16x37x8+bias"]
    assert [t.weight for t in padded.tasks] == [1, 1]
    functions = {gv.name_hint for gv in padded.mod.get_global_vars()}
    assert {t.function for t in padded.tasks} <= functions
    assert not {t.function for t in loaded.mapped.tasks} & functions  # the unpadded kernels are gone
    script = padded.mod["main"].script()
    assert script.count("R.nn.pad(") == 2  # the activations
    # the results: the up's columns were padded (a copy of its first 37), the down's rows only (its first 13 rows
    # are the padded result's first elements: a view, no copy)
    assert script.count("R.strided_slice(") == 1 and script.count("R.memory.view(") == 1
    copied = pad_odd_extents(loaded.mapped, views=False).mod["main"].script()  # as before the views
    assert copied.count("R.strided_slice(") == 2 and "R.memory.view(" not in copied
    reference = torch_outputs(loaded.spec)
    target = host_llvm_target(1)
    assert check_outputs(run_model(compile_model(schedule_kernels(padded, {}, "s0"), target), loaded.spec.inputs),
                         reference) is None
    # packed() pads, then tunes and builds the padded layers with the packed template
    packed = loaded.mapped.packed()
    assert sorted(t.task.name for t in packed.tasks) == ["dense-16x24x48+bias+gelu-packed", "dense-16x37x8+bias-packed"]
    assert [t.task.name for t in loaded.mapped.packed(pad=False).tasks] == [
        t.task.name + "-packed" for t in loaded.mapped.tasks]
    options = {"num_threads": 1, "protocol": {"min_repeat_ms": 2, "repeat": 1}}
    result = tune_model(packed, 8, agent="random", backend="tvm", backend_options=options,
                        records=str(tmp_path / "r.jsonl"), round_measurements=4)
    executable = compile_model(schedule_kernels(packed, result.configs), target)
    assert check_outputs(run_model(executable, loaded.spec.inputs), reference) is None


class OddFFN(torch.nn.Module):
    """A transformer's FFN on 13 tokens (a prime): 24 -> 32 with GELU, then 32 -> 8, both layers' rows padded to
    16; the hidden activations also an output (read outside the two layers)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(24, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        hidden = torch.nn.functional.gelu(self.up(x))
        return self.down(hidden), hidden


def test_a_padded_layer_reads_the_padded_rows_of_the_layer_before_and_the_model_still_equals_pytorch():
    """The FFN-down takes the FFN-up's padded result itself, not its rows taken off and padded again (what the
    padded rows hold only reaches padded rows); the view of its first rows stays for the output. OddLinears'
    FFN-down needs fewer columns than the FFN-up's padded result has: it keeps its pad."""
    from schedule_gym.backends.tvm.targets import host_llvm_target

    torch.manual_seed(0)
    loaded = prepare_model(OddFFN(), (torch.randn(1, 13, 24),), name="odd-ffn")
    padded = pad_odd_extents(loaded.mapped)
    assert sorted(t.task.name for t in padded.tasks) == ["dense-16x24x32+bias+gelu", "dense-16x32x8+bias"]
    script = padded.mod["main"].script()
    assert script.count("R.nn.pad(") == 1  # x's
    assert script.count("R.memory.view(") == 2 and "R.strided_slice(" not in script  # both results: rows only
    outputs = run_model(compile_model(schedule_kernels(padded, {}, "s0"), host_llvm_target(1)), loaded.spec.inputs)
    assert check_outputs(outputs, torch_outputs(loaded.spec)) is None
    # the FFN-up's padded rows are not zeros (GELU of the bias): read as they are, they stay in the padded rows
    odd = prepare_model(OddLinears(), (torch.randn(1, 13, 24),), name="odd-linears")
    assert pad_odd_extents(odd.mapped).mod["main"].script().count("R.nn.pad(") == 2


def test_models_without_odd_extents_are_left_as_they_are():
    torch.manual_seed(0)
    loaded = prepare_model(torch.nn.Linear(16, 24), (torch.randn(8, 16),), name="even")
    assert pad_odd_extents(loaded.mapped) is loaded.mapped


class OddAttention(torch.nn.Module):
    """Attention on 19 tokens (a prime) of width 8: ``Q K^T`` (K stored transposed: rows and columns padded),
    softmax, ``P V`` and ``Q^T V`` (8 columns: left as they are)."""

    def forward(self, q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return p @ v, q.transpose(-1, -2) @ v


def test_padded_batch_matmuls_keep_each_operands_layout_and_the_model_equals_pytorch():
    from schedule_gym.backends.tvm.targets import host_llvm_target

    torch.manual_seed(0)
    loaded = prepare_model(OddAttention(), tuple(torch.randn(2, 19, 8) for _ in range(3)), name="odd-attention")
    assert sorted(t.task.name for t in loaded.mapped.tasks) == ["bmmNN-2x19x19x8", "bmmNN-2x8x19x8", "bmmNT-2x19x8x19"]
    padded = pad_odd_extents(loaded.mapped)
    assert sorted(t.task.name for t in padded.tasks) == ["bmmNN-2x19x19x8", "bmmNN-2x8x19x8", "bmmNT-2x24x8x32"]
    script = padded.mod["main"].script()
    assert script.count("R.nn.pad(") == 2 and script.count("R.strided_slice(") == 1  # Q and K; the scores
    reference = torch_outputs(loaded.spec)
    target = host_llvm_target(1)
    for mapped in (padded, loaded.mapped.packed()):
        executable = compile_model(schedule_kernels(mapped, {}, "s0"), target)
        assert check_outputs(run_model(executable, loaded.spec.inputs), reference) is None


def test_a_transposed_operand_is_padded_on_the_axis_it_stores_the_rows_or_columns_on():
    from schedule_gym.models.padding import _pad_widths

    # A [B, M, K] / [B, K, M] and B [B, K, N] / [B, N, K]: rows 19 -> 24, columns 19 -> 32
    assert _pad_widths(batch_matmul(2, 19, 8, 19), 24, 32) == [[0, 0, 0, 5, 0, 0], [0, 0, 0, 0, 0, 13]]
    assert _pad_widths(batch_matmul(2, 19, 8, 19, transpose_a=True, transpose_b=True), 24, 32) == [
        [0, 0, 0, 0, 0, 5], [0, 0, 0, 13, 0, 0]]
    assert _pad_widths(dense(19, 8, 19, bias=True), 24, 32) == [[0, 5, 0, 0], [0, 0, 0, 13], [0, 13]]


def test_pointwise_convolutions_whose_width_has_no_register_tile_divisor_become_one_row_of_pixels():
    # ResNet-50's 7 x 7 blocks: 49 pixels padded to 56; 14 x 14: 196 pixels, a multiple of 4, need no padding
    assert flattened_pixels(conv2d(1, 7, 7, 512, 2048, 1, bias=True, residual=True)) == 56
    assert flattened_pixels(conv2d(1, 14, 14, 1024, 256, 1)) == 196
    assert flattened_pixels(conv2d(1, 17, 17, 768, 192, 1)) == 296  # Inception-v3's 17 x 17 blocks
    for task in (conv2d(1, 28, 28, 256, 512, 1),  # 28 columns: a tile of 4 rows fits one output row
                 conv2d(1, 3, 3, 16, 16, 1),  # 9 -> 16 pixels would nearly double the work
                 conv2d(1, 7, 7, 16, 16, 3, padding=1), conv2d(1, 14, 14, 16, 32, 1, stride=2),  # not pointwise
                 conv2d(1, 7, 7, 16, 32, 1, groups=2), conv2d(1, 7, 7, 16, 32, 1, layout="NCHW"),
                 dense(49, 64, 64)):
        assert flattened_pixels(task) is None, task.name


class OddPointwise(torch.nn.Module):
    """Two pointwise convolutions on a 7 x 7 map (batch 2), the second with a residual add, then a 3x3 one (left
    as it is)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Conv2d(8, 16, 1), torch.nn.Conv2d(16, 8, 1)
        self.mix = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.down(torch.relu(self.up(x))) + x)
        return self.mix(y)


def test_flattened_pointwise_convolutions_keep_their_epilogues_and_the_model_equals_pytorch():
    from schedule_gym.backends.tvm.targets import host_llvm_target

    torch.manual_seed(0)
    loaded = prepare_model(OddPointwise().eval(), (torch.randn(2, 8, 7, 7),), name="odd-pointwise")
    assert sorted(t.task.name for t in loaded.mapped.tasks) == [
        "conv2d-2x7x7x16-8-k1-s1-p0+bias+res+relu", "conv2d-2x7x7x8-16-k1-s1-p0+bias+relu", "conv2d-2x7x7x8-8-k3-s1-p1+bias"]
    padded = pad_odd_extents(loaded.mapped)
    assert sorted(t.task.name for t in padded.tasks) == [
        "conv2d-2x1x56x16-8-k1-s1-p0+bias+res+relu", "conv2d-2x1x56x8-16-k1-s1-p0+bias+relu", "conv2d-2x7x7x8-8-k3-s1-p1+bias"]
    assert padded.mod["main"].script().count("R.strided_slice(") == 2  # each flattened result, back to 7 x 7
    reference = torch_outputs(loaded.spec)
    target = host_llvm_target(1)
    for mapped in (padded, loaded.mapped.packed()):
        executable = compile_model(schedule_kernels(mapped, {}, "s0"), target)
        assert check_outputs(run_model(executable, loaded.spec.inputs), reference) is None


def test_at_batch_one_the_flattened_pixels_are_taken_back_by_a_view_and_the_model_equals_pytorch():
    """At batch 1 a flattened result's first ``h * w`` pixels are its first elements: a view of them, not a copy."""
    from schedule_gym.backends.tvm.targets import host_llvm_target

    torch.manual_seed(0)
    loaded = prepare_model(OddPointwise().eval(), (torch.randn(1, 8, 7, 7),), name="odd-pointwise-1")
    padded = pad_odd_extents(loaded.mapped)
    script = padded.mod["main"].script()
    assert script.count("R.memory.view(") == 2 and "R.strided_slice(" not in script
    executable = compile_model(schedule_kernels(padded, {}, "s0"), host_llvm_target(1))
    assert check_outputs(run_model(executable, loaded.spec.inputs), torch_outputs(loaded.spec)) is None
