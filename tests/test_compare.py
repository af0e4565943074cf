"""The comparison harness (`schedule-gym compare`): tables, plots, regret, resume, bad input."""

from __future__ import annotations

import csv
import json

import pytest

from schedule_gym.cli import main

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
     (["--backend", "replay"], "compare measures with mock, tvm or rpc (or replays a shipped --table), got 'replay'")],
)
def test_compare_bad_input_is_one_line(tmp_path, capsys, extra, message) -> None:
    assert main(["compare", "--task", "gemm-64x64x64", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: ") and message in err and err.count("\n") == 1


def test_compare_unknown_table_is_named(tmp_path, capsys) -> None:
    assert main(["compare", "--table", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown table 'nope'; shipped tables: gemm-128-323-znver5-1t" in capsys.readouterr().err
