"""The Ray paths on a local Ray instance: the comparison harness and the generalisation benchmark fanned
out over Ray tasks give the runs and rows of one machine, and RLlib's PPO trains on a registered
environment. Skipped without Ray (``make test-ray``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from schedule_gym.cli import main

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'schedule-gym[ray]' (make test-ray)")

#: What differs between two runs of the same seed: the clock.
CLOCK = ("wall_s",)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _timeless(data: dict) -> dict:
    out = {k: v for k, v in data.items() if k not in CLOCK and not k.endswith("pct_s")}
    if "history" in out:
        out["history"] = [{k: v for k, v in h.items() if k not in CLOCK} for h in out["history"]]
    return out


def test_importing_the_package_does_not_import_ray() -> None:
    import subprocess

    code = ("import sys, schedule_gym, schedule_gym.baselines.compare, schedule_gym.benchmark, schedule_gym.cli; "
            "print('ray' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_compare_fanned_out_over_ray_equals_one_machine(local_ray, tmp_path, capsys) -> None:
    args = ["compare", "--task", "gemm-64x64x64", "--agents", "random", "gbfs", "--seeds", "2",
            "--budgets", "10", "3%", "--no-plots", "--quiet"]
    assert main([*args, "--out", str(tmp_path / "here")]) == 0
    assert main([*args, "--out", str(tmp_path / "ray"), "--ray", "local"]) == 0
    capsys.readouterr()
    here = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert here == sorted(p.name for p in (tmp_path / "ray").iterdir())
    assert len([n for n in here if n.endswith(".json") and n != "results.json"]) == 2 * 2 * 2
    for name in here:
        if name.endswith(".json"):
            one, fanned = (json.loads((tmp_path / d / name).read_text()) for d in ("here", "ray"))
            if name == "results.json":
                one["runs"], fanned["runs"] = [_timeless(r) for r in one["runs"]], [_timeless(r) for r in fanned["runs"]]
            assert _timeless(one) == _timeless(fanned), name
    # a second fanned-out invocation reads every run back: no task runs
    assert main([*args[:-1], "--out", str(tmp_path / "ray"), "--ray", "local"]) == 0
    assert capsys.readouterr().out.count("read back") == 8


def _opening_env(record_file):
    """The mock, whose 'records' are one line per environment opened on the file (a measuring backend's
    record file stands in: it is read at the start of a run and appended to)."""
    from schedule_gym.envs import TilingEnv

    if record_file is not None:
        with open(record_file, "a") as f:
            f.write("opened\n")
    return TilingEnv(task="gemm-64x64x64", backend="mock", backend_options={"profile": "znver5-2core-fitted"})


def test_each_task_returns_its_records_and_the_driver_writes_them(local_ray, tmp_path) -> None:
    """A record file per run, written by the driver from the bytes each task returns; a record file the
    driver already has (a run cut short) is where the task that reruns that run starts from."""
    from schedule_gym.baselines.compare import CompareSpec, run_comparison

    spec = CompareSpec(name="t", make_env=_opening_env, agents=["random"], seeds=[0, 1], budgets=["12"],
                       out_dir=tmp_path / "out", records=True)
    rows = run_comparison(spec, ray_address="local")
    assert [(r.agent, r.seed, r.num_measurements) for r in rows] == [("random", 0, 12), ("random", 1, 12)]
    for seed in (0, 1):
        assert (tmp_path / "out" / f"random__seed{seed}__12.jsonl").read_text() == "opened\n"
    (tmp_path / "out" / "random__seed0__12.json").unlink()  # seed 0 cut short: its records stay
    again = run_comparison(spec, ray_address="local")
    assert (tmp_path / "out" / "random__seed0__12.jsonl").read_text() == "opened\nopened\n"
    assert (tmp_path / "out" / "random__seed1__12.jsonl").read_text() == "opened\n"  # read back, not rerun
    assert [r.best_latency_s for r in again] == [r.best_latency_s for r in rows]
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_a_failing_task_names_its_run_and_the_others_are_saved(local_ray, tmp_path) -> None:
    import os

    from schedule_gym.baselines.compare import CompareSpec, run_comparison
    from schedule_gym.envs import TilingEnv

    marker = str(tmp_path / "first")

    def first_fails(_records):  # the first environment opened (on whichever worker) fails
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return TilingEnv(task="gemm-64x64x64", backend="mock")
        raise OSError("no such device")

    spec = CompareSpec(name="t", make_env=first_fails, agents=["random"], seeds=[0, 1], budgets=["5"],
                       out_dir=tmp_path / "out")
    with pytest.raises(RuntimeError, match=r"run random seed [01] budget 5 failed on Ray: .*no such device"):
        run_comparison(spec, ray_address="local")
    assert len(list((tmp_path / "out").glob("random__seed*__5.json"))) == 1  # the other run is saved
    rows = run_comparison(spec, ray_address="local")  # and the failed one runs again
    assert [(r.seed, r.num_measurements) for r in rows] == [(0, 5), (1, 5)]


def test_ray_with_the_local_tvm_backend_is_refused(tmp_path, capsys) -> None:
    assert main(["compare", "--task", "gemm-64x64x64", "--backend", "tvm", "--ray", "local", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--ray with --backend tvm" in err and "--backend rpc" in err and err.count("\n") == 1


# ----------------------------------------------------------------------------------------- benchmark
#: Two held-out tasks of the smoke protocol (exact references), two seeds: four runs and two references.
HELD_OUT = ["smoke-held-16x64x32", "smoke-held-64x64x16"]
#: What differs between two rows of the same runs: the clock, and the command that made them.
ROW_CLOCK = ("date", "wall_s", "command")


def _row_timeless(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ROW_CLOCK}


def test_benchmark_fanned_out_over_ray_equals_one_machine(local_ray, tmp_path, monkeypatch) -> None:
    """Same per-task results in protocol order and the same metric; the references computed as Ray tasks
    (the driver's cache was empty) and stored by the driver alone."""
    from schedule_gym.benchmark import agent_tuner, run_protocol
    from schedule_gym.cache import CACHE_ENV, cache_dir

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "ray-cache"))
    lines: list[str] = []
    fanned = run_protocol(agent_tuner("gbfs"), "smoke", "gbfs", seeds=[0, 1], tasks=HELD_OUT, ray="local",
                          progress=lines.append)
    assert lines[0] == "4 runs and 2 references submitted to Ray at local"
    assert sorted(lines[1:]) == sorted(f"{name}: regret {r['regret']:.4f} (exact reference)"
                                       for name, r in zip(HELD_OUT, fanned["tasks"]))
    stored = json.loads((cache_dir() / "benchmark" / "references.json").read_text())
    assert sorted(stored.values()) == sorted(r["reference_latency_s"] for r in fanned["tasks"])
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "here-cache"))  # one machine computes its own references
    here = run_protocol(agent_tuner("gbfs"), "smoke", "gbfs", seeds=[0, 1], tasks=HELD_OUT)
    assert [r["task"] for r in fanned["tasks"]] == HELD_OUT and fanned["partial"]
    assert _row_timeless(fanned) == _row_timeless(here)
    lines.clear()  # again: the references are read from the driver's cache, not computed
    again = run_protocol(agent_tuner("gbfs"), "smoke", "gbfs", seeds=[0, 1], tasks=HELD_OUT, ray="local",
                         progress=lines.append)
    assert lines[0] == "4 runs and 0 references submitted to Ray at local"
    assert _row_timeless(again) == _row_timeless(here)


def test_benchmark_cli_with_ray_writes_the_row_of_one_machine(local_ray, tmp_path, capsys) -> None:
    args = ["benchmark", "--protocol", "smoke", "--agent", "random", "--seeds", "0", "1", "--tasks", HELD_OUT[0],
            "--quiet"]
    assert main([*args, "--out", str(tmp_path / "here.json")]) == 0
    assert main([*args, "--out", str(tmp_path / "ray.json"), "--leaderboard", str(tmp_path / "board.jsonl"),
                 "--ray", "local", "--cpus-per-run", "0.5", "--ray-timeout", "120"]) == 0
    here, fanned = (json.loads((tmp_path / name).read_text()) for name in ("here.json", "ray.json"))
    assert _row_timeless(fanned) == _row_timeless(here)
    assert fanned["command"].endswith("--ray local --cpus-per-run 0.5 --ray-timeout 120")
    assert json.loads((tmp_path / "board.jsonl").read_text()) == fanned
    assert "median regret" in capsys.readouterr().out


def test_a_policy_file_runs_on_ray_as_on_one_machine(local_ray, tmp_path) -> None:
    """The workers are given the policy file's bytes (never the loaded model) and load it themselves."""
    pytest.importorskip("sb3_contrib", reason="policies need sb3-contrib (schedule-gym[rl])")
    import pickle

    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    from schedule_gym.benchmark import get_protocol, policy_tuner, run_protocol

    protocol = get_protocol("smoke")
    env = gym.make("schedule_gym/MultiTask-v0", max_episode_steps=10, **protocol.env_kwargs("train"))
    MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu").learn(32).save(
        tmp_path / "model.zip")
    tuner = policy_tuner(tmp_path / "model.zip", protocol)
    assert tuner.portable and pickle.loads(pickle.dumps(tuner))._model is None
    here = run_protocol(tuner, protocol, "policy", seeds=[0, 1], tasks=HELD_OUT[:1])
    fanned = run_protocol(tuner, protocol, "policy", seeds=[0, 1], tasks=HELD_OUT[:1], ray="local")
    assert _row_timeless(fanned) == _row_timeless(here)


class _FailingTuner:
    """A portable tuner whose runs of seed 1 fail, and whose runs of seed 0 take ``seconds_s``."""

    portable = True

    def __init__(self, seconds_s: float = 0.0) -> None:
        self.seconds_s = seconds_s

    def __call__(self, task, backend, seed, budget):
        import time

        if seed == 1:
            raise OSError("no such device")
        time.sleep(self.seconds_s)
        return 1.0


def test_a_failed_or_late_benchmark_run_is_an_error_naming_its_task_and_seed(local_ray) -> None:
    from schedule_gym.benchmark import run_protocol

    with pytest.raises(RuntimeError, match=r"^run smoke-held-16x64x32 seed 1 failed on Ray: OSError: no such device"):
        run_protocol(_FailingTuner(), "smoke", "t", seeds=[0, 1], tasks=HELD_OUT[:1], ray="local")
    with pytest.raises(ConnectionError, match=r"no Ray task finished within the deadline of 2 s; still running or "
                                              r"queued: run smoke-held-16x64x32 seed 0$"):
        run_protocol(_FailingTuner(seconds_s=600), "smoke", "t", seeds=[0], tasks=HELD_OUT[:1], ray="local",
                     ray_timeout_s=2)


def test_benchmark_on_ray_refuses_a_tuner_it_cannot_rebuild_and_a_malformed_address(capsys) -> None:
    from schedule_gym.benchmark import run_protocol

    with pytest.raises(TypeError, match="rebuilt on each worker from plain data"):
        run_protocol(lambda task, backend, seed, budget: 1.0, "smoke", "closure", ray="local")
    assert main(["benchmark", "--protocol", "smoke", "--agent", "random", "--ray", "head-node"]) == 2
    assert "a Ray address is 'local', 'auto', HOST:PORT or ray://HOST[:PORT], got 'head-node'" in capsys.readouterr().err
    assert main(["benchmark", "--protocol", "smoke", "--agent", "random", "--ray-timeout", "5"]) == 2
    assert "--ray-timeout goes with --ray ADDRESS" in capsys.readouterr().err


def test_benchmark_at_an_address_where_no_ray_answers_is_one_line_exit_2(tmp_path) -> None:
    """In a process of its own: this module's Ray instance would be used whatever the address."""
    import os
    import subprocess

    from schedule_gym.cache import CACHE_ENV

    done = subprocess.run([sys.executable, "-m", "schedule_gym.cli", "benchmark", "--protocol", "smoke", "--agent",
                           "random", "--ray", "127.0.0.1:1", "--quiet"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, CACHE_ENV: str(tmp_path)})
    assert done.returncode == 2
    assert done.stderr.startswith("schedule-gym: error: no Ray cluster answers at 127.0.0.1:1 (")
    assert done.stderr.count("\n") == 1


@pytest.mark.slow
def test_rllib_ppo_trains_one_iteration(local_ray) -> None:
    pytest.importorskip("ray.rllib", reason="RLlib is not installed (see docs/cluster.md)")
    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    try:
        from ray_rllib_ppo import Args, train
    finally:
        sys.path.pop(0)
    (result,) = train(Args(iterations=1, train_batch_size=100, minibatch_size=50))
    assert result["training_iteration"] == 1
    assert result["env_runners"]["num_env_steps_sampled_lifetime"] >= 100
