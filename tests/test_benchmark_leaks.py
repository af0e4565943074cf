"""The leak check: no held-out computation is trained on, by a protocol's training split or by a shipped
pretrained artefact (its sidecar's training keys) on any protocol a leaderboard row evaluates it on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schedule_gym.benchmark import PROTOCOLS, Protocol, agent_tuner, get_protocol, run_protocol
from schedule_gym.benchmark.pretrained import (
    artefact_training_keys,
    check_artefact,
    felix_training_tasks,
    sidecar_path,
    write_sidecar,
)
from schedule_gym.tasks import gemm

ROOT = Path(__file__).resolve().parents[1]
LEADERBOARD = ROOT / "leaderboard"
#: the files of trained artefacts: models, policies, checkpoints (not sidecars, not leaderboards)
ARTEFACTS = sorted(p for folder in (LEADERBOARD, ROOT / "schedule_gym" / "data")
                   for pattern in ("*.pt", "*.zip", "*.safetensors", "*.ubj", "*-model*.json")
                   for p in folder.glob(pattern) if not p.name.endswith(".meta.json"))
# Stand-in of a protocol that holds out what v0 trains on (as tenset-v1 holds out ResNet-50 and BERT-base).
REVERSED = Protocol("reversed-v0", train="resnet18,mobilenetv2", held_out="resnet50,bert-base",
                    operators="conv2d,dense,batch_matmul")


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_no_held_out_key_is_a_training_key(name):
    protocol = get_protocol(name)
    train = {t.key for t in protocol.train_tasks()}
    assert not train & {t.key for t in protocol.held_out_tasks()}


def _rows():
    for board in sorted(LEADERBOARD.glob("*.jsonl")):
        for line in board.read_text().splitlines():
            if line.strip():
                yield board.name, json.loads(line)


def _named_files(params):
    values = [v for value in params.values() for v in (value if isinstance(value, list) else [value])]
    return [ROOT / v for v in values if isinstance(v, str) and (ROOT / v).is_file()]


def test_every_shipped_artefact_records_its_training_keys_and_none_is_held_out_of_its_protocol():
    assert ARTEFACTS, "no shipped artefact found"
    for path in ARTEFACTS:
        assert sidecar_path(path).is_file(), f"{path.name} has no sidecar recording its training tasks"
        name, keys = artefact_training_keys(path)
        assert keys, f"{path.name}: no training keys"
        assert check_artefact(name, path) == name


def test_no_leaderboard_row_evaluates_an_artefact_on_its_training_tasks():
    checked = 0
    for board, row in _rows():
        protocol = Protocol(**{k: v for k, v in row["protocol"].items() if k in ("name", "train", "held_out",
                                                                               "operators")})
        held_out = {t.key for t in protocol.held_out_tasks()}
        for path in _named_files(row["params"]):
            _, keys = artefact_training_keys(path)
            assert not keys & held_out, f"{board}: row {row['agent']} evaluates {path.name} on its training tasks"
            checked += 1
    assert checked >= 2  # the pretrained Felix row of v0 names two cost models


def test_an_artefact_is_refused_on_a_protocol_that_holds_out_what_it_was_trained_on(tmp_path):
    model = LEADERBOARD / "v0-felix-cost-model-dense.pt"
    assert check_artefact("v1", model) == "v0"
    with pytest.raises(ValueError, match=r"trained on 4 held-out tasks of protocol reversed-v0 \(bert-base/"):
        check_artefact(REVERSED, model)
    # run_protocol checks every artefact a tuner names before it runs anything
    tuner = agent_tuner("felix", {"cost_model": [str(model)]})
    with pytest.raises(ValueError, match="trained for protocol v0"):
        run_protocol(tuner, REVERSED, "felix-pretrained", tasks=["bert-base/ffn-up"])


def test_rows_record_the_artefacts_they_checked(tmp_path):
    artefact = tmp_path / "model.pt"
    artefact.write_bytes(b"")
    smoke = get_protocol("smoke")
    write_sidecar(artefact, smoke, smoke.train_tasks(), artefact="test")
    row = run_protocol(_NamingTuner(artefact), smoke, "x")
    assert row["artefacts"] == {str(artefact): "smoke"}


class _NamingTuner:
    """A tuner that names one artefact and measures s0 only."""

    def __init__(self, path):
        self.path = path

    def artefacts(self):
        return (self.path,)

    def __call__(self, task, backend, seed, budget):
        space = backend.space(task)
        return float(backend.model_latency_s(task, [space.index_of_rows(space.rows(space.initial_config()))])[0])


def test_sidecars_are_written_from_checked_tasks_and_read_strictly(tmp_path):
    smoke = get_protocol("smoke")
    path = tmp_path / "m.pt"
    assert write_sidecar(path, smoke, smoke.train_tasks(), seed=3) == tmp_path / "m.meta.json"
    assert artefact_training_keys(path) == ("smoke", frozenset(t.key for t in smoke.train_tasks()))
    assert json.loads(sidecar_path(path).read_text())["seed"] == 3
    with pytest.raises(ValueError, match="refusing to pretrain on held-out tasks of protocol smoke"):
        write_sidecar(path, smoke, smoke.held_out_tasks())
    for text, message in (("[1,", "is not valid JSON"), ('{"protocol": "smoke"}', "must hold 'protocol'"),
                          ('{"protocol": 3, "training_tasks": []}', "must hold 'protocol'")):
        sidecar_path(path).write_text(text)
        with pytest.raises(ValueError, match=message):
            artefact_training_keys(path)
    with pytest.raises(ValueError, match="has no sidecar"):
        artefact_training_keys(tmp_path / "other.pt")
    other = gemm(16, 64, 32, d_m=2, d_k=2, d_n=2, name="renamed")  # a held-out computation under another name
    with pytest.raises(ValueError, match=r"renamed \(held-out task smoke-held-16x64x32\)"):
        write_sidecar(path, smoke, [other])


def test_felix_training_tasks_are_the_training_split_by_operator():
    by_op = felix_training_tasks("v0", ["conv2d", "dense"])
    train = get_protocol("v0").train_tasks()
    assert by_op["conv2d"] == tuple(t for t in train if t.op == "conv2d")
    assert by_op["dense"] == tuple(t for t in train if t.op == "dense")
    with pytest.raises(ValueError, match="no training task of protocol v0 has operator pool2d"):
        felix_training_tasks("v0", ["pool2d"])
