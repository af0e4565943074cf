"""Operands read and written in place (schedule_gym.models.fixed.views): the strides found through chains of
reshapes, permutations and split parts, before a kernel and after it, and the chains no strides describe."""

from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from schedule_gym.models.bindings import Bindings  # noqa: E402
from schedule_gym.models.fixed.views import Strided, strided_target, strided_view  # noqa: E402

pytestmark = pytest.mark.tvm


def _function(shape, build):
    """``main(x)`` of ``shape`` whose dataflow block ``build(bb, x)`` emits, its output the last value emitted;
    its bindings and its vars by the names given to ``build``'s ``emit(name, expr)``."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    names: dict[str, object] = {}
    with bb.function("main", [x]):
        with bb.dataflow():
            def emit(name, expr):
                names[name] = bb.emit(expr)
                return names[name]

            out = bb.emit_output(build(emit, x))
        bb.emit_func_output(out)
    func = bb.get()["main"]
    bindings = Bindings(func)
    by_name = {var.name: var for var in bindings.value_of}
    return bindings, {name: by_name[var.name] for name, var in names.items()}, func.params[0]


def _heads(emit, x, heads=4, depth=16, tokens=16):
    """BERT's split of a projection ``[tokens, heads * depth]`` into ``[heads, tokens, depth]``."""
    from tvm import relax

    split = emit("split", relax.op.reshape(x, (1, tokens, heads, depth)))
    return emit("heads", relax.op.permute_dims(split, [0, 2, 1, 3]))


def test_the_heads_of_a_projection_are_strides_into_it() -> None:
    from tvm import relax

    def build(emit, x):
        heads = _heads(emit, x)
        q = emit("q", relax.op.reshape(heads, (4, 16, 16)))
        kt = emit("kt", relax.op.reshape(relax.op.permute_dims(heads, [0, 1, 3, 2]), (4, 16, 16)))
        return relax.op.add(q, kt)

    bindings, var, x = _function((16, 64), build)
    base, view = strided_view(var["q"], bindings, (4, 16, 16))
    assert base.same_as(x) and view == Strided(1024, 0, (16, 64, 1))
    base, view = strided_view(var["kt"], bindings, (4, 16, 16))  # K^T: depth along a row, a key a row of x
    assert base.same_as(x) and view == Strided(1024, 0, (16, 1, 64))
    indices = np.arange(1024).reshape(16, 4, 16).transpose(1, 2, 0)  # kt[h, d, j] = x[j, h * 16 + d]
    h, a, b = np.indices((4, 16, 16))
    assert np.array_equal(view.index(h, a, b), indices)


@pytest.mark.parametrize("sections", [3, [64, 128]])
def test_the_parts_of_a_split_are_offsets_into_it(sections) -> None:
    """GPT-2's and ViT's Q, K and V: the parts of one ``[tokens, 3 * hidden]`` projection, each split in heads."""
    from tvm import relax

    def build(emit, x):
        parts = emit("parts", relax.op.split(x, sections, axis=1))
        k = emit("k", relax.TupleGetItem(parts, 1))
        heads = emit("heads", relax.op.permute_dims(relax.op.reshape(k, (16, 4, 16)), [1, 0, 2]))
        return relax.op.add(heads, heads)

    bindings, var, x = _function((16, 192), build)
    base, view = strided_view(var["heads"], bindings, (4, 16, 16))
    assert base.same_as(x) and view == Strided(16 * 192, 64, (16, 192, 1))


def test_a_chain_no_strides_describe_leaves_its_last_copy() -> None:
    """``x [4, 6]`` transposed and reshaped to ``[3, 8]``: a row of the result takes two columns of ``x``, no stride
    steps along it, so the kernel reads the transpose's copy; a view whose last stride is not 1 is refused where
    vectors are loaded along it (``unit_last``), taken where not."""
    from tvm import relax

    def build(emit, x):
        t = emit("t", relax.op.permute_dims(x, [1, 0]))
        r = emit("r", relax.op.reshape(t, (1, 3, 8)))
        c = emit("c", relax.op.reshape(t, (1, 6, 4)))
        return relax.op.add(relax.op.reshape(r, (1, 6, 4)), c)

    bindings, var, x = _function((4, 6), build)
    base, view = strided_view(var["r"], bindings, (1, 3, 8))
    assert base.same_as(var["t"]) and view == Strided(24, 0, (0, 8, 1))  # one head: no stride along it
    base, view = strided_view(var["c"], bindings, (1, 6, 4))  # c[0, i, j] = x[j, i]: a column of x along a row
    assert base.same_as(x) and view == Strided(24, 0, (0, 1, 6))
    base, view = strided_view(var["c"], bindings, (1, 6, 4), unit_last=True)
    assert base.same_as(var["t"]) and view.strides[2] == 1


def test_a_result_is_written_where_the_heads_are_joined() -> None:
    """``[heads, tokens, depth]`` -> ``[1, tokens, heads * depth]`` -> ``[tokens, hidden]``: the kernel writes the
    last view (whoever reads it); a view read twice on the way ends the chain there."""
    from tvm import relax

    def build(emit, x):
        o = emit("o", relax.op.add(x, x))  # stands for the kernel's result
        joined = emit("joined", relax.op.permute_dims(relax.op.reshape(o, (1, 4, 16, 16)), [0, 2, 1, 3]))
        rows = emit("rows", relax.op.reshape(joined, (16, 64)))
        other = emit("other", relax.op.add(x, x))
        once = emit("once", relax.op.reshape(other, (1, 4, 16, 16)))
        after = emit("after", relax.op.permute_dims(once, [0, 2, 1, 3]))
        return relax.Tuple([relax.op.add(rows, rows), once, after])

    bindings, var, _ = _function((4, 16, 16), build)
    end, view = strided_target(bindings.value_of[var["o"]], bindings, (4, 16, 16))
    assert end.same_as(var["rows"]) and view == Strided(1024, 0, (16, 64, 1))
    end, view = strided_target(bindings.value_of[var["other"]], bindings, (4, 16, 16))
    assert end.same_as(var["once"]) and view == Strided(1024, 0, (256, 16, 1))
