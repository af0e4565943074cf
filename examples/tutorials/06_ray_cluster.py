"""Run on a Ray cluster

`schedule-gym compare --ray ADDRESS` runs every (agent, seed, budget) of a comparison as a Ray task, and
`schedule-gym benchmark --ray ADDRESS` every held-out task x seed; the driver gathers the results and
writes the same files as one machine would. `ADDRESS` is `local` (a Ray instance started for the run),
`auto` (the cluster this machine belongs to), `HOST:PORT` or `ray://HOST:PORT`. Needs the `ray` extra
(`pip install -c constraints.txt -e '.[ray]'`); the page [Ray clusters and RLlib](../cluster.md) says
how to start a cluster.

    python examples/tutorials/06_ray_cluster.py
"""

# %% [markdown]
# ## A comparison fanned out over a local Ray instance
# `--ray local` starts a Ray instance on this machine for the run: the same code path as a cluster, so a
# command that works here works on one. Results equal the single-machine run for the same seeds.

import json
import tempfile
from pathlib import Path

from schedule_gym.cli import main

try:
    import ray  # noqa: F401
except ImportError:
    raise SystemExit("this tutorial needs Ray: pip install -c constraints.txt -e '.[ray]'")

out = Path(tempfile.mkdtemp(prefix="schedule-gym-tutorial-"))
args = ["compare", "--task", "gemm-64x64x64", "--agents", "random", "gbfs", "--seeds", "2", "--budgets", "20",
        "--quiet"]
assert main([*args, "--out", str(out / "here")]) == 0
assert main([*args, "--out", str(out / "ray"), "--ray", "local"]) == 0

# %% [markdown]
# ## The same results
# Each run's file holds its best latency; the fanned-out comparison wrote the same ones.

here = json.loads((out / "here" / "results.json").read_text())["runs"]
fanned = json.loads((out / "ray" / "results.json").read_text())["runs"]
key = lambda r: (r["agent"], r["seed"])  # noqa: E731
for a, b in zip(sorted(here, key=key), sorted(fanned, key=key)):
    print(f"{a['agent']} seed {a['seed']}: {a['best_gflops']:.1f} GFLOP/s here, {b['best_gflops']:.1f} over Ray")
    assert a["best_latency_s"] == b["best_latency_s"]

# %% [markdown]
# ## On a cluster
# Start the cluster (`ray up cluster.yaml`, or `ray start --head` and `ray start --address=HEAD:6379`),
# install the same schedule-gym on every node, then run the command with the cluster's address:
# `schedule-gym benchmark --protocol v0 --agent gbfs --seeds 0 1 --ray auto --leaderboard leaderboard/v0.jsonl`.
# Real-hardware measurement stays on TVM's RPC device farms (`--backend rpc`): `--ray` with
# `--backend tvm` is refused.
