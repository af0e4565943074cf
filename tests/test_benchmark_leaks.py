"""The leak check: no held-out computation is trained on, by a protocol's training split or by a shipped
pretrained artefact (its sidecar's training keys) on any protocol a leaderboard row evaluates it on."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import pytest

from schedule_gym.benchmark import PROTOCOLS, Protocol, agent_tuner, get_protocol, run_protocol
from schedule_gym.benchmark.protocol import computation_key
from schedule_gym.benchmark.pretrained import (
    artefact_training_keys,
    check_artefact,
    checkpoint_training_tasks,
    felix_training_tasks,
    sidecar_path,
    write_sidecar,
)
from schedule_gym.tasks import gemm, get_suite, get_task

ROOT = Path(__file__).resolve().parents[1]
LEADERBOARD = ROOT / "leaderboard"
#: the files of trained artefacts: models, policies, checkpoints (not sidecars, not leaderboards)
ARTEFACTS = sorted(p for folder in (LEADERBOARD, ROOT / "schedule_gym" / "data")
                   for pattern in ("*.pt", "*.zip", "*.safetensors", "*.ubj", "*-model*.json")
                   for p in folder.glob(pattern) if not p.name.endswith(".meta.json"))
TENSET_HELD_OUT = ("zoo-resnet50", "zoo-mobilenetv2", "zoo-resnext50", "zoo-bert-base", "zoo-bert-tiny")


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_no_held_out_computation_is_trained_on(name):
    protocol = get_protocol(name)
    train = protocol.train_tasks()
    held_out = protocol.held_out_tasks()
    assert not {t.key for t in train} & {t.key for t in held_out}
    assert not {computation_key(t) for t in train} & {computation_key(t) for t in held_out}


def test_computation_keys_drop_the_epilogue_only():
    conv = get_task("conv2d-1x56x56x64-64-k3-s1-p1")
    assert computation_key(conv) == conv.key  # no epilogue: the key itself
    with_relu = dataclasses.replace(conv, params=conv.params + (("bias", True), ("activation", "relu")))
    assert with_relu.key != conv.key and computation_key(with_relu) == computation_key(with_relu.key) == conv.key
    dense = get_task("dense-128x768x3072+bias+gelu")
    assert computation_key(dense) == computation_key(get_task("dense-128x768x3072")) == dense.key.replace(
        "{activation=gelu,bias=True}", "")
    assert computation_key(get_task("gemm-64")) == get_task("gemm-64").key


def test_tenset_v1_holds_out_tensets_networks_less_what_the_training_networks_compute():
    protocol = get_protocol("tenset-v1")
    assert tuple(protocol.held_out.split(",")) == TENSET_HELD_OUT
    assert protocol.train.split(",") == ["zoo-vgg16", "zoo-inceptionv3", "zoo-densenet121", "zoo-efficientnet-b0",
                                         "zoo-vit-b16", "zoo-gpt2", "zoo-resnet18"]
    assert (protocol.budget_tracks, protocol.seeds, protocol.intervals) == ((16, 64, 256), (0, 1, 2, 3, 4), True)
    train, held_out = protocol.train_tasks(), protocol.held_out_tasks()
    by_network = collections.Counter(t.name.split("/")[0] for t in held_out)
    # BERT-base's five tasks are all GPT-2's computations at 128 tokens: none is held out
    assert (len(train), len(held_out)) == (233, 58)
    assert by_network == {"zoo-mobilenetv2": 21, "zoo-resnet50": 17, "zoo-resnext50": 15, "zoo-bert-tiny": 5}
    # what is missing is a training computation or a layer another held-out network has too (ResNeXt-50's stem)
    everything = [s.task for name in TENSET_HELD_OUT for s in get_suite(name)]
    trained, kept = {computation_key(t) for t in train}, {t.key for t in held_out}
    dropped = [t for t in everything if t not in held_out]
    assert len([t for t in dropped if computation_key(t) in trained]) == 33  # of 96, and 5 repeats
    assert all(computation_key(t) in trained or t.key in kept for t in dropped)


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


def test_v0s_artefacts_are_refused_on_tenset_v1_which_holds_out_resnet50():
    """v0 trains on ResNet-50's convolutions (without their epilogues): 12 computations of tenset-v1's held-out
    ResNet-50, in 13 tasks (a bottleneck's last 1x1 convolution at 56x56 is one with its residual add and one,
    the downsampling branch's, without). Its dense layers (BERT-base's, ResNet-50's classifier) are no held-out
    computation of tenset-v1: GPT-2 and Inception-v3 compute them too, so tenset-v1 drops them from its held-out
    split."""
    conv, dense = (LEADERBOARD / f"v0-felix-cost-model-{op}.pt" for op in ("conv2d", "dense"))
    assert check_artefact("v1", conv) == check_artefact("v1", dense) == check_artefact("tenset-v1", dense) == "v0"
    with pytest.raises(ValueError, match=r"trained on 13 held-out tasks of protocol tenset-v1 \(zoo-resnet50/conv2d"):
        check_artefact("tenset-v1", conv)
    # run_protocol checks every artefact a tuner names before it runs anything
    tuner = agent_tuner("felix", {"cost_model": [str(conv), str(dense)]})
    with pytest.raises(ValueError, match="trained for protocol v0"):
        run_protocol(tuner, "tenset-v1", "felix-pretrained", tasks=["zoo-bert-tiny/dense-128x128x512+bias+gelu"])


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


def test_a_checkpoints_sidecar_names_every_task_it_records_synthetic_ones_included(tmp_path):
    smoke = get_protocol("smoke")
    extra = gemm(48, 16, 32, d_m=2, d_k=2, d_n=2, name="synthetic-48x16x32")
    checkpoint = tmp_path / "model.safetensors"
    checkpoint.with_suffix(".json").write_text(json.dumps({"tasks": [t.to_dict() for t in smoke.train_tasks() + (extra,)]}))
    trained_on = checkpoint_training_tasks(checkpoint)
    assert [t.key for t in trained_on] == [t.key for t in smoke.train_tasks()] + [extra.key]
    write_sidecar(checkpoint, smoke, trained_on)
    assert extra.key in artefact_training_keys(checkpoint)[1]
    leaky = gemm(16, 64, 32, d_m=2, d_k=2, d_n=2, name="synthetic-but-held-out")
    checkpoint.with_suffix(".json").write_text(json.dumps({"tasks": [leaky.to_dict()]}))
    with pytest.raises(ValueError, match=r"synthetic-but-held-out \(held-out task smoke-held-16x64x32\)"):
        write_sidecar(checkpoint, smoke, checkpoint_training_tasks(checkpoint))
    for text in ("{", '{"tasks": []}'):
        checkpoint.with_suffix(".json").write_text(text)
        with pytest.raises(ValueError, match="model.json"):
            checkpoint_training_tasks(checkpoint)


def test_felix_training_tasks_are_the_training_split_by_operator():
    by_op = felix_training_tasks("v0", ["conv2d", "dense"])
    train = get_protocol("v0").train_tasks()
    assert by_op["conv2d"] == tuple(t for t in train if t.op == "conv2d")
    assert by_op["dense"] == tuple(t for t in train if t.op == "dense")
    with pytest.raises(ValueError, match="no training task of protocol v0 has operator pool2d"):
        felix_training_tasks("v0", ["pool2d"])
