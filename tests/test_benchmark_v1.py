"""Protocol v1: v0's split at budget tracks with five seeds, and its statistics (median and IQM with
stratified-bootstrap intervals) checked by hand on small matrices."""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from schedule_gym.benchmark import Protocol, agent_tuner, get_protocol, run_protocol
from schedule_gym.benchmark.protocol import computation_key
from schedule_gym.benchmark.aggregate import (
    BOOTSTRAP_REPS,
    aggregate_iqm,
    aggregate_median,
    stratified_bootstrap_interval,
    summarise_regrets,
)
from schedule_gym.cli import main
from schedule_gym.tasks import gemm, get_suite

GOLDEN = json.loads((Path(__file__).parent / "golden" / "v0-tasks.json").read_text())
TRACKS = Protocol(
    "tracks",
    train=(gemm(32, 32, 32, d_m=2, d_k=2, d_n=2, name="k-train"),),
    held_out=(gemm(16, 32, 16, d_m=2, d_k=2, d_n=2, name="k-a"), gemm(32, 16, 64, d_m=2, d_k=2, d_n=2, name="k-b"),
              gemm(64, 16, 16, d_m=2, d_k=2, d_n=2, name="k-c")),
    budget=4, seeds=(0, 1, 2), budget_tracks=(2, 4, 8), intervals=True,
)


def test_v1_has_v0s_task_lists_tracks_seeds_and_intervals():
    """v1 keeps v0's suites filtered to v0's operators: the same tasks, so the same layout (v0's policies run)."""
    protocol = get_protocol("v1")
    assert [[t.name, t.key] for t in protocol.train_tasks()] == GOLDEN["protocol-v0/train"]
    assert [[t.name, t.key] for t in protocol.held_out_tasks()] == GOLDEN["protocol-v0/held_out"]
    assert protocol.layout().to_dict() == GOLDEN["protocol-v0/layout"]
    assert (protocol.budget_tracks, protocol.budget, protocol.seeds) == ((16, 64, 256), 64, (0, 1, 2, 3, 4))
    assert protocol.intervals and protocol.profile == get_protocol("v0").profile


def test_v0_is_unchanged_by_the_new_fields():
    v0 = get_protocol("v0")
    assert v0.to_dict() == {"name": "v0", "train": "resnet50,bert-base", "held_out": "resnet18,mobilenetv2",
                            "budget": 100, "seeds": [0, 1], "profile": "znver5-2core-fitted", "exact_limit": 200_000,
                            "operators": "conv2d,dense,batch_matmul"}
    assert v0.at_budget(None) is v0 and v0.at_budget(100) is v0
    with pytest.raises(ValueError, match="protocol v0 has no budget track 64; its tracks: 100 only"):
        v0.at_budget(64)


def test_budget_tracks_are_checked():
    assert TRACKS.at_budget(8).budget == 8 and TRACKS.at_budget(8).to_dict()["budget_tracks"] == [2, 4, 8]
    with pytest.raises(ValueError, match=r"no budget track 5; its tracks: 2, 4, 8"):
        TRACKS.at_budget(5)
    with pytest.raises(ValueError, match=r"protocol bad: budget 3 is not one of its budget tracks \[2, 4\]"):
        Protocol("bad", train="resnet50", held_out="resnet18", budget=3, budget_tracks=(2, 4))


def test_median_and_iqm_by_hand():
    scores = np.array([[0.0, 1.0], [2.0, 4.0], [10.0, 10.0], [3.0, 5.0]])  # 4 tasks x 2 seeds
    assert aggregate_median(scores) == statistics.median([0.5, 3.0, 10.0, 4.0]) == 3.5
    # 8 scores sorted 0 1 2 3 4 5 10 10: the middle four are 2 3 4 5
    assert aggregate_iqm(scores) == 3.5
    assert aggregate_iqm(np.arange(12.0).reshape(3, 4)) == pytest.approx(np.mean([3, 4, 5, 6, 7, 8]))
    stack = np.stack([scores, scores + 1.0])
    assert aggregate_median(stack).tolist() == [3.5, 4.5] and aggregate_iqm(stack).tolist() == [3.5, 4.5]
    with pytest.raises(ValueError, match=r"non-empty \(task x seed\) matrix, got shape \(2,\)"):
        aggregate_iqm([1.0, 2.0])


def test_the_bootstrap_resamples_seeds_within_tasks_only():
    """Tasks whose seeds agree leave nothing to resample: the interval is the point, though the tasks differ
    (a bootstrap over all runs, or over tasks, would move)."""
    scores = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [5.0, 5.0, 5.0]])
    assert stratified_bootstrap_interval(scores, aggregate_median) == (1.0, 1.0)
    assert aggregate_iqm(scores) == pytest.approx(1.6)  # 0 0 0 1 1 1 5 5 5, two cut at each end: 0 1 1 1 5
    assert stratified_bootstrap_interval(scores, aggregate_iqm) == (aggregate_iqm(scores),) * 2
    # one task varies: the median over tasks moves only with that task's mean of resampled seeds
    varied = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 2.0], [5.0, 5.0, 5.0]])
    low, high = stratified_bootstrap_interval(varied, aggregate_median, reps=20_000)
    assert 0.0 <= low < 1.0 < high <= 2.0
    assert (low, high) == stratified_bootstrap_interval(varied, aggregate_median, reps=20_000)  # seeded


def test_the_interval_is_the_percentile_interval_of_an_enumerable_bootstrap():
    """One task of two seeds {0, 1}: a resample's mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4, so the
    2.5th and 97.5th percentiles are 0 and 1; at 40% coverage (30th to 70th) both are 0.5."""
    scores = np.array([[0.0, 1.0]])
    assert stratified_bootstrap_interval(scores, aggregate_median, reps=4000) == (0.0, 1.0)
    assert stratified_bootstrap_interval(scores, aggregate_median, reps=4000, confidence=0.4) == (0.5, 0.5)


def test_no_interval_without_seeds_to_resample_or_with_a_run_that_measured_nothing():
    assert stratified_bootstrap_interval(np.ones((4, 1)), aggregate_iqm) is None
    assert stratified_bootstrap_interval(np.array([[0.0, np.inf], [1.0, 1.0]]), aggregate_iqm) is None
    for bad, message in ((0, "reps must be a positive int"), (True, "reps must be a positive int")):
        with pytest.raises(ValueError, match=message):
            stratified_bootstrap_interval(np.ones((2, 2)), aggregate_iqm, reps=bad)
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
        stratified_bootstrap_interval(np.ones((2, 2)), aggregate_iqm, confidence=1.0)


def _rliable():
    try:  # rliable 1.2.0 imports arch<8, which fails to import under pandas 3 (a TypeError, not an ImportError)
        from rliable import library, metrics
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"rliable cannot be imported here: {type(exc).__name__}")
    return library, metrics


def test_the_statistics_agree_with_rliable_where_it_imports():
    library, metrics = _rliable()
    scores = np.random.default_rng(1).gamma(2.0, 0.3, size=(38, 5))
    np.random.seed(0)  # rliable draws its resamples from NumPy's global generator
    points, intervals = library.get_interval_estimates(
        {"a": scores.T}, lambda x: np.array([metrics.aggregate_median(x), metrics.aggregate_iqm(x)]), reps=20_000)
    assert points["a"].tolist() == pytest.approx([aggregate_median(scores), aggregate_iqm(scores)], rel=1e-12)
    ours = [stratified_bootstrap_interval(scores, f, reps=20_000) for f in (aggregate_median, aggregate_iqm)]
    assert np.asarray(ours).T == pytest.approx(intervals["a"], abs=0.01)


def test_a_row_at_a_budget_track_records_it_with_the_statistics():
    row = run_protocol(agent_tuner("random"), TRACKS, "random", budget_track=2)
    assert row["budget_track"] == 2 and row["protocol"]["budget"] == 2 and row["seeds"] == [0, 1, 2]
    matrix = [[b / t["reference_latency_s"] - 1.0 for b in t["best_latency_s"]] for t in row["tasks"]]
    assert row["iqm_regret"] == aggregate_iqm(matrix)
    assert row["median_regret"] == pytest.approx(aggregate_median(matrix), rel=1e-12)
    for name in ("median_regret", "iqm_regret"):
        low, high = row[f"{name}_interval"]
        assert low <= row[name] <= high
    assert row["interval_method"]["reps"] == BOOTSTRAP_REPS
    assert summarise_regrets(matrix)["iqm_regret_interval"] == row["iqm_regret_interval"]
    wider = run_protocol(agent_tuner("random"), TRACKS, "random", budget_track=8)
    assert all(len(t["best_latency_s"]) == 3 for t in wider["tasks"]) and wider["iqm_regret"] <= row["iqm_regret"]
    # v0 rows keep their fields: no track, no IQM
    assert not {"budget_track", "iqm_regret", "split"} & set(run_protocol(agent_tuner("random"), "smoke", "r"))


def test_the_training_split_is_scored_on_request():
    row = run_protocol(agent_tuner("random"), TRACKS, "random", split="train")
    assert row["split"] == "train" and [t["task"] for t in row["tasks"]] == ["k-train"]
    with pytest.raises(ValueError, match="split must be one of 'train', 'held_out', 'validation', got 'test'"):
        run_protocol(agent_tuner("random"), TRACKS, "random", split="test")
    with pytest.raises(ValueError, match="not training tasks of protocol tracks: k-a"):
        run_protocol(agent_tuner("random"), TRACKS, "random", split="train", tasks=["k-a"])


def test_the_validation_split_is_in_neither_split_fits_the_layout_and_is_fixed():
    """v1's validation split: six layers per network of TenSet's training side, none a computation of either
    split nor repeated, each fitting v1's layout (a v1 policy acts on them), the same draw every time; a
    depthwise convolution among them; not part of the protocol's dict, so v1's rows stay comparable."""
    v1 = get_protocol("v1")
    tasks = v1.validation_tasks()
    keys = [computation_key(t) for t in tasks]
    assert len(tasks) == 32 and len(set(keys)) == 32  # GPT-2 has two such layers, the others six each
    assert not set(keys) & {computation_key(t) for t in v1.train_tasks() + v1.held_out_tasks()}
    layout = v1.layout()
    assert all(layout.fits(t) for t in tasks)
    assert any(dict(t.params).get("groups", 1) > 1 for t in tasks)
    assert [t.name for t in v1.validation_tasks()] == [t.name for t in tasks]
    assert {t.name.split("/")[1].split(".")[0] for t in tasks} == {"vgg16", "inceptionv3", "densenet121",
                                                                    "efficientnet-b0", "vit-b16", "gpt2"}
    assert "validation" not in v1.to_dict() and TRACKS.validation_tasks() == ()
    wide = Protocol("wide", train=(gemm(32, 32, 32, d_m=2, d_k=2, d_n=2, name="w-train"),),
                    held_out=(gemm(16, 32, 16, d_m=2, d_k=2, d_n=2, name="w-held"),), validation="resnet18")
    assert wide.validation_tasks() == ()  # no convolution fits a GEMM-only layout
    small = "v1-validation/efficientnet-b0.conv2d-1x1x1x32-8-k1-s1-p0+bias"  # 120 configs: an exact reference
    row = run_protocol(agent_tuner("random"), v1.at_budget(16), "random", seeds=[0], split="validation", tasks=[small])
    assert row["split"] == "validation" and [t["task"] for t in row["tasks"]] == [small]
    with pytest.raises(ValueError, match="not validation tasks of protocol v1: resnet18/conv8"):
        run_protocol(agent_tuner("random"), v1, "random", split="validation", tasks=["resnet18/conv8"])


def test_the_validation_split_is_frozen_where_the_shipped_checkpoints_were_chosen():
    """v1's validation split is a frozen file, not a draw from the zoo's suites: the tasks every shipped v1
    checkpoint was chosen on, to the key, although the zoo's EfficientNet-B0 suite has since fused SiLU into the
    layers the split drew (a draw from the suites as they are would differ)."""
    keys = [t.key for t in get_protocol("v1").validation_tasks()]
    root = Path(__file__).resolve().parent.parent / "leaderboard"
    chosen = [json.loads(p.read_text())["chosen_on"]["tasks"] for p in sorted(root.glob("v1-*.meta.json"))]
    assert len(chosen) >= 5 and all(c == keys for c in chosen)
    drawn = replace(get_protocol("v1"), validation="zoo-vgg16,zoo-inceptionv3,zoo-densenet121,zoo-efficientnet-b0,"
                                                  "zoo-vit-b16,zoo-gpt2", validation_per_suite=6).validation_tasks()
    assert len(drawn) == 32 and [t.key for t in drawn] != keys
    zoo = {s.task.key for s in get_suite("zoo-efficientnet-b0")}
    frozen_effnet = [t for t in get_protocol("v1").validation_tasks()
                     if t.name.split("/")[1].startswith("efficientnet-b0.")]
    assert len(frozen_effnet) == 6 and {t.key for t in frozen_effnet} - zoo  # e.g. 1x1x1x32-8 is +bias+silu now
    assert {computation_key(t) for t in frozen_effnet} <= {computation_key(k) for k in zoo}


def test_benchmark_cli_scores_the_validation_split_and_keeps_it_off_the_leaderboard(tmp_path, capsys):
    out = tmp_path / "row.json"
    small = "v1-validation/efficientnet-b0.conv2d-1x1x1x32-8-k1-s1-p0+bias"
    assert main(["benchmark", "--protocol", "v1", "--budget-track", "16", "--agent", "random", "--seeds", "0",
                 "--split", "validation", "--tasks", small, "--out", str(out), "--quiet"]) == 0
    row = json.loads(out.read_text())
    assert row["split"] == "validation" and "--split validation" in row["command"]
    assert "over 1 validation tasks" in capsys.readouterr().out
    board = tmp_path / "board.jsonl"
    assert main(["benchmark", "--protocol", "v1", "--agent", "random", "--split", "validation",
                 "--leaderboard", str(board)]) == 2
    assert "--leaderboard takes held-out rows only" in capsys.readouterr().err and not board.exists()


def test_benchmark_cli_runs_a_budget_track(tmp_path, capsys):
    out = tmp_path / "row.json"
    assert main(["benchmark", "--protocol", "v1", "--budget-track", "16", "--agent", "gbfs", "--seeds", "0", "1",
                 "--tasks", "resnet18/conv8", "--out", str(out), "--quiet"]) == 0
    row = json.loads(out.read_text())
    assert row["budget_track"] == 16 and row["command"].startswith(
        "schedule-gym benchmark --protocol v1 --budget-track 16 --agent gbfs")
    assert "IQM" in capsys.readouterr().out
    assert main(["benchmark", "--protocol", "v1", "--budget-track", "100", "--agent", "gbfs"]) == 2
    assert "protocol v1 has no budget track 100; its tracks: 16, 64, 256" in capsys.readouterr().err


def test_the_leaderboard_table_prints_one_table_per_track_with_intervals(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from leaderboard_table import tables

    board = tmp_path / "v.jsonl"
    rows = [run_protocol(agent_tuner("random"), TRACKS, "random", budget_track=b, command="c") for b in (2, 8)]
    partial = run_protocol(agent_tuner("random"), TRACKS, "random", tasks=["k-a"], budget_track=2)
    train = run_protocol(agent_tuner("random"), TRACKS, "random", split="train", budget_track=2)
    board.write_text("".join(json.dumps(r) + "\n" for r in (*rows, partial, train)))
    text = tables(board)
    assert text.index("**2 measurements per task**") < text.index("**8 measurements per task**")
    body = [line for line in text.splitlines() if line.startswith("| random")]
    assert len(body) == 2  # the partial and the training-split rows are left out
    low, high = rows[0]["iqm_regret_interval"]
    assert f"| random | {rows[0]['iqm_regret']:.3f} [{low:.3f}, {high:.3f}] |" in body[0]


def test_the_shipped_v1_rows_hold_what_their_commands_and_statistics_say():
    board = Path(__file__).resolve().parents[1] / "leaderboard" / "v1.jsonl"
    rows = [json.loads(line) for line in board.read_text().splitlines() if line.strip()]
    assert rows
    held_out = [t.name for t in get_protocol("v1").held_out_tasks()]
    for row in rows:
        track = row["budget_track"]
        assert row["command"].startswith(f"schedule-gym benchmark --protocol v1 --budget-track {track} ")
        assert row["protocol"] == get_protocol("v1").at_budget(track).to_dict()
        assert [t["task"] for t in row["tasks"]] == held_out and not row["partial"]
        matrix = [[b / t["reference_latency_s"] - 1.0 for b in t["best_latency_s"]] for t in row["tasks"]]
        assert row["iqm_regret"] == pytest.approx(aggregate_iqm(matrix), rel=1e-12)
        assert row["median_regret"] == pytest.approx(aggregate_median(matrix), rel=1e-12)
        for name in ("median_regret", "iqm_regret"):
            low, high = row[f"{name}_interval"]
            assert low <= row[name] <= high


def test_walk_reach_distances_are_the_move_graphs_and_bound_every_policy_row():
    # schedule_gym.benchmark.oracle (examples/benchmarks/walk_reach.py): a vectorised breadth-first search; here against one over
    # TileSpace.neighbours, and its bound against the shipped rows of the policies played from s0
    from collections import deque

    from schedule_gym.benchmark.oracle import move_distances
    from schedule_gym.spaces import TileSpace
    from schedule_gym.tasks import gemm, get_suite

    space = TileSpace(gemm(12, 8, 18))
    dist = move_distances(space, 64)
    expected, queue = {space.initial_config(): 0}, deque([space.initial_config()])
    while queue:
        config = queue.popleft()
        for _, nxt in space.neighbours(config):
            if nxt not in expected:
                expected[nxt] = expected[config] + 1
                queue.append(nxt)
    assert len(expected) == space.size and dist.max() > 3
    assert all(dist[space.index(c)] == d for c, d in expected.items())
    assert (move_distances(space, 2) <= 2).all() and (move_distances(space, 2) == -1).any()

    results = Path(__file__).resolve().parents[1] / "examples" / "results" / "walk-reach"
    bound = json.loads(next(results.glob("v1-held_out-*.json")).read_text())
    board = Path(__file__).resolve().parents[1] / "leaderboard" / "v1.jsonl"
    for row in map(json.loads, board.read_text().splitlines()):
        if "policy" in row["params"] and "beam_width" not in row["params"]:
            for task, reach in zip(row["tasks"], bound["tasks"]):
                assert task["task"] == reach["task"]
                fastest_s = reach["reference_latency_s"] * (1.0 + reach["bound"][str(row["budget_track"])])
                assert all(b >= fastest_s * (1 - 1e-9) for b in task["best_latency_s"]), (row["agent"], task["task"])


def test_steepest_descent_stops_in_a_local_minimum_and_finds_the_bottom_of_a_bowl():
    # on a bowl (latency = 1 + moves to one target config) the descent walks the shortest path to the target; on the
    # mock's table it stops where no neighbour is faster, having gone strictly downhill
    from schedule_gym.backends import MockBackend
    from schedule_gym.benchmark.oracle import all_latencies, move_distances, steepest_descent
    from schedule_gym.spaces import TileSpace
    from schedule_gym.tasks import gemm, get_suite

    space = TileSpace(gemm(12, 8, 18))
    target = space.size // 2 + 7
    bowl = 1.0 + move_distances(space, None, np.array([target])).astype(float)
    s0 = space.index(space.initial_config())
    assert bowl[s0] > 3
    assert steepest_descent(space, lambda idx: bowl[idx]) == (target, int(bowl[s0] - 1))
    assert steepest_descent(space, lambda idx: bowl[idx], start=target) == (target, 0)
    failed = bowl.copy()
    failed[s0] = np.nan  # a start without a latency is left for any neighbour with one
    assert steepest_descent(space, lambda idx: failed[idx]) == (target, int(bowl[s0] - 1))

    latency = all_latencies(MockBackend().latency_table(space.task, space), space.size)
    stop, moves = steepest_descent(space, lambda idx: latency[idx])
    assert moves > 0 and latency[stop] < latency[s0]
    assert all(latency[space.index(c)] >= latency[stop] for _, c in space.neighbours(space.config(stop)))
