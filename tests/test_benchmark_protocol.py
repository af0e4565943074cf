"""The generalisation protocol: disjoint splits, the metric with exact numbers, references, the CLI."""

from __future__ import annotations

import json
import pickle
import statistics
from pathlib import Path

import numpy as np
import pytest

from schedule_gym.backends.mock.backend import MockBackend
from schedule_gym.benchmark import PROTOCOLS, Protocol, agent_tuner, get_protocol, reference_latency, run_protocol
from schedule_gym.cli import main
from schedule_gym.tasks import gemm

PROFILE = "znver5-2core-fitted"
TINY = Protocol(
    "tiny",
    train=(gemm(32, 32, 32, d_m=2, d_k=2, d_n=2, name="t-train"),),
    held_out=(gemm(16, 32, 16, d_m=2, d_k=2, d_n=2, name="t-a"), gemm(32, 16, 64, d_m=2, d_k=2, d_n=2, name="t-b"),
              gemm(64, 16, 16, d_m=2, d_k=2, d_n=2, name="t-c")),
    budget=1000, seeds=(0, 1), profile=PROFILE,
)


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_no_held_out_task_is_a_training_task(name):
    protocol = get_protocol(name)
    train = {t.key for t in protocol.train_tasks()}
    held_out = [t.key for t in protocol.held_out_tasks()]
    assert held_out and train and not train & set(held_out)
    assert len(set(held_out)) == len(held_out)


def test_v0_drops_the_layers_resnet18_shares_with_resnet50():
    protocol = get_protocol("v0")
    names = {t.name for t in protocol.held_out_tasks()}
    assert "resnet18/conv0" not in names  # the 7x7 stem, also ResNet-50's
    assert "resnet18/conv10" in names and "mobilenetv2/conv1" in names
    assert {t.op for t in protocol.held_out_tasks()} == {"conv2d", "dense"}


def test_grid_search_with_the_whole_space_has_zero_regret():
    row = run_protocol(agent_tuner("grid"), TINY, "grid")
    assert [r["reference"] for r in row["tasks"]] == ["exact"] * 3
    assert [r["regret"] for r in row["tasks"]] == [0.0, 0.0, 0.0]
    assert (row["median_regret"], row["mean_regret"], row["seeds"], row["partial"]) == (0.0, 0.0, [0, 1], False)


def test_metric_is_the_median_of_per_task_regrets_against_the_exact_optimum():
    backend = MockBackend(profile=PROFILE)

    def s0_only(task, backend_, seed, budget):  # measures s0 alone: the regret is s0 / optimum - 1
        space = backend_.space(task)
        return float(backend_.model_latency_s(task, [space.index_of_rows(space.rows(space.initial_config()))])[0])

    row = run_protocol(s0_only, TINY, "s0")
    expected = []
    for task in TINY.held_out_tasks():
        latencies = backend.score_space(task)
        space = backend.space(task)
        s0 = latencies[space.index_of_rows(space.rows(space.initial_config()))]
        expected.append(s0 / latencies.min() - 1.0)
    assert [r["regret"] for r in row["tasks"]] == pytest.approx(expected, rel=1e-12)
    assert row["median_regret"] == pytest.approx(statistics.median(expected), rel=1e-12)
    assert min(expected) > 0


def test_references_are_cached_and_search_never_beats_the_optimum(monkeypatch):
    backend = MockBackend(profile=PROFILE)
    task = TINY.held_out_tasks()[1]
    exact, kind = reference_latency(task, backend, exact_limit=10**6)
    assert kind == "exact" and exact == backend.score_space(task).min()
    monkeypatch.setattr(MockBackend, "score_space", lambda *a, **k: pytest.fail("not cached"))
    assert reference_latency(task, backend, exact_limit=10**6) == (exact, "exact")
    search, kind = reference_latency(task, backend, exact_limit=0)
    assert kind == "search" and search >= exact


def _cache_of_38_references(tmp_path, monkeypatch):
    """The reference cache of a fresh user cache, filled with 38 entries (the real one among them); its path."""
    from schedule_gym.cache import CACHE_ENV, references_path

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    backend = MockBackend(profile=PROFILE)
    task = TINY.held_out_tasks()[0]
    latency, _ = reference_latency(task, backend, exact_limit=10**6)
    path = references_path()
    entries = json.loads(path.read_text())
    entries.update({f"mock:zzz|task{i}|exact": 1e-3 * (i + 1) for i in range(37)})
    path.write_text(json.dumps(entries, indent=0, sort_keys=True) + "\n")
    return path, backend, task, latency


def test_a_truncated_reference_cache_is_rebuilt_keeping_every_entry_it_can_read(tmp_path, monkeypatch, caplog):
    path, backend, task, latency = _cache_of_38_references(tmp_path, monkeypatch)
    text = path.read_text()
    path.write_text(text[: text.index('"mock:zzz|task7|exact"') + 10])  # cut short inside an entry
    monkeypatch.setattr(MockBackend, "score_space", lambda *a, **k: pytest.fail("recomputed a kept entry"))
    with caplog.at_level("WARNING"):
        assert reference_latency(task, backend, exact_limit=10**6) == (latency, "exact")
    kept = json.loads(path.read_text())  # rebuilt, valid, with every whole entry the file held
    assert len(kept) == 35 and "mock:zzz|task7|exact" not in kept and kept["mock:zzz|task36|exact"] == 0.037
    assert (path.parent / "references.json.damaged").read_text() == text[: text.index('"mock:zzz|task7|exact"') + 10]
    [message] = [r.getMessage() for r in caplog.records]
    assert message == (f"{path}: the benchmark's reference cache was damaged (it is not valid JSON (cut short?)): rebuilt "
                       f"with the 35 entries it held (the rest are computed again when needed); the damaged file is kept "
                       f"as {path}.damaged")
    caplog.clear()
    assert reference_latency(task, backend, exact_limit=10**6) == (latency, "exact") and not caplog.records  # once


@pytest.mark.parametrize("content, why, left", [
    ("[1, 2, 3]\n", "it holds a JSON list, not an object", 0),
    ('"references"\n', "it holds a JSON str, not an object", 0),
    ('{"a|b|exact": 0.5, "c|d|exact": "fast", "e|f|exact": -1}\n', "2 entries are not latencies", 1),
])
def test_a_reference_cache_that_is_json_but_not_an_object_of_latencies_is_rebuilt(tmp_path, monkeypatch, caplog,
                                                                                  content, why, left):
    path, backend, task, latency = _cache_of_38_references(tmp_path, monkeypatch)
    path.write_text(content)
    with caplog.at_level("WARNING"):
        assert reference_latency(task, backend, exact_limit=10**6) == (latency, "exact")  # computed again
    assert f"reference cache was damaged ({why}): rebuilt with the {left} entries it held" in caplog.text
    assert len(json.loads(path.read_text())) == left + 1 and (path.parent / "references.json.damaged").read_text() == content


def test_a_reference_cache_that_cannot_be_read_is_an_error_naming_it(tmp_path, monkeypatch):
    from schedule_gym.cache import CACHE_ENV, references_path

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    references_path().mkdir(parents=True)  # a directory where the file should be
    with pytest.raises(ValueError, match=rf"^{references_path()}: the benchmark's reference cache cannot be read "):
        reference_latency(TINY.held_out_tasks()[0], MockBackend(profile=PROFILE), exact_limit=10**6)


def test_the_reference_cache_is_replaced_whole(tmp_path, monkeypatch):
    import os

    path, backend, task, latency = _cache_of_38_references(tmp_path, monkeypatch)
    replaced = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append((str(src), str(dst))), real(src, dst))[1])
    reference_latency(task, backend, exact_limit=0)  # a new entry (search)
    assert replaced == [(f"{path}.{os.getpid()}.tmp", str(path))] and len(json.loads(path.read_text())) == 39
    assert sorted(p.name for p in path.parent.iterdir()) == ["references.json"]


def test_random_search_reruns_equal():
    first = run_protocol(agent_tuner("random"), "smoke", "random")
    second = run_protocol(agent_tuner("random"), "smoke", "random")
    assert [r["best_latency_s"] for r in first["tasks"]] == [r["best_latency_s"] for r in second["tasks"]]
    assert first["median_regret"] >= 0


def test_benchmark_cli_writes_a_row_and_appends_to_the_leaderboard(tmp_path, capsys):
    out, board = tmp_path / "row.json", tmp_path / "board" / "v.jsonl"
    for _ in range(2):
        assert main(["benchmark", "--protocol", "smoke", "--agent", "gbfs", "--out", str(out),
                     "--leaderboard", str(board), "--quiet"]) == 0
    row = json.loads(out.read_text())
    assert row["agent"] == "gbfs" and row["protocol"]["name"] == "smoke" and len(row["tasks"]) == 2
    assert row["command"].startswith("schedule-gym benchmark --protocol smoke --agent gbfs")
    assert {"cpu", "profile", "date", "wall_s", "median_regret"} <= set(row)
    assert [json.loads(line) for line in board.read_text().splitlines()][1]["median_regret"] == row["median_regret"]
    assert "median regret" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--protocol", "v9", "--agent", "random"], "unknown protocol 'v9'"),
    (["--protocol", "smoke", "--agent", "bogus"], "unknown agent 'bogus'"),
    (["--protocol", "smoke", "--agent", "csp"], "unknown agent 'csp'"),
    (["--protocol", "smoke", "--policy", "nothing.zip"], "is not a saved Stable-Baselines3 model"),
    (["--protocol", "smoke", "--agent", "random", "--tasks", "resnet50/conv2"], "not held-out tasks"),
])
def test_benchmark_cli_bad_input_is_one_line_exit_2(argv, message, capsys):
    assert main(["benchmark", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("schedule-gym: error:")


def _saved_smoke_policy(path):
    """A MaskablePPO model for protocol ``smoke``, trained for 32 steps and saved at ``path``; the model."""
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    env = gym.make("schedule_gym/MultiTask-v0", max_episode_steps=10, **get_protocol("smoke").env_kwargs("train"))
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(total_timesteps=32)
    model.save(path)
    return model


def test_a_saved_policy_loads_without_unpickling_and_runs_the_protocol(tmp_path, monkeypatch):
    import stable_baselines3.common.save_util as save_util

    from schedule_gym.benchmark import load_policy, policy_tuner

    protocol = get_protocol("smoke")
    model = _saved_smoke_policy(tmp_path / "model.zip")
    monkeypatch.setattr(save_util.cloudpickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    loaded = load_policy(tmp_path / "model.zip", protocol)
    obs = np.zeros(loaded.observation_space.shape, dtype=np.float32)
    for key, value in model.policy.state_dict().items():
        assert (loaded.policy.state_dict()[key] == value).all()
    assert loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]
    first = run_protocol(policy_tuner(loaded, protocol), protocol, "policy")
    second = run_protocol(policy_tuner(loaded, protocol), protocol, "policy")
    assert first["tasks"] == second["tasks"] and first["median_regret"] >= 0
    # made from the file, a tuner pickles as the file's bytes (not the model) and loads them where it runs
    copy = pickle.loads(pickle.dumps(policy_tuner(tmp_path / "model.zip", protocol)))
    assert copy.portable and copy._model is None and copy.policy_bytes == (tmp_path / "model.zip").read_bytes()
    assert run_protocol(copy, protocol, "policy")["tasks"] == first["tasks"]
    assert not policy_tuner(loaded, protocol).portable
    with pytest.raises(ValueError, match="observations"):
        load_policy(tmp_path / "model.zip", "v0")


def _rewritten(source, target, change):
    """A copy of the zip ``source`` at ``target`` with ``change(entry name, bytes)`` applied to every entry."""
    import zipfile

    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for item in old.infolist():
            new.writestr(item, change(item.filename, old.read(item.filename)))
    return target


class Payload:
    """Anything but a tensor: what a pickled weights entry holds."""


def test_a_policy_with_pickled_or_misfitting_weights_is_one_line_naming_the_file_and_why(tmp_path, capsys):
    import io

    import torch

    from schedule_gym.benchmark import load_policy

    protocol = get_protocol("smoke")
    _saved_smoke_policy(tmp_path / "good.zip")

    def pickled(name, data):
        if name != "policy.pth":
            return data
        buffer = io.BytesIO()
        torch.save({"policy": Payload()}, buffer)
        return buffer.getvalue()

    def narrower(name, data):  # the data entry describes 8-unit layers; the weights are 64-unit ones
        return json.dumps({**json.loads(data), "policy_kwargs": {"net_arch": [8, 8]}}).encode() if name == "data" else data

    bad = _rewritten(tmp_path / "good.zip", tmp_path / "pickled.zip", pickled)
    with pytest.raises(ValueError) as info:
        load_policy(bad, protocol)
    assert str(info.value) == (f"{bad}: its entry 'policy.pth' is not plain tensors (Unsupported global: GLOBAL "
                               f"{Payload.__module__}.Payload was not an allowed global by default); refusing to unpickle it")
    misfit = _rewritten(tmp_path / "good.zip", tmp_path / "narrow.zip", narrower)
    with pytest.raises(ValueError, match=rf"^{misfit}: its weights do not fit the policy its 'data' entry describes \(10 "
                                         r"mismatches; the first: size mismatch for mlp_extractor\.policy_net\.0\.weight: "
                                         r"copying a param with shape torch\.Size\(\[64, 13\]\) from checkpoint, the shape "
                                         r"in current model is torch\.Size\(\[8, 13\]\)\)$"):
        load_policy(misfit, protocol)
    for path, reason in ((bad, "is not plain tensors"), (misfit, "its weights do not fit")):
        assert main(["benchmark", "--protocol", "smoke", "--policy", str(path), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"schedule-gym: error: {path}: ") and reason in err and err.count("\n") == 1
    # the tune command's policy agent (SB3's own loader) says the same
    (tmp_path / "algo.txt").write_text("maskable_ppo")
    assert main(["tune", "--task", "gemm-64", "--budget", "5", "--agent", "policy", "--agent-param", f"model={bad}",
                 "--quiet", "--no-numpy"]) == 2
    assert capsys.readouterr().err == f"schedule-gym: error: {str(info.value)}\n"


SHIPPED_POLICY = Path(__file__).resolve().parents[1] / "leaderboard" / "v0-maskable_ppo-8k.zip"


@pytest.mark.skipif(not SHIPPED_POLICY.is_file(), reason="the pretrained v0 policy is not in this checkout")
def test_the_shipped_v0_policy_loads_without_unpickling(monkeypatch):
    import stable_baselines3.common.save_util as save_util

    from schedule_gym.benchmark import load_policy

    monkeypatch.setattr(save_util.cloudpickle, "loads", lambda *a, **k: pytest.fail("unpickled"))
    model = load_policy(SHIPPED_POLICY, "v0")
    layout = get_protocol("v0").layout()
    assert model.observation_space.shape == (layout.size,) and model.action_space.n == layout.max_actions
