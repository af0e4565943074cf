"""The comparison harness (`schedule-gym compare`): tables, plots, regret, resume, bad input."""

from __future__ import annotations

import csv
import json

import pytest

from schedule_gym.baselines.compare import ANCHOR, CompareSpec, RunRow, best_at, median_table, run_comparison, summarize
from schedule_gym.cli import main
from schedule_gym.envs import TilingEnv

TABLE = "gemm-128-323-znver5-1t"


def test_compare_on_the_shipped_table_writes_tables_plots_and_resumes(tmp_path, capsys) -> None:
    args = ["compare", "--table", TABLE, "--agents", "random", "gbfs", "grid", "--seeds", "2",
            "--budgets", "20", "100%", "--out", str(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "reference: known optimum, 0.01785 ms" in out
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 * 2 * 2
    for row in rows:
        if row["budget"] == "20":
            assert int(row["num_measurements"]) == 20
    # with the whole space, every agent's regret is zero and each reaches 99% of the optimum
    full = [r for r in rows if r["budget"] == "100%"]
    assert all(float(r["regret"]) == 0.0 for r in full)
    assert all(r["time_to_99pct_s"] != "" for r in full)
    assert all(1 <= int(r["measurements_to_99pct"]) <= int(r["num_measurements"]) for r in full)
    # grid search measures in index order: it reaches the optimum exactly when it measures it
    grid = [r for r in full if r["agent"] == "grid"]
    assert len({r["measurements_to_99pct"] for r in grid}) == 1
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["reference"] == "known optimum" and len(data["runs"]) == 12
    for name in ("best_vs_fraction.png", "best_vs_time.png", "box_20.png", "box_100.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    # a second invocation reads every run back instead of running it
    assert main(args + ["--no-plots"]) == 0
    assert capsys.readouterr().out.count("read back") == 12


def test_compare_on_the_mock_knows_the_exact_optimum(tmp_path, capsys) -> None:
    args = ["compare", "--task", "gemm-16x16x16", "--agents", "grid", "--seeds", "1", "--budgets", "100%",
            "--out", str(tmp_path), "--no-plots"]
    assert main(args) == 0
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["reference"] == "known optimum"
    assert data["runs"][0]["regret"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--agents", "nope"], "unknown agent 'nope'"),
     (["--budgets", "lots"], "budget 'lots' is not a count"),
     (["--backend", "replay"], "compare measures with mock, tvm or rpc (or replays a shipped --table), got 'replay'"),
     (["--metaschedule"], "--metaschedule tunes on this machine with TVM: it needs --backend tvm"),
     (["--backend", "tvm", "--metaschedule", "--budgets", "15m"], "--metaschedule takes trial budgets"),
     (["--backend", "tvm", "--metaschedule", "0"], "--metaschedule takes a positive number of seeds, got 0"),
     (["--agents", "random", "--agent-param", "policy.model=x.zip"], "parameters given for agent 'policy', which is not compared"),
     (["--agent-param", "batch_size=3"], "bad --agent-param batch_size=3: name the agent, as AGENT.KEY=VALUE"),
     (["--agents", "policy"], "the policy tuner needs model= the path of a saved SB3 model"),
     (["--agents", "random", "--agent-param", "random.nope=1"], "bad parameters {'nope': 1} for agent 'random'")],
)
def test_compare_bad_input_is_one_line(tmp_path, capsys, extra, message) -> None:
    assert main(["compare", "--task", "gemm-64x64x64", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: ") and message in err and err.count("\n") == 1


def test_compare_unknown_table_is_named(tmp_path, capsys) -> None:
    assert main(["compare", "--table", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown table 'nope'; shipped tables: gemm-128-323-znver5-1t" in capsys.readouterr().err


def _anchor_run(seed: int, budget: str, work_dir) -> dict:
    """A stand-in for MetaSchedule: 3 trials at 0 s, 5 s and 50 s, each better than the last."""
    history = [{"n": n, "wall_s": t, "latency_s": lat, "best_latency_s": lat, "error": None}
               for n, t, lat in ((1, 0.0, 3e-3), (2, 5.0, 2e-3), (3, 50.0, 1e-3))]
    return {"agent": ANCHOR, "seed": seed, "num_measurements": 3, "space_size": 1000, "best_latency_s": 1e-3,
            "best_gflops": 1.0, "wall_s": 50.0, "stop_reason": "budget", "history": history}


def test_an_external_anchor_is_run_once_saved_and_compared_at_equal_wall_time(tmp_path) -> None:
    calls = []

    def anchor(seed, budget, work_dir):
        calls.append((seed, budget))
        return _anchor_run(seed, budget, work_dir)

    spec = CompareSpec(name="t", make_env=lambda _r: TilingEnv(task="gemm-64x64x64", backend="mock"),
                       agents=["random", ANCHOR], seeds=[0, 1], budgets=["10"], out_dir=tmp_path,
                       external={ANCHOR: anchor}, agent_seeds={ANCHOR: [0]})
    rows = run_comparison(spec)
    assert [(r.agent, r.seed) for r in rows] == [("random", 0), ("random", 1), (ANCHOR, 0)]
    assert calls == [(0, "10")]
    run_comparison(spec)  # read back, not run again
    assert calls == [(0, "10")]
    table, _, _ = summarize(spec, rows)
    # the random runs took well under 5 s: the anchor had only its first trial by then
    for entry in table:
        if entry["agent"] == "random":
            assert entry["wall_s"] < 5.0
            assert entry["anchor_same_time_latency_s"] == 3e-3
        else:
            assert entry["anchor_same_time_latency_s"] is None
    text = median_table(table, flops=2 * 64**3)
    assert f"{ANCHOR} same time" in text.splitlines()[0]


def test_best_at_reads_the_best_so_far_at_a_time() -> None:
    row = RunRow.from_result(_anchor_run(0, "3", None), "3")
    assert best_at(row, -1.0) is None
    assert best_at(row, 0.0) == 3e-3
    assert best_at(row, 49.9) == 2e-3
    assert best_at(row, 1e9) == 1e-3


@pytest.mark.tvm
def test_metaschedule_baseline_tunes_the_same_gemm_and_checks_its_best_kernel(tmp_path) -> None:
    from schedule_gym.baselines.metaschedule import REMEASURE, run_metaschedule
    from schedule_gym.tasks import get_task

    task = get_task("gemm-64x64x64")
    result = run_metaschedule(task, 4, tmp_path / "ms", seed=0, timeout_s=120.0)  # robust on a loaded CI machine
    assert result["agent"] == ANCHOR and result["num_measurements"] == 4
    history = result["history"]
    assert [h["n"] for h in history] == [1, 2, 3, 4]
    # every trial built and ran (a build worker spending the timeout in TVM's intrinsic import failed all)
    assert result["metaschedule"]["failed_trials"] == 0, [h["error"] for h in history]
    times = [h["wall_s"] for h in history]
    assert times == sorted(times) and 0 < times[-1] <= result["wall_s"]
    best = [h["best_latency_s"] for h in history if h["best_latency_s"] is not None]
    assert best == sorted(best, reverse=True)
    ms = result["metaschedule"]
    assert ms["remeasure_error"] is None and ms["failed_trials"] == 0
    assert len(ms["remeasured_latencies_s"]) == 1 + REMEASURE  # checked against NumPy, then timed
    assert result["best_latency_s"] > 0 and result["best_gflops"] == pytest.approx(task.flops / result["best_latency_s"] * 1e-9)
    assert "sch.parallel" in ms["trace"] or "parallel" in ms["trace"]
    row = RunRow.from_result(result, "4")  # the harness reads it like an agent's run
    assert row.num_measurements == 4
    # the tensor intrinsics were imported for it (before its clock started), leaving inspect's cache as it was
    import inspect

    import tvm

    assert tvm.s_tir.TensorIntrin.get("dot_16x4_vnni") is not None
    assert not [k for k in inspect.modulesbyfile if k.startswith("<frozen")]


@pytest.mark.tvm
@pytest.mark.parametrize(
    "kwargs, text",
    [
        ({"trials": 0}, "MetaSchedule needs a positive whole number of trials, got 0"),
        ({"trials": 2.5}, "MetaSchedule needs a positive whole number of trials, got 2.5"),
        ({"trials": 4, "timeout_s": -1}, "MetaSchedule's timeout_s must be a positive number of seconds, got -1"),
    ],
)
def test_metaschedule_baseline_rejects_bad_input(tmp_path, kwargs, text) -> None:
    from schedule_gym.baselines.metaschedule import run_metaschedule
    from schedule_gym.tasks import get_task

    with pytest.raises(ValueError, match=text):
        run_metaschedule(get_task("gemm-64x64x64"), work_dir=tmp_path / "ms", **kwargs)
    assert not (tmp_path / "ms").exists()  # refused before anything was written
