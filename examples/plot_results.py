"""Every figure of the documentation's results pages, drawn from the shipped results files.

    .venv/bin/python examples/plot_results.py --out build/plots     # or: make plots

Each figure states under its plot the command that made its data, the date and the CPU, read from the
results files (and, where a file lacks them, from the ``metadata.json`` beside it). The documentation
build (docs/gen/results.py) calls :func:`figures` and puts the same PNGs into the site.

Figures: search curves on the H100 (best GFLOP/s against measurements, cuBLAS as the reference line), the
agents on real 1024^3 GEMM kernels (the libraries as reference lines), regret on the exhaustive table, the
packed GEMM near the FMA peak (the peak as the ceiling), whole-model speed-ups over PyTorch, the
leaderboard with intervals (v0; v1 per budget track, IQM and median with stratified-bootstrap intervals),
the generalisation gap against the number of training tasks, PPO's learning curves (return and held-out
regret against training steps), the mock's calibration scatter plots, steps
per second.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))  # leaderboard_table, beside this file
RESULTS = ROOT / "examples" / "results"
DATA = ROOT / "schedule_gym" / "data"
LEADERBOARD = ROOT / "leaderboard" / "v0.jsonl"
LEADERBOARD_V1 = ROOT / "leaderboard" / "v1.jsonl"
GEMM_1024_FLOPS = 2 * 1024**3


def metadata(folder: Path, name: str) -> dict:
    """The ``metadata.json`` entry of a results file (command, date, CPU), or {}."""
    path = folder / "metadata.json"
    if not path.exists():
        return {}
    entries = json.loads(path.read_text())
    return entries.get(name) or next((v for k, v in entries.items() if "*" in k and Path(name).match(k)), {})


def source_line(command: str, date: str, cpu: str) -> str:
    return f"Data: {command}  |  {date}  |  {cpu}"


def finish(fig: plt.Figure, *sources: str) -> plt.Figure:
    """Write the sources (command, date, CPU) under the plot, wrapped to the figure's width; the figure grows by
    their height, so the plot keeps its size however many runs a figure draws from."""
    width_chars = int(fig.get_figwidth() * 72 / 4.7)  # 7-point monospace: 4.2 points a character, and margins
    lines = [part for source in sources for part in textwrap.wrap(source, width_chars, subsequent_indent="    ")]
    footer_in = (len(lines) * 7 * 1.25 + 10) / 72  # line height 1.25 x 7 points, in inches
    fig.set_figheight(fig.get_figheight() + footer_in)
    fig.text(0.01, 0.01, "\n".join(lines), fontsize=7, family="monospace", va="bottom", ha="left")
    fig.tight_layout(rect=(0, footer_in / fig.get_figheight(), 1, 1))
    return fig


def search_curves_h100() -> plt.Figure:
    """Best GFLOP/s against measurements of each agent's run on the H100, cuBLAS FP32 as the reference."""
    folder = RESULTS / "gemm-1024-cuda-h100"
    fig, ax = plt.subplots(figsize=(8, 4.5))
    meta = {}
    for path in sorted(folder.glob("*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            records = [json.loads(line) for line in f if line.strip()]
        gflops = [GEMM_1024_FLOPS / r["latency_s"] * 1e-9 if r.get("latency_s") and not r.get("error") else 0.0
                  for r in records]
        ax.plot(np.arange(1, len(gflops) + 1), np.maximum.accumulate(gflops), label=path.name.split(".")[0])
        meta = metadata(folder, path.name)
    cublas = (folder / "cublas.txt").read_text()
    fp32 = float(re.search(r"cuBLAS FP32: best (\d+)", cublas).group(1))
    ax.axhline(fp32, color="k", ls="--", lw=1)
    ax.text(1, fp32, " cuBLAS FP32 (best)", va="bottom", fontsize=8)
    ax.set(xlabel="measurements", ylabel="best GFLOP/s so far", ylim=(0, fp32 * 1.1),
           title="GEMM 1024^3 on an H100, template gemm-cuda-v1: search curves")
    ax.legend(loc="center right")
    return finish(fig, source_line(meta["command"], meta["date"], meta["cpu"]),
                  source_line("python examples/benchmarks/cublas_gemm.py", metadata(folder, "cublas.txt")["date"],
                              metadata(folder, "cublas.txt")["cpu"]))


def agents_gemm_1024() -> plt.Figure:
    """Best GFLOP/s of each agent's seeds on real 1024^3 GEMM kernels, the libraries as reference lines."""
    folder = RESULTS / "gemm-1024-tvm"
    data, meta = json.loads((folder / "results.json").read_text()), metadata(folder, "results.json")
    agents = list(dict.fromkeys(r["agent"] for r in data["runs"]))
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, agent in enumerate(agents):
        values = [r["best_gflops"] for r in data["runs"] if r["agent"] == agent]
        ax.bar(i, np.median(values), color="C0", alpha=0.4)
        ax.plot([i] * len(values), values, "o", color="C0")
    for j, ref in enumerate(data["references"]):
        ax.axhline(ref["best_gflops"], color=f"C{j + 1}", ls="--", lw=1, label=f"{ref['label']} (best)")
    ax.set_xticks(range(len(agents)), agents)
    ax.set(ylabel="best GFLOP/s (bar: median of seeds)",
           title=f"GEMM 1024^3, {meta.get('template', '')}, {meta['threads']} threads: 300 measurements per run")
    ax.legend(fontsize=7, loc="lower right")
    return finish(fig, source_line(meta["command"], meta["date"], meta["cpu"]))


def table_regret() -> plt.Figure:
    """Regret on the exhaustive 128^3 table at each budget, over 10 seeds."""
    folder = RESULTS / "table-gemm-128"
    data, meta = json.loads((folder / "results.json").read_text()), metadata(folder, "results.json")
    budgets = list(dict.fromkeys(r["budget"] for r in data["runs"]))
    agents = list(dict.fromkeys(r["agent"] for r in data["runs"]))
    fig, axes = plt.subplots(1, len(budgets), figsize=(9, 4), sharey=True)
    for ax, budget in zip(np.atleast_1d(axes), budgets):
        regrets = [[100 * r["regret"] for r in data["runs"] if r["agent"] == a and r["budget"] == budget] for a in agents]
        ax.boxplot(regrets)
        ax.set_xticks(range(1, len(agents) + 1), agents, rotation=45)
        ax.set(yscale="symlog", title=f"budget {budget} of {data['name']}", ylabel="regret (%), best / optimum - 1")
    return finish(fig, source_line(meta["command"], meta["date"], meta["cpu"]))


def _peak_log(path: Path) -> dict:
    text = path.read_text()
    # "CPU znver4, 2026-11-25 03:52", or with the identity's description after the name:
    # "CPU sapphirerapids (by its flags, ...), 2026-11-28 06:35"
    header = re.match(r"GEMM .*?, CPU (\S+)(?: \(.*?\))?, (\d{4}-\d\d-\d\d \d\d:\d\d)", text)
    peak = float(re.search(r"FMA peak ([\d.]+) GFLOP/s measured", text).group(1))
    rows = {}
    for line in text.splitlines():
        m = re.match(r"(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m:
            rows[m.group(1).strip()] = float(m.group(2))
    template = re.search(r"^(gemm-cpu-v\d+) search best", text, re.M)
    return {"cpu": header.group(1), "time": header.group(2), "peak": peak, "rows": rows,
            "template": template.group(1) if template else "gemm-cpu-v2"}


def peak_gemm() -> plt.Figure:
    """The packed template near the FMA peak: each run's search best, best hand-picked kernel and the libraries."""
    folder = RESULTS / "peak"
    logs = sorted(folder.glob("gemm_peak_*.log"), key=lambda p: _peak_log(p)["time"])
    fig, axes = plt.subplots(1, len(logs), figsize=(4 * len(logs), 4.5), sharey=True)
    sources = []
    for ax, path in zip(np.atleast_1d(axes), logs):
        run, meta = _peak_log(path), metadata(folder, path.name)
        rows = run["rows"]
        own = run["template"] + " "  # a run that also built its finalists with another version (--also-template)
        kinds = (("search best", lambda k: k.startswith(own + "search best"), "C0"),
                 ("hand-picked", lambda k: k.startswith(own + "hand-picked"), "C0"),
                 ("v1", lambda k: "(v1)" in k, "C7"), ("OpenBLAS AVX-512", lambda k: "SkylakeX" in k, "C1"),
                 ("OpenBLAS best", lambda k: "OpenBLAS" in k, "C1"), ("torch (MKL)", lambda k: k.startswith("torch"), "C2"))
        # a CPU without AVX-512 (a Zen 3) has no OpenBLAS AVX-512 row: its bar is left out
        found = [(label, max(v for k, v in rows.items() if match(k)), color) for label, match, color in kinds
                 if any(match(k) for k in rows)]
        bars = {label: value for label, value, _ in found}
        ax.bar(range(len(bars)), list(bars.values()), color=[color for *_, color in found])
        ax.axhline(run["peak"], color="k", ls="--", lw=1)
        ax.text(-0.4, run["peak"], f"FMA peak {run['peak']:.1f}", va="bottom", fontsize=8)
        ax.set_xticks(range(len(bars)), list(bars), rotation=45, ha="right")
        agent = meta["command"].split("--agent ")[-1].split()[0]
        ax.set(title=f"{run['cpu']}, {run['time']}\n{run['template']}, search: {agent}",
               ylabel="GFLOP/s, best round")
        sources.append(source_line(meta["command"], run["time"], run["cpu"]))
    fig.suptitle("GEMM 1024^3, 2 threads: the packed templates against the FMA peak and the libraries")
    return finish(fig, *dict.fromkeys(sources))


def model_speedups() -> plt.Figure:
    """Whole models: PyTorch eager's latency over the tuned model's (above 1: faster than PyTorch), medians, in
    the latest run of each model on each CPU met (examples/models_table.py): the base packed build and the
    fastest build of that run, each CPU its colour."""
    from models_table import TARGET, standings

    rows = standings(RESULTS / "models")
    models = sorted({r.model for r in rows})
    cpus = sorted({r.cpu for r in rows})
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / len(cpus)
    sources = []
    for i, cpu in enumerate(cpus):
        mine = {r.model: r for r in rows if r.cpu == cpu}
        x = [models.index(m) - 0.4 + (i + 0.5) * width for m in mine]
        ax.bar(x, [r.ratio(r.best, "median") for r in mine.values()], width * 0.9, color=f"C{i}", alpha=0.45,
               label=f"{cpu}: the run's fastest build")
        ax.bar(x, [r.ratio(r.base, "median") for r in mine.values()], width * 0.9, color=f"C{i}",
               label=f"{cpu}: the base build (packed; v1 in runs before them)")
        for run in sorted({r.run for r in mine.values()}):
            first = next(r for r in mine.values() if r.run == run)
            sources.append(source_line(f"run{run}: {first.command}", first.date, f"{cpu}, {first.threads} threads"))
    ax.axhline(1, color="k", lw=1)
    ax.axhline(TARGET, color="k", lw=1, ls="--")
    ax.set_ylim(0, 1.4 * max(r.ratio(r.best, "median") for r in rows))  # room for the legend above the bars
    ax.set_xticks(range(len(models)), models, rotation=30, ha="right")
    ax.set(ylabel="PyTorch eager / tuned (median latency)",
           title=f"Whole models against PyTorch eager, the latest run of each on each CPU (dashed: {TARGET}x)")
    ax.legend(fontsize=8)
    return finish(fig, *sources)


def _bootstrap_median(values: np.ndarray, rng: np.random.Generator, n: int = 2000) -> tuple[float, float]:
    samples = np.median(rng.choice(values, size=(n, len(values)), replace=True), axis=1)
    return float(np.percentile(samples, 2.5)), float(np.percentile(samples, 97.5))


def leaderboard() -> plt.Figure:
    """Median regret of every leaderboard row, with a 95% interval: the row's own where it has one, else a
    bootstrap over its held-out tasks (seeded, so the figure is the same at every build)."""
    rows = [json.loads(line) for line in LEADERBOARD.read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if not r.get("partial")), key=lambda r: r["median_regret"], reverse=True)
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(rows) + 1.5))
    for i, row in enumerate(rows):
        low, high = row.get("median_regret_interval") or _bootstrap_median(
            np.array([t["regret"] for t in row["tasks"]]), rng)
        ax.errorbar(row["median_regret"], i, xerr=[[row["median_regret"] - low], [high - row["median_regret"]]],
                    fmt="o", color="C0", capsize=3)
    ax.set_yticks(range(len(rows)), [r["agent"] for r in rows])
    ax.set(xlabel="median regret over held-out tasks (best found / reference - 1), 95% interval",
           title=f"Leaderboard, protocol {rows[0]['protocol']['name']} (lower is better)")
    dates = sorted(r["date"][:10] for r in rows)
    cpus = ", ".join(sorted({r["cpu"] for r in rows}))
    return finish(fig, source_line("schedule-gym benchmark --protocol v0 ... (each row's command: leaderboard/v0.jsonl)",
                                   f"{dates[0]} to {dates[-1]}", f"{cpus}; regrets are mock figures ({rows[0]['profile']})"))


def leaderboard_v1() -> plt.Figure:
    """Every full row of the v1 leaderboard, one panel per budget track: the IQM (circles) and the median
    (squares) of regret with their 95% stratified-bootstrap intervals, as recorded in the rows."""
    from leaderboard_table import read_rows, tracks

    rows = read_rows(LEADERBOARD_V1)
    budgets = tracks(rows)
    agents = sorted({r["agent"] for r in rows},
                    key=lambda a: -min(r["iqm_regret"] for r in rows if r["agent"] == a))
    fig, axes = plt.subplots(1, len(budgets), figsize=(4.2 * len(budgets) + 1, 0.35 * len(agents) + 2), sharey=True,
                             squeeze=False)
    for ax, budget in zip(axes[0], budgets):
        for row in (r for r in rows if r["budget_track"] == budget):
            y = agents.index(row["agent"])
            for name, offset, marker, color in (("iqm_regret", 0.12, "o", "C0"), ("median_regret", -0.12, "s", "C1")):
                value, interval = row[name], row[f"{name}_interval"] or [row[name]] * 2
                ax.errorbar(value, y + offset, xerr=[[value - interval[0]], [interval[1] - value]], fmt=marker,
                            color=color, capsize=2, ms=4, label=name.split("_")[0].upper() if name == "iqm_regret"
                            else "median")
        ax.set(xlabel="regret (best found / reference - 1)", title=f"{budget} measurements per task")
        ax.set_xlim(left=0)
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(agents)), agents)
    handles, labels = axes[0][0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[0][-1].legend(unique.values(), unique.keys(), fontsize=7, loc="lower right")
    fig.suptitle(f"Leaderboard, protocol v1: {len(rows[0]['tasks'])} held-out tasks, seeds "
                 f"{' '.join(map(str, rows[0]['seeds']))}, 95% stratified-bootstrap intervals (lower is better)")
    dates = sorted(r["date"][:10] for r in rows)
    cpus = ", ".join(sorted({r["cpu"] for r in rows}))
    return finish(fig, source_line("schedule-gym benchmark --protocol v1 --budget-track N ... (each row's command: "
                                   "leaderboard/v1.jsonl)", f"{dates[0]} to {dates[-1]}",
                                   f"{cpus}; regrets are mock figures ({rows[0]['profile']})"))


def generalisation_gap_figure(result: dict) -> plt.Figure:
    """Regret on the training subset and on the held-out tasks (IQM with its interval) against the number of
    training tasks, and their gap, from a result of examples/generalisation_gap.py."""
    rows = result["rows"]
    n = [r["n_train_tasks"] for r in rows]
    fig, (ax, gap_ax) = plt.subplots(1, 2, figsize=(10, 4))
    for split, color in (("train", "C0"), ("held_out", "C1")):
        iqm = np.array([r[split]["iqm_regret"] for r in rows])
        low, high = (np.array([(r[split]["iqm_regret_interval"] or [np.nan] * 2)[i] for r in rows]) for i in (0, 1))
        ax.errorbar(n, iqm, yerr=[iqm - low, high - iqm], fmt="o-", color=color, capsize=3,
                    label=f"{'training' if split == 'train' else 'held-out'} tasks (IQM, 95% CI)")
    ax.set(xlabel="training tasks", ylabel="regret (best found / reference - 1)",
           title=f"{result['learner']} on protocol {result['protocol']['name']}, {result['budget_track']} measurements")
    gap_ax.plot(n, [r["gap_iqm"] for r in rows], "o-", color="C2", label="IQM")
    gap_ax.plot(n, [r["gap_median"] for r in rows], "s--", color="C3", label="median")
    gap_ax.axhline(0, color="k", lw=0.5)
    gap_ax.set(xlabel="training tasks", ylabel="held-out regret - training regret", title="generalisation gap")
    for a in (ax, gap_ax):
        a.set_xscale("log")
        a.set_xticks(n, [str(x) for x in n])
        a.minorticks_off()
        a.legend(fontsize=8)
    return finish(fig, source_line(result["command"], result["date"][:10], result["cpu"]))


SPLITS = (("validation", "validation"), ("held_out", "held-out"))


def regret_panels(axes, result: dict, points_key: str, x_key: str, xlabel: str) -> None:
    """The validation and held-out IQM regret (95% interval) of each seed's scored checkpoints against ``x_key``,
    each seed's chosen one ringed, random search's IQM (and interval) as each split's reference line."""
    from schedule_gym.benchmark.protocol import PROTOCOLS

    for i, run in enumerate(result["seeds"]):
        color, points = f"C{i}", run[points_key]
        x = np.array([p[x_key] for p in points])
        for ax, (split, _) in zip(axes, SPLITS):
            iqm = np.array([p[split]["iqm_regret"] for p in points])
            low, high = (np.array([(p[split]["iqm_regret_interval"] or [np.nan] * 2)[k] for p in points])
                         for k in (0, 1))
            ax.plot(x, iqm, "o-", color=color, ms=3, label=f"seed {run['seed']}")
            ax.fill_between(x, low, high, color=color, alpha=0.15)
            chosen = x == run["chosen"]
            ax.plot(x[chosen], iqm[chosen], "o", ms=10, mfc="none", mec=color)
    track, name = result["budget_track"], result["protocol"]["name"]
    profile = result["protocol"].get("profile")
    # a run trained and scored on another profile than its protocol's (``--profile``) says so under each title
    other = f"\non the mock profile {profile}" if name in PROTOCOLS and profile != PROTOCOLS[name].profile else ""
    for ax, (split, label) in zip(axes, SPLITS):
        rnd = result["random"][split]
        ax.axhline(rnd["iqm_regret"], color="k", ls="--", lw=1, label="random search")
        if rnd["iqm_regret_interval"]:  # None with one evaluation seed
            ax.axhspan(*rnd["iqm_regret_interval"], color="k", alpha=0.08)
        ax.set(xlabel=xlabel, ylabel=f"{label} regret, IQM (95% CI)",
               title=f"{name} {label}, {track} measurements (ringed: chosen){other}")
        ax.legend(fontsize=8)


def learning_curve_figure(result: dict) -> plt.Figure:
    """Episode return (per training seed), and the validation and held-out IQM regret of each kept checkpoint
    with its 95% interval, against training steps, from a result of examples/learning_curves.py; each seed's
    checkpoint chosen on the validation split ringed; random search's IQM regret at the same budget track
    (with its interval) as the reference line of each split."""
    fig, (ret_ax, *reg_axes) = plt.subplots(1, 3, figsize=(14, 4))
    for i, run in enumerate(result["seeds"]):
        steps, returns = np.array(run["progress"], dtype=float).reshape(-1, 2).T
        ret_ax.plot(steps, returns, color=f"C{i}", lw=1, label=f"seed {run['seed']}")
    regret_panels(reg_axes, result, "checkpoints", "global_step", "training steps")
    ret_ax.set(xlabel="training steps", ylabel="episode return (mean per update)",
               title=f"PPO on {result['protocol']['name']}'s training split, sessions of {result['budget_track']}")
    ret_ax.legend(fontsize=8)
    for a in (ret_ax, *reg_axes):
        a.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x / 1e6:g} M"))
    return finish(fig, source_line(result["command"], result["date"][:10], result["cpu"]))


def imitation_figure(result: dict) -> plt.Figure:
    """DAgger's agreement with the expert on the states the policy visited (per seed), and the validation and
    held-out IQM regret of each iteration's checkpoint, from a result of examples/imitation_curves.py."""
    fig, (agree_ax, *reg_axes) = plt.subplots(1, 3, figsize=(14, 4))
    for i, run in enumerate(result["seeds"]):
        rows = run["progress"]
        agree_ax.plot([int(r["iteration"]) for r in rows], [float(r["agreement"]) for r in rows], "o-", ms=3,
                      color=f"C{i}", label=f"seed {run['seed']}")
    regret_panels(reg_axes, result, "iterations", "iteration", "DAgger iteration")
    agree_ax.set(xlabel="DAgger iteration", ylabel="agreement with the expert's moves",
                 title=f"Imitation on {result['protocol']['name']}'s training split, sessions of {result['budget_track']}")
    agree_ax.legend(fontsize=8)
    return finish(fig, source_line(result["command"], result["date"][:10], result["cpu"]))


def learning_curves() -> Iterator[tuple[str, plt.Figure]]:
    """Every shipped result of examples/learning_curves.py and examples/imitation_curves.py."""
    for path in sorted((RESULTS / "learning-curves").glob("*.json")):
        yield f"learning-curves-{path.stem}", learning_curve_figure(json.loads(path.read_text()))
    for path in sorted((RESULTS / "imitation").glob("*.json")):
        yield f"imitation-{path.stem}", imitation_figure(json.loads(path.read_text()))


def generalisation_gaps() -> Iterator[tuple[str, plt.Figure]]:
    """Every shipped result of examples/generalisation_gap.py."""
    for path in sorted((RESULTS / "generalisation-gap").glob("*.json")):
        yield f"generalisation-gap-{path.stem}", generalisation_gap_figure(json.loads(path.read_text()))


def calibration() -> Iterator[tuple[str, plt.Figure]]:
    """Mock against real latency on the held-out half of each shipped calibration sample, scored with the
    shipped fitted profile (as tests/test_data.py checks the figures)."""
    from schedule_gym.backends import PROFILES
    from schedule_gym.calibration import CalibrationSample
    from schedule_gym.records import RecordStore

    folder = RESULTS / "calibration"
    for path in sorted(DATA.glob("calibration-*.jsonl.gz")):
        meta = metadata(folder, path.name)
        store = RecordStore(path)
        tasks = list(dict.fromkeys(r.task for r in store))
        fig, axes = plt.subplots(1, len(tasks), figsize=(4 * len(tasks), 4.2), squeeze=False)
        for ax, task in zip(axes[0], tasks):
            ok = [r.result for r in store.records_of(task) if r.result.ok]
            sample = CalibrationSample(task, tuple(r.config for r in ok), tuple(r.latency_s for r in ok))
            held_out = sample.split()[1]
            real = np.array(held_out.latencies_s) * 1e3
            for name, color in ((meta["start_profile"], "C7"), (meta["profile"], "C0")):
                predicted = held_out.predict(PROFILES[name]) * 1e3
                ax.loglog(real, predicted / np.median(predicted) * np.median(real), ".", color=color, alpha=0.6,
                          label=f"{name}: Spearman {held_out.spearman(PROFILES[name]):.3f}")
            lim = (real.min() / 1.5, real.max() * 1.5)
            ax.plot(lim, lim, "k-", lw=0.5)
            ax.set(xlabel="measured latency (ms)", ylabel="mock latency (ms, scaled to the measured median)",
                   title=f"{task.name}: {len(real)} held-out configs")
            ax.legend(fontsize=7, loc="upper left")
        fig.suptitle(f"Mock against real latency: {path.name}")
        yield f"calibration-{meta['cpu']}", finish(fig, source_line(meta["command"], meta["date"], meta["cpu"]))


def steps_per_second() -> plt.Figure:
    """Environment steps per second: the single environment, the native vector environment, RLlib's sampling."""
    folder = RESULTS / "speed"
    single = json.loads(next(folder.glob("env_steps-*.json")).read_text())
    vector = json.loads(next(folder.glob("vector_steps-*.json")).read_text())
    rllib = json.loads(next(folder.glob("rllib_sampling-*.json")).read_text())
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5))
    ax = axes[0]
    ax.barh(range(len(single["rows"])), [r["median_steps_per_s"] for r in single["rows"]])
    ax.set_yticks(range(len(single["rows"])), [r["variant"] for r in single["rows"]], fontsize=7)
    ax.set(xlabel="steps/s (median of 5 runs)", title=f"single environment ({single['cpu']})")
    ax = axes[1]
    for name, series in vector["vector_env_steps_per_s"].items():
        n = sorted(series, key=int)
        ax.loglog([int(k) for k in n], [series[k] for k in n], "o-", label=f"TilingVectorEnv, {name}")
    for j, (name, value) in enumerate(vector["python_vector_env_steps_per_s"].items()):
        ax.plot(64, value, "s", color=f"C{j + 2}", label=name)
    ax.set(xlabel="environments", ylabel="steps/s", title=f"vector environments ({vector['cpu']})")
    ax.legend(fontsize=7)
    ax = axes[2]
    for name, series in rllib["steps_per_s"].items():
        n = sorted(series, key=int)
        ax.plot([int(k) for k in n], [series[k]["median"] for k in n], "o-", label=name)
    ax.set(xlabel="environments", ylabel="steps/s (median of 3)", title=f"RLlib env runner sampling ({rllib['cpu']})")
    ax.legend(fontsize=7)
    return finish(fig, *(source_line(d["command"], d["date"], d["cpu"]) for d in (single, vector, rllib)))


#: Every figure: its file name (without .png) and the function that draws it.
FIGURES: dict[str, Callable[[], plt.Figure]] = {
    "search-h100": search_curves_h100,
    "agents-gemm-1024": agents_gemm_1024,
    "table-gemm-128-regret": table_regret,
    "peak-gemm-1024": peak_gemm,
    "models-speedup": model_speedups,
    "leaderboard-v0": leaderboard,
    "leaderboard-v1": leaderboard_v1,
    "steps-per-second": steps_per_second,
}


def figures() -> Iterator[tuple[str, plt.Figure]]:
    """Every figure, drawn: (name, figure); the caller saves and closes it."""
    for name, draw in FIGURES.items():
        yield name, draw()
    yield from generalisation_gaps()
    yield from learning_curves()
    yield from calibration()


def save(fig: plt.Figure, path: Path | object) -> None:
    """PNG without a creation time in its metadata, so unchanged data gives the same file."""
    fig.savefig(path, format="png", dpi=110, metadata={"Software": None})
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build/plots", help="folder for the PNGs (default build/plots)")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    for name, fig in figures():
        save(fig, out / f"{name}.png")
        print(out / f"{name}.png")


if __name__ == "__main__":
    main()
