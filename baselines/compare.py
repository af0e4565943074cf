"""The comparison harness: agents x seeds x budgets on one task and backend -> a results table and plots.

Every run is one :meth:`Agent.run <schedule_gym.agents.base.Agent.run>` on a fresh environment, saved (its
``TuneResult.to_dict()``) as ``runs/<name>/<agent>__seed<seed>__<budget>.json`` the moment it ends, so an interrupted comparison
resumes where it stopped (finished runs are read back, not run again; with a measuring backend each run
also keeps a record file beside it, so even a run cut short re-measures nothing). Out of the runs:

* ``results.csv`` / ``results.json``: one row per run — best latency and GFLOP/s, measurements, wall
  time, regret against the known optimum (a shipped table's, or the mock model's exact one) or the best
  any run found, and the search time each run needed to reach 90/95/99% of that reference (Felix's
  metric: the first time ``reference / best_so_far`` reaches the level), and the measurements it needed;
* ``best_vs_fraction.png`` and ``best_vs_time.png``: median best cost over seeds against the fraction of
  the space explored and against search time (Zhang et al., Fig. 7), from each agent's largest budget;
* ``box_<budget>.png``: best cost over seeds at each budget (Zhang et al., Fig. 8).

    schedule-gym compare --task gemm-1024 --backend mock --agents random gbfs na2c --seeds 5 --budgets 0.1%
    schedule-gym compare --table gemm-128-323-znver5-1t --budgets 0.1% 1% --seeds 10

With ``--ray ADDRESS`` (``local``, ``auto`` or ``ray://host:port``) the runs are Ray tasks on a cluster
(:mod:`schedule_gym.baselines.ray_fanout`; how to run one: ``docs/cluster.md``); the files are the same.
"""

from __future__ import annotations

import csv
import json
import math
import re
import warnings
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from schedule_gym.agents import make_agent
from schedule_gym.agents.base import Budget
from schedule_gym.baselines.compare_spec import CompareSpec, run_one
from schedule_gym.baselines.ray_fanout import fan_out
from schedule_gym.extras import require

__all__ = ["ANCHOR", "LEVELS", "CompareSpec", "RunRow", "best_at", "run_comparison", "run_one", "summarize", "write_plots"]

#: Shares of the reference's speed whose search time the table reports (Felix reports 95% and 99%).
LEVELS = (0.90, 0.95, 0.99)
#: The external run every agent is also compared with at equal wall time.
ANCHOR = "metaschedule"


@dataclass
class RunRow:
    agent: str
    seed: int
    budget: str
    num_measurements: int
    explored_fraction: float
    best_latency_s: float | None
    best_gflops: float | None
    wall_s: float
    stop_reason: str
    curve: dict[str, list[float]]  # n, wall_s, best_latency_s per measurement

    @classmethod
    def from_result(cls, data: dict[str, Any], budget: str) -> RunRow:
        """The row of a run from its :meth:`TuneResult.to_dict`."""
        history = data["history"]
        return cls(
            agent=data["agent"], seed=data["seed"], budget=budget, num_measurements=data["num_measurements"],
            explored_fraction=data["num_measurements"] / data["space_size"], best_latency_s=data["best_latency_s"],
            best_gflops=data["best_gflops"], wall_s=data["wall_s"], stop_reason=data["stop_reason"],
            curve={key: [h[key] if h[key] is not None else math.nan for h in history] for key in ("n", "wall_s", "best_latency_s")},
        )


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text).strip("_")


def _save(path: Path, saved: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(saved))
    tmp.replace(path)  # atomic: a run is saved whole or not at all


def run_comparison(
    spec: CompareSpec, progress: Callable[[str], None] | None = None, ray_address: str | None = None
) -> list[RunRow]:
    """Every agent x seed x budget, reading back runs already saved; returns one row per run.

    With ``ray_address`` (``"local"``, ``"auto"`` or ``"ray://host:port"``) the agent runs not saved yet
    are Ray tasks (:mod:`schedule_gym.baselines.ray_fanout`), saved here as they finish; external runs
    (``spec.external``) still run on this machine, while the tasks run. The rows, files and their
    contents are those of a run on one machine; only the progress lines come in the order runs finish.
    """
    spec.out_dir.mkdir(parents=True, exist_ok=True)
    for budget in spec.budgets:
        Budget.parse(budget)  # a bad budget fails before anything runs
    for agent in spec.agents:
        if agent not in spec.external:
            make_agent(agent, **spec.agent_params.get(agent, {}))  # likewise an unknown agent or bad parameters
    for name in spec.agent_params:
        if name not in spec.agents:
            raise ValueError(f"parameters given for agent {name!r}, which is not compared (agents: {', '.join(spec.agents)})")
    plan = [(agent, seed, budget) for budget in spec.budgets for agent in spec.agents
            for seed in spec.agent_seeds.get(agent, spec.seeds)]
    stems = {key: f"{key[0]}__seed{key[1]}__{_slug(key[2])}" for key in plan}
    rows: dict[tuple[str, int, str], RunRow] = {}

    def finish(key: tuple[str, int, str], saved: dict[str, Any], state: str) -> None:
        agent, seed, budget = key
        if state == "ran":
            _save(spec.out_dir / f"{stems[key]}.json", saved)
        row = rows[key] = RunRow.from_result(saved, budget)
        if progress is not None:
            best = "-" if row.best_gflops is None else f"{row.best_gflops:.1f} GFLOP/s"
            progress(f"{agent:<8} seed {seed:<3} budget {budget:<6} {state:<9} {row.num_measurements:>6} "
                     f"measurements, best {best}, {row.wall_s:.1f} s")

    def run_here(key: tuple[str, int, str]) -> dict[str, Any]:
        agent, seed, budget = key
        if agent in spec.external:
            return spec.external[agent](seed, budget, spec.out_dir / stems[key])
        return run_one(spec, agent, seed, budget, str(spec.out_dir / f"{stems[key]}.jsonl") if spec.records else None)

    if ray_address is None:
        for key in plan:
            path = spec.out_dir / f"{stems[key]}.json"
            if path.exists():
                finish(key, json.loads(path.read_text()), "read back")
            else:
                finish(key, run_here(key), "ran")
    else:
        remote, local = [], []
        for key in plan:
            path = spec.out_dir / f"{stems[key]}.json"
            if path.exists():
                finish(key, json.loads(path.read_text()), "read back")
            else:
                (local if key[0] in spec.external else remote).append(key)
        records = {}
        if spec.records:  # a run cut short earlier: its task starts from what it measured
            for key in remote:
                if (spec.out_dir / f"{stems[key]}.jsonl").exists():
                    records[key] = (spec.out_dir / f"{stems[key]}.jsonl").read_bytes()
        with closing(fan_out(spec, remote, ray_address, records=records,  # closing: Ctrl-C cancels the tasks
                             while_running=lambda: [finish(key, run_here(key), "ran") for key in local])) as finished:
            for key, saved, written in finished:
                if written is not None:  # the records first: a saved result means a complete run
                    _write_bytes(spec.out_dir / f"{stems[key]}.jsonl", written)
                finish(key, saved, "ran")
    return [rows[key] for key in plan]


def _write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def time_to_level(row: RunRow, reference_s: float, level: float, axis: str = "wall_s") -> float | None:
    """Search seconds (``axis="n"``: measurements) until ``reference / best_so_far >= level`` (None: never)."""
    for t, best in zip(row.curve[axis], row.curve["best_latency_s"]):
        if best is not None and not math.isnan(best) and reference_s / best >= level - 1e-12:
            return t
    return None


def best_at(row: RunRow, seconds: float) -> float | None:
    """The best latency ``row``'s run had found ``seconds`` into its search (None: nothing by then)."""
    best = None
    for t, latency in zip(row.curve["wall_s"], row.curve["best_latency_s"]):
        if t > seconds:
            break
        if not math.isnan(latency):
            best = latency
    return best


def summarize(spec: CompareSpec, rows: list[RunRow]) -> tuple[list[dict[str, Any]], float | None, str]:
    """Table rows (regret, time to levels) and the reference they are measured against.

    With :data:`ANCHOR` (MetaSchedule) among the runs, every other run also gets
    ``anchor_same_time_latency_s``: the best the anchor had found (by its own measurements) after as
    many seconds of search as that run took, from the anchor's run with the same budget and seed (or
    its first seed) — the equal-wall-time comparison; its own row is the equal-trials one.
    """
    found = [r.best_latency_s for r in rows if r.best_latency_s is not None]
    if spec.optimum_s is not None:
        reference, kind = spec.optimum_s, "known optimum"
    elif found:
        reference, kind = min(found), "best found by any run"
    else:
        reference, kind = None, "none"
    anchors = {(r.budget, r.seed): r for r in rows if r.agent == ANCHOR}
    table = []
    for r in rows:
        entry: dict[str, Any] = {k: getattr(r, k) for k in ("agent", "seed", "budget", "num_measurements", "explored_fraction", "best_latency_s", "best_gflops", "wall_s", "stop_reason")}
        entry["regret"] = None if reference is None or r.best_latency_s is None else r.best_latency_s / reference - 1
        for level in LEVELS:  # in seconds, and in measurements (free of what each measurement costs)
            pct = round(level * 100)
            entry[f"time_to_{pct}pct_s"] = None if reference is None else time_to_level(r, reference, level)
            entry[f"measurements_to_{pct}pct"] = None if reference is None else time_to_level(r, reference, level, axis="n")
        if anchors:
            anchor = anchors.get((r.budget, r.seed)) or next((a for a in anchors.values() if a.budget == r.budget), None)
            entry["anchor_same_time_latency_s"] = (
                None if anchor is None or r.agent == ANCHOR else best_at(anchor, r.wall_s))
        table.append(entry)
    return table, reference, kind


def write_tables(
    spec: CompareSpec, table: list[dict[str, Any]], reference: float | None, kind: str, extra: dict[str, Any] | None = None
) -> None:
    """``results.csv`` (the runs) and ``results.json`` (the runs, the reference and ``extra``, e.g. library timings)."""
    with open(spec.out_dir / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    (spec.out_dir / "results.json").write_text(json.dumps(
        {"name": spec.name, "reference_latency_s": reference, "reference": kind, **(extra or {}), "runs": table},
        indent=1) + "\n")


def median_table(table: list[dict[str, Any]], flops: int | None = None) -> str:
    """Median and spread over seeds per agent and budget, as text (GFLOP/s too when ``flops`` is given)."""
    same_time = any("anchor_same_time_latency_s" in e for e in table)
    lines = [f"{'agent':<12} {'budget':<7} {'seeds':>5} {'median best ms':>14} {'min':>8} {'max':>8} "
             + (f"{'GFLOP/s':>8} " if flops else "") + f"{'median regret':>13} {'median s':>9} "
             + " ".join(f"{'t' + str(round(level * 100)) + '% s':>8}" for level in LEVELS) + f" {'n95%':>6}"
             + (f" {ANCHOR + ' same time':>22}" if same_time else "")]
    for budget in dict.fromkeys(e["budget"] for e in table):
        for agent in dict.fromkeys(e["agent"] for e in table):
            group = [e for e in table if e["agent"] == agent and e["budget"] == budget]
            if not group:
                continue
            best = np.array([np.nan if e["best_latency_s"] is None else e["best_latency_s"] for e in group])
            regret = [e["regret"] for e in group if e["regret"] is not None]
            times = []
            for key, width, digits in [(f"time_to_{round(level * 100)}pct_s", 8, 2) for level in LEVELS] + [("measurements_to_95pct", 6, 0)]:
                got = [e[key] for e in group]
                reached = [t for t in got if t is not None]  # a median over the seeds that got there, if most did
                times.append(f"{np.median(reached):{width}.{digits}f}" if len(reached) * 2 > len(got) else f"{'-':>{width}}")
            line = (f"{agent:<12} {budget:<7} {len(group):>5} {np.nanmedian(best) * 1e3:14.4g} {np.nanmin(best) * 1e3:8.4g} "
                    f"{np.nanmax(best) * 1e3:8.4g} " + (f"{flops / np.nanmedian(best) * 1e-9:8.1f} " if flops else "")
                    + f"{(np.median(regret) if regret else float('nan')):13.2%} "
                    f"{np.median([e['wall_s'] for e in group]):9.1f} " + " ".join(times))
            if same_time:
                at = [e["anchor_same_time_latency_s"] for e in group if e.get("anchor_same_time_latency_s") is not None]
                text = "-" if not at else (f"{flops / np.median(at) * 1e-9:.1f} GFLOP/s" if flops
                                           else f"{np.median(at) * 1e3:.4g} ms")
                line += f" {text:>22}"
            lines.append(line)
    return "\n".join(lines)


def write_plots(spec: CompareSpec, rows: list[RunRow]) -> list[Path]:
    """Fig. 7 (best vs fraction explored, vs time) and Fig. 8 (box plots over seeds) as PNG files."""
    require("the comparison's plots", "baselines", modules=["matplotlib"])
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    largest = max(spec.budgets, key=lambda b: max((r.num_measurements for r in rows if r.budget == b), default=0))
    for x_key, x_label, filename in (("n", "fraction of the space explored", "best_vs_fraction.png"),
                                     ("wall_s", "search time (s)", "best_vs_time.png")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for agent in spec.agents:
            runs = [r for r in rows if r.agent == agent and r.budget == largest and r.curve["n"]]
            if not runs:
                continue
            if x_key == "n":
                size = max(r.curve["n"][-1] / r.explored_fraction for r in runs if r.explored_fraction)
                grid = np.arange(1, max(r.curve["n"][-1] for r in runs) + 1)
                curves = [np.interp(grid, r.curve["n"], r.curve["best_latency_s"]) for r in runs]
                x = grid / size
            else:
                grid = np.linspace(0, max(r.curve["wall_s"][-1] for r in runs), 200)
                curves = [np.interp(grid, r.curve["wall_s"], r.curve["best_latency_s"], left=np.nan) for r in runs]
                x = grid
            with warnings.catch_warnings():  # before a run's first measurement its curve is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                median = np.nanmedian(np.array(curves), axis=0)
            ax.plot(x, median * 1e3, label=agent)
        ax.set_xlabel(x_label)
        ax.set_ylabel("best latency so far (ms), median over seeds")
        ax.set_yscale("log")
        ax.set_title(f"{spec.name}, budget {largest}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(spec.out_dir / filename, dpi=120)
        plt.close(fig)
        out.append(spec.out_dir / filename)
    for budget in spec.budgets:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        data = [[r.best_latency_s * 1e3 for r in rows if r.agent == a and r.budget == budget and r.best_latency_s] for a in spec.agents]
        ax.boxplot(data, showmeans=True)
        ax.set_xticks(range(1, len(spec.agents) + 1), list(spec.agents))
        ax.set_ylabel("best latency (ms) over seeds")
        ax.set_title(f"{spec.name}, budget {budget}")
        fig.tight_layout()
        path = spec.out_dir / f"box_{_slug(budget)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        out.append(path)
    return out
