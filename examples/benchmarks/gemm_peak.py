"""GEMM templates against the machine's FMA peak and the BLAS libraries, in one run on today's CPU.

Prints, for ``M x K x N`` float32 (default 1024^3) with all cores:

1. the CPU (:func:`schedule_gym.hardware.cpu_identity`) and the FP32 FMA peak that
   ``examples/benchmarks/fma_peak.c`` measures on all cores (compiled here with ``gcc -O2 -fopenmp``); the
   clock the FMA threads effectively got, from the time of a step of dependent FMAs of the peak's vector
   width and the FMA latency of the CPU's generation, and the theoretical peak at that clock, where
   :data:`schedule_gym.hardware.GENERATIONS` knows the generation's latency and FMA throughput (else only
   the measured peak); probed again after the final timings, the higher of the two is the peak (a probe run
   while another thread held one of the cores reads low);
2. NumPy's OpenBLAS with each kernel type this CPU runs (``OPENBLAS_CORETYPE`` = Haswell, Zen and, on an
   AVX-512 CPU, SkylakeX; the kernels OpenBLAS picks itself too) and torch.matmul
   (:func:`schedule_gym.reference.library_gemm_times`, each in its own subprocess);
3. ``gemm-cpu`` (v1): its best known configs (the best of the shipped calibration sample of this CPU, if
   any, and a hand-picked register tile), and the packed template (``--template``, default GEMM's packed
   template, ``schedule_gym.templates.PACKED``): the best config an agent finds within ``--budget``
   measurements of the packed GEMM task's space (:func:`schedule_gym.operators.packed_task`), and
   hand-picked micro-kernels for the CPU's vector width. With ``--as-model`` the search is a model build's
   (:func:`schedule_gym.models.tuning.tune_model` on the one task: BLIS's analytical picks first, ``--agent``
   for the rest of ``--budget``, the ``--finalists`` fastest timed again and the lowest median picked), and
   its pick is the search's best: what ``tune-model --packed`` would build this GEMM with;
4. the finalists re-timed side by side, the templates' kernels under the libraries' protocol (5 warm-ups,
   the best of 30 single calls; ``--rounds`` interleaved rounds): GFLOP/s (best round and median of the
   rounds), fraction of the FMA peak, against the best OpenBLAS and against the best library (OpenBLAS's
   best kernel type or torch's, MKL or oneDNN, whichever is faster here). ``--also-template`` builds the
   packed template's finalists (its search's best and the hand-picked configs) with other versions too,
   timed in the same rounds: two versions compared config by config.

    python examples/benchmarks/gemm_peak.py [--budget 900] [--agent felix] [--shape 1024 1024 1024]
        [--template gemm-cpu-v2] [--also-template gemm-cpu-v4] [--as-model [--finalists 3]]

Run it on a quiet machine: every figure of one run shares the machine's state, figures of different runs
(or days: the workplace CPU changes) are not comparable.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from schedule_gym import TilingEnv, gemm
from schedule_gym.agents import make_agent
from schedule_gym.backends.tvm.backend import TVMBackend
from schedule_gym.backends.tvm.targets import host_llvm_target
from schedule_gym.data import CALIBRATION, CALIBRATION_ZNVER3
from schedule_gym.hardware import cpu_has, cpu_identity, cpu_name, generation, usable_cores, vector_bits
from schedule_gym.operators import packed_task
from schedule_gym.records import RecordStore
from schedule_gym.reference import library_gemm_times
from schedule_gym.templates import PACKED, TEMPLATES

HERE = Path(__file__).resolve().parent
#: The finalists' protocol, the libraries' too (library_gemm_times(repeats=30, min_repeat_ms=0, warmup=5)):
#: 5 warm-up calls, then the best of 30 single calls; nothing cut short or censored.
PRECISE = {"warmup": 5, "number": 1, "repeat": 30, "min_repeat_ms": 0, "early_stop_ratio": None,
           "coarse_above_s": None, "censor_ratio": None}


# ------------------------------------------------------------------------------------ FMA peak
def fma_peak(threads: int) -> dict:
    """Compile and run fma_peak.c on ``threads`` threads; its RESULT line as numbers, and its report."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fma_peak"
        subprocess.run(["gcc", "-O2", "-fopenmp", str(HERE / "fma_peak.c"), "-o", str(exe)], check=True)
        out = subprocess.run([str(exe)], env={**os.environ, "OMP_NUM_THREADS": str(threads)},
                             check=True, capture_output=True, text=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT "))
    fields = dict(item.split("=") for item in line.split()[1:])
    return {"threads": int(fields["threads"]), "gflops": float(fields["gflops"]),
            "step_ns": float(fields["step_ns"]), "isa": fields["isa"], "report": out.strip()}


def peak_summary(peak: dict) -> tuple[float | None, str]:
    """The theoretical peak (GFLOP/s; each thread on a core of its own) at the clock the FMA threads
    effectively got, None where this CPU's generation does not give what it needs, and a line saying how it
    was had. A step of the dependent FMAs takes the FMA latency in cycles: clock = latency / step time."""
    cpu = cpu_name()
    gen = generation(cpu)
    if gen is None or gen.fma_latency_cycles is None:
        return None, (f"clock: not known (the FMA latency of {cpu!r} is not known); "
                      f"measured FMA peak {peak['gflops']:.1f} GFLOP/s")
    ghz = gen.fma_latency_cycles / peak["step_ns"]
    text = (f"clock {ghz:.2f} GHz (effective, a thread: {gen.fma_latency_cycles}-cycle FMA latency of {gen.name} / "
            f"{peak['step_ns']:.3f} ns a step of dependent {peak['isa']} FMAs); "
            f"{peak['gflops'] / peak['threads'] / ghz:.1f} FLOP/cycle/thread measured")
    if gen.fma_flop_per_cycle is None:
        return None, text + f"; theoretical: not known ({gen.name}'s FMA units differ by part)"
    theoretical = peak["threads"] * gen.fma_flop_per_cycle * ghz
    return theoretical, text + (f"; theoretical {peak['threads']} x {gen.fma_flop_per_cycle} x {ghz:.2f} = "
                                f"{theoretical:.1f} GFLOP/s, measured/theoretical {peak['gflops'] / theoretical:.3f}")


# ------------------------------------------------------------------------------- hand configs
def packed_hand_configs(m: int, k: int, n: int, lanes: int, threads: int) -> list[tuple]:
    """Micro-kernels that fill the vector registers without spilling, where the shape allows them
    (factors must divide the extents): MR x NR with MR * NR / lanes accumulators, NR a multiple of the
    vector width; MC x KC blocks of A for L2, KC x NR slivers of B for L1, the row blocks shared among
    the threads."""
    kernels = [(6, 16), (4, 24), (4, 16), (2, 32), (8, 8)] if lanes == 8 else [(14, 32), (8, 48), (8, 32), (4, 64), (12, 32)]
    out = []
    blocks = ((256, 256), (m // threads, 128), (128, 256), (192, 256), (96, 384), (240, 256))
    for mr, nr in kernels:
        for mc, kc in blocks:
            if mc < 1 or m % mc or mc % mr or n % nr or k % kc or (m // mc) % threads:
                continue
            config = ((m // mc, mc // mr, mr), (k // kc, kc), (1, n // nr, nr))
            if config not in out:
                out.append(config)
    return out[:8]


def v1_known_configs(m: int, k: int, n: int) -> list[tuple]:
    """v1's best config in the shipped calibration samples measured on this CPU (1024^3 only), and a
    hand-picked 4 x 16 register tile."""
    out: list[tuple] = []
    mcpu = host_llvm_target()["mcpu"]  # as the records' targets name it: TVM's detection
    task = gemm(m, k, n)
    for path in (CALIBRATION_ZNVER3, CALIBRATION):
        rows = [r for r in RecordStore(str(path)).records_of(task) if r.result.ok and f'"mcpu":"{mcpu}"' in str(r.target)]
        if rows:
            out.append(min(rows, key=lambda r: r.result.latency_s).result.config)
    if m % 64 == 0 and n % 256 == 0 and k % 256 == 0:
        out.append(((m // 64, 1, 16, 4), (k // 256, 256), (n // 256, 1, 16, 16)))
    return out


def model_search(task, backend: TVMBackend, args: argparse.Namespace) -> tuple[tuple, float, str]:
    """The pick of a model build's search of ``task`` (``tune_model`` on it alone), its latency (the finalists'
    re-timed median where they were re-timed) and a line saying how it was had."""
    from schedule_gym.models.mapping import MappedModel, MappingReport, ModelTask
    from schedule_gym.models.tuning import tune_model

    tuned = tune_model(MappedModel(None, [ModelTask(task, "gemm", 1)], MappingReport()), args.budget,
                       agent=args.agent, backend=backend, seed=args.seed, round_measurements=args.budget,
                       finalists=args.finalists)
    (outcome,) = tuned.tasks
    retimed = f", the tuned fastest {outcome.tuned_config}" if outcome.finalists else ""
    how = (f"as a model build (tune_model): analytical picks, then {args.agent} seed {args.seed}, "
           f"{outcome.measurements} measurements, {args.finalists} finalists timed again{retimed}")
    return tuple(outcome.best_config), outcome.best_latency_s, how


# ------------------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", nargs=3, type=int, default=[1024, 1024, 1024], metavar=("M", "K", "N"))
    parser.add_argument("--budget", type=int, default=900, help="measurements for the packed template's search")
    parser.add_argument("--agent", default="felix", help="agent of schedule_gym.agents for that search")
    parser.add_argument("--template", default=PACKED["gemm"],
                        choices=sorted(t for t in TEMPLATES if t.startswith("gemm-cpu-v")), help="the packed GEMM template searched (default: GEMM's packed template)")
    parser.add_argument("--also-template", action="append", default=[],
                        choices=sorted(t for t in TEMPLATES if t.startswith("gemm-cpu-v")),
                        help="another packed GEMM template to build the finalists with, timed in the same rounds")
    parser.add_argument("--as-model", action="store_true",
                        help="search as a model build does (tune_model: analytical picks, --agent, finalists)")
    parser.add_argument("--finalists", type=int, default=3,
                        help="with --as-model: the search's fastest configs timed again to pick from")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the final timings")
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--v1-config", action="append", default=[], help="a v1 config to add, as a Python tuple")
    parser.add_argument("--packed-config", action="append", default=[],
                        help="a config of the packed template to add, as a Python tuple")
    args = parser.parse_args()
    if args.template in args.also_template:
        parser.error(f"--also-template {args.template} is the searched template (--template) already")
    m, k, n = args.shape
    t_start = time.time()
    print(f"GEMM {m}x{k}x{n} float32, {args.threads} threads, CPU {cpu_identity().describe()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")

    peak = fma_peak(args.threads)
    print(peak["report"])
    theoretical, peak_line = peak_summary(peak)
    print(peak_line)
    lanes = vector_bits() // 32

    # --- the packed template's search ----------------------------------------------------------------
    packed_gemm = packed_task(gemm(m, k, n))
    packed = args.template
    search_backend = TVMBackend(template=packed, num_threads=args.threads)
    t0 = time.time()
    if args.as_model:
        best_config, best_latency_s, how = model_search(packed_gemm, search_backend, args)
    else:
        env = TilingEnv(packed_gemm, backend=search_backend)
        result = make_agent(args.agent, args.seed).run(env, args.budget)
        env.close()
        best_config, best_latency_s = tuple(result.best_config), result.best_latency_s
        how = f"{args.agent} seed {args.seed}, {result.num_measurements} measurements"
    search_backend.close()
    print(f"\n{packed} search: {how} in {time.time() - t0:.0f} s, "
          f"best {packed_gemm.flops / best_latency_s * 1e-9:.1f} GFLOP/s at {best_config}")

    # --- finalists, re-timed side by side ---------------------------------------------------------
    v1_task = gemm(m, k, n)
    kernels: list[tuple[str, str, object, tuple]] = []  # (label, template, task, config)
    for config in v1_known_configs(m, k, n) + [ast.literal_eval(c) for c in args.v1_config]:
        kernels.append((f"gemm-cpu (v1) {config}", "gemm-cpu", v1_task, tuple(config)))
    hand_picked = packed_hand_configs(m, k, n, lanes, args.threads) + [ast.literal_eval(c) for c in args.packed_config]
    finalists = [("search best", best_config)]
    finalists += [("hand-picked", tuple(c)) for c in hand_picked if tuple(c) != best_config]
    for template in (packed, *args.also_template):
        kernels += [(f"{template} {kind} {config}", template, packed_gemm, config) for kind, config in finalists]
    backends = {template: TVMBackend(template=template, num_threads=args.threads, protocol=PRECISE)
                for template in ("gemm-cpu", packed, *args.also_template)}
    coretypes = ["", "Haswell", "Zen"] + (["SkylakeX"] if cpu_has("avx512f") else [])
    gflops: dict[str, list[float]] = {}
    errors: dict[str, str] = {}
    for _ in range(args.rounds):
        for label, template, task, config in kernels:
            (r,) = backends[template].measure(task, [config])
            if r.ok:
                gflops.setdefault(label, []).append(task.flops / min(r.costs_s) * 1e-9)
            else:
                errors[label] = r.error
        for core in coretypes:
            times = library_gemm_times((m, k, n), "numpy", coretype=core, threads=args.threads, repeats=30, min_repeat_ms=0, warmup=5)
            gflops.setdefault(times.label, []).append(times.stats.best_gflops)
        times = library_gemm_times((m, k, n), "torch", threads=args.threads, repeats=30, min_repeat_ms=0, warmup=5)
        gflops.setdefault(times.label, []).append(times.stats.best_gflops)
    for backend in backends.values():
        backend.close()
    # a probe disturbed for its whole length (another thread on one of the cores) reads low: the peak is the
    # higher of two, one before the search and one after the final timings
    again = fma_peak(args.threads)
    print(f"\nFMA peak probed again after the final timings: {again['gflops']:.1f} GFLOP/s "
          f"(before the search: {peak['gflops']:.1f}); the higher is the peak below")
    if again["gflops"] > peak["gflops"]:
        peak = again
        theoretical, peak_line = peak_summary(peak)
        print(peak_line)
    peak_gflops = peak["gflops"]

    # --- the table --------------------------------------------------------------------------------
    best = {label: max(v) for label, v in gflops.items()}
    blas = max((g for label, g in best.items() if "OpenBLAS" in label), default=float("nan"))
    print(f"\nFinal timings: {args.rounds} interleaved rounds; FMA peak {peak_gflops:.1f} GFLOP/s measured "
          f"({'theoretical not known' if theoretical is None else f'{theoretical:.1f} theoretical'}); "
          f"best OpenBLAS {blas:.1f} GFLOP/s")
    width = max(len(label) for label in gflops) + 2
    print(f"{'kernel':<{width}}{'best':>8}{'median':>8}{'/peak':>8}{'/BLAS':>8}")
    for label, values in gflops.items():
        g = best[label]
        print(f"{label:<{width}}{g:>8.1f}{statistics.median(values):>8.1f}{g / peak_gflops:>8.3f}{g / blas:>8.3f}")
    for label, error in errors.items():
        print(f"{label}: failed: {error}")
    library = max((g for label, g in best.items() if not label.startswith("gemm-cpu")), default=float("nan"))
    packed_best = max((g for label, g in best.items() if label.startswith(packed + " ")), default=float("nan"))
    packed_search = best.get(f"{packed} search best {best_config}", float("nan"))
    print(f"\n{packed} best {packed_best:.1f} GFLOP/s = {packed_best / peak_gflops:.3f} of the FMA peak (target 0.9), "
          f"{packed_best / blas:.3f}x the best OpenBLAS, {packed_best / library:.3f}x the best library (target 0.97); the "
          f"search's own best: {packed_search / peak_gflops:.3f} of peak, {packed_search / blas:.3f}x OpenBLAS, "
          f"{packed_search / library:.3f}x the best library.")
    for other in args.also_template:  # config by config: the same finalists, timed in the same rounds
        pairs = [(best.get(f"{packed} {kind} {config}"), best.get(f"{other} {kind} {config}"))
                 for kind, config in finalists]
        ratios = [a / b for a, b in pairs if a and b]
        other_best = max((g for label, g in best.items() if label.startswith(other + " ")), default=float("nan"))
        print(f"{other} best {other_best:.1f} GFLOP/s = {other_best / peak_gflops:.3f} of the FMA peak; "
              f"{packed} / {other} config by config (best rounds): {', '.join(f'{r:.2f}' for r in ratios)}; "
              f"best against best {packed_best / other_best:.3f}")
    print(f"Run took {time.time() - t_start:.0f} s.")


if __name__ == "__main__":
    sys.exit(main())
