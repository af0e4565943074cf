"""Run the benchmark and submit a leaderboard row

Does a tuner carry over to workloads it never saw? `schedule-gym benchmark` runs a fixed protocol
(training and held-out tasks, budget, seeds, metric) and writes one leaderboard row: the median over the
held-out tasks of the regret `best found / reference - 1`. This tutorial uses the `smoke` protocol (small
GEMMs whose spaces the mock scores exactly), which runs in seconds; the leaderboard's protocol is `v1`
(v0's split at budget tracks of 16, 64 and 256 measurements, seeds 0-4, the median and the interquartile
mean with 95% stratified-bootstrap intervals).

    python examples/tutorials/05_benchmark_and_leaderboard.py
"""

# %% [markdown]
# ## The protocol
# A protocol fixes the training split (what a learned tuner may train on), the held-out split (what it
# is scored on), the budget per task, the seeds and the mock profile, so that rows compare across
# machines and days.

import json
import sys
import tempfile
from pathlib import Path

from schedule_gym.benchmark import get_protocol
from schedule_gym.cli import main

protocol = get_protocol("smoke")
print(json.dumps(protocol.to_dict(), indent=1))

# %% [markdown]
# ## A row for an agent
# `--agent` names a search agent (`--policy model.zip` evaluates a trained SB3 policy instead);
# `--leaderboard FILE` appends the row to a JSON-lines leaderboard, `--out` writes it alone. The row
# records the command that made it, the CPU, the mock profile, the date and every held-out task's result.

out = Path(tempfile.mkdtemp(prefix="schedule-gym-tutorial-"))
board = out / "smoke.jsonl"
for agent in ("random", "gbfs"):
    code = main(["benchmark", "--protocol", "smoke", "--agent", agent, "--seeds", "0", "1",
                 "--leaderboard", str(board), "--quiet"])
    assert code == 0
rows = [json.loads(line) for line in board.read_text().splitlines()]
for row in rows:
    print(f"{row['agent']}: median regret {row['median_regret']:.3f} over {len(row['tasks'])} held-out tasks")
    print(f"   {row['command']}  ({row['cpu']}, {row['profile']}, {row['date'][:10]})")

# %% [markdown]
# ## The leaderboard as a table
# `examples/leaderboard_table.py` prints a leaderboard file as a Markdown table, best row first; the
# [leaderboard page](../results/leaderboard.md) of this site is drawn from `leaderboard/v1.jsonl` (one table
# per budget track, with intervals) and `leaderboard/v0.jsonl`.

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from leaderboard_table import table  # noqa: E402

print(table(board))

# %% [markdown]
# ## Submitting a row
# 1. Run the `v1` protocol with your agent or policy on a budget track, appending to the shipped leaderboard:
#    `schedule-gym benchmark --protocol v1 --budget-track 64 --agent NAME --leaderboard leaderboard/v1.jsonl`
#    (or `--policy your-model.zip --name NAME`).
# 2. Ship what the row needs to be re-run: a new agent's code, or the policy file next to the leaderboard
#    (`leaderboard/v1-NAME.zip`; policies load without unpickling, see `schedule_gym.benchmark.load_policy`)
#    with its sidecar (`leaderboard/v1-NAME.meta.json`: the protocol and the task keys it was trained on,
#    `schedule_gym.benchmark.pretrained.write_sidecar`), which the benchmark checks against the held-out tasks.
# 3. Open a pull request with the new line of `leaderboard/v1.jsonl`: its `command` field is what a
#    reviewer runs to check it. Rows are mock figures under the protocol's fixed profile, so they do not
#    depend on the machine that made them.
