"""The Ray paths on a local Ray instance: the comparison harness fanned out over Ray tasks gives the runs of
one machine, and RLlib's PPO trains on a registered environment. Skipped without Ray (``make test-ray``)."""

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

    code = "import sys, schedule_gym, schedule_gym.baselines.compare; print('ray' in sys.modules)"
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
