"""Import and task extraction of every full-size zoo model (ResNet-18/50, MobileNet-V2, BERT-base, PTB LSTM).

Each model is captured, imported, canonicalised and mapped (30-80 s each here): every convolution and
matmul (and pool) of the network must become a task, with the network's call counts as weights.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("tvm")

from schedule_gym.models.pipeline import load_model  # noqa: E402

pytestmark = [pytest.mark.tvm, pytest.mark.slow]

#: model -> (kernel calls per run by operator); from the architectures: ResNet-18 17 convs + 3 downsample
#: convs + fc + the max pool after the stem and the global average pool, ResNet-50 49 + 4 + fc + the two pools,
#: MobileNet-V2 52 convs + the global average pool + classifier, BERT-base 12 layers x (Q, K, V, O,
#: FFN up, FFN down dense + 2 batch matmuls), the PTB LSTM mapped to 2 merged input projections, 38
#: recurrent steps' matmuls (step 0 of each layer has none: its state is zero) and the decoder
EXPECTED = {
    "resnet18": {"conv2d": 20, "dense": 1, "pool2d": 2},
    "resnet50": {"conv2d": 53, "dense": 1, "pool2d": 2},
    "mobilenetv2": {"conv2d": 52, "dense": 1, "pool2d": 1},
    "bert-base": {"dense": 72, "batch_matmul": 24},
    "lstm-ptb": {"dense": 41},
}


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_convolution_and_matmul_of_the_model_becomes_a_task(name) -> None:
    loaded = load_model(name)
    calls: dict[str, int] = {}
    for t in loaded.mapped.tasks:
        calls[t.task.op] = calls.get(t.task.op, 0) + t.weight
    assert calls == EXPECTED[name]
    left = loaded.mapped.report.left
    assert not any(op in left for op in ("relax.nn.conv2d", "relax.matmul", "relax.nn.max_pool2d")), left
    if name == "lstm-ptb":
        assert loaded.lstm is not None and loaded.lstm.layers == 2 and loaded.lstm.steps == 20
