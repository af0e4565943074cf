"""``schedule-gym tune`` end to end: every registered agent on the mock backend, resuming from records,
bad input, Ctrl-C, the NumPy references, and (marked ``tvm``) TVMScript, kernel export and a real
SIGINT to a TVM run's process group."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from schedule_gym.agents import SELF_CONTAINED
from schedule_gym.backends import MockBackend
from schedule_gym.cli import main
from schedule_gym.records import RecordStore
from schedule_gym.hardware import cpu_has
from schedule_gym.reference import gflops_stats, library_gemm_times, library_references


def _agent_params():
    """Every registered agent that needs nothing but a seed (the SB3 policy tuner is tested with a model)."""
    return list(SELF_CONTAINED)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _tune(*args: str) -> list[str]:
    return ["tune", "--backend", "mock", "--no-numpy", "--quiet", *args]


# ------------------------------------------------------------------------------- mock end to end
@pytest.mark.parametrize("agent", _agent_params())
def test_every_agent_tunes_end_to_end_and_resumes_from_its_records(agent, tmp_path, capsys):
    records, result = tmp_path / "r.jsonl", tmp_path / "out.json"
    args = _tune("--task", "gemm-128", "--agent", agent, "--budget", "20", "--seed", "3",
                 "--records", str(records), "--result", str(result))
    assert main(args) == 0
    out = capsys.readouterr().out
    first = json.loads(result.read_text())
    n = len(first["history"])
    assert 1 <= n <= 20 and len(_lines(records)) == n
    assert first["agent"] == agent and first["seed"] == 3 and first["backend"] == "mock"
    assert first["stop_reason"] in ("budget", "converged", "space_exhausted")
    assert first["best_gflops"] > 0 and first["records"] == str(records)
    assert f"records   {records}: 0 reused, {n} measured now" in out
    assert "best      " in out and "x over s0" in out

    # the same seeded command again: every decision replays from the records, nothing is measured
    assert main(args) == 0
    assert f"records   {records}: {n} reused, 0 measured now" in capsys.readouterr().out
    assert len(_lines(records)) == n
    again = json.loads(result.read_text())
    assert [r["config"] for r in again["history"]] == [r["config"] for r in first["history"]]
    assert again["best_config"] == first["best_config"]


def test_tune_prints_the_run_and_a_json_result(tmp_path, capsys):
    result = tmp_path / "sub" / "out.json"
    assert main(_tune("--task", "gemm-1024", "--agent", "random", "--budget", "0.1%", "--result", str(result))) == 0
    out = capsys.readouterr().out
    assert "task      gemm-1024 (gemm m=1024 k=1024 n=1024, splits 4/2/4, float32), 899,756 configs" in out
    assert "agent     random (seed 0; batch_size=16) on backend mock, budget 0.1% = 899 configs" in out
    assert "run       899 measurements (0.100% of the space)" in out and "stopped: budget" in out
    assert "records" not in out.split("run ")[0]  # the mock keeps no records unless asked
    data = json.loads(result.read_text())
    assert len(data["history"]) == 899 and data["budget"] == {"fraction": 0.001}
    assert data["best_latency_s"] == min(r["latency_s"] for r in data["history"])
    assert f"result written to {result}" in out


def test_tune_accepts_a_shape_as_task_and_a_time_budget(capsys):
    assert main(["tune", "--task", "gemm-256x128x512", "--budget", "1s", "--no-numpy"]) == 0
    captured = capsys.readouterr()
    assert "gemm-256x128x512 (gemm m=256 k=128 n=512" in captured.out
    assert "stopped: time" in captured.out
    # not a terminal: plain progress lines instead of the live bar
    assert re.match(r"\[gemm-256x128x512\] 1 configs after \d+\.\d of 1 s, best \d+\.\d GFLOP/s\n", captured.err)


def test_resume_after_an_interruption_reproduces_the_uninterrupted_run(tmp_path, capsys):
    full, part = tmp_path / "full.jsonl", tmp_path / "part.jsonl"
    common = ["--task", "gemm-256", "--agent", "random", "--budget", "40", "--agent-param", "batch_size=8"]
    assert main(_tune(*common, "--records", str(full), "--result", str(tmp_path / "full.json"))) == 0
    part.write_text("\n".join(_lines(full)[:13]) + "\n" + _lines(full)[13][:20])  # killed mid-write
    assert main(_tune(*common, "--records", str(part), "--result", str(tmp_path / "part.json"))) == 0
    assert f"{part}: 13 reused, 27 measured now" in capsys.readouterr().out
    assert _lines(part)[:13] == _lines(full)[:13] and len(_lines(part)) == 40
    a, b = (json.loads((tmp_path / f).read_text()) for f in ("full.json", "part.json"))
    assert [(r["config"], r["latency_s"]) for r in a["history"]] == [(r["config"], r["latency_s"]) for r in b["history"]]


def test_ctrl_c_prints_the_result_so_far_keeps_the_records_and_exits_130(tmp_path, capsys, monkeypatch):
    measure, calls = MockBackend.measure, []

    def interrupted_on_the_third_batch(self, task, configs, on_result=None):
        calls.append(len(configs))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return measure(self, task, configs, on_result)

    monkeypatch.setattr(MockBackend, "measure", interrupted_on_the_third_batch)
    records, result = tmp_path / "r.jsonl", tmp_path / "out.json"
    args = _tune("--task", "gemm-256", "--agent", "random", "--budget", "100", "--records", str(records),
                 "--result", str(result), "--export-kernel", str(tmp_path / "k.so"))
    assert main(args) == 130
    out = capsys.readouterr().out
    assert "stopped: interrupted" in out and "best      " in out
    assert f"interrupted: stopped by Ctrl-C after 17 measurements; the records in {records} are intact" in out
    assert not (tmp_path / "k.so").exists()  # nothing is exported from an interrupted run
    assert json.loads(result.read_text())["stop_reason"] == "interrupted"
    assert len(RecordStore(records)) == len(_lines(records)) == 17  # s0 and one batch of 16

    monkeypatch.setattr(MockBackend, "measure", measure)
    assert main([*args[:-2]]) == 0  # the same command (without the export) resumes
    assert f"{records}: 17 reused, 83 measured now" in capsys.readouterr().out


# ------------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "args, message",
    [
        (["--agent", "nope"], "unknown agent 'nope'; known agents: random, gbfs, na2c, felix, nn, xgb, rnn, grid, policy, csp, mdf, orders, transfer"),
        (["--backend", "nope"], "unknown backend 'nope'; known backends: mock, tvm, rpc, replay"),
        (["--task", "gemm-3"], ("unknown task 'gemm-3'; known tasks: gemm-64, gemm-128, gemm-256, gemm-512, gemm-1024, "
                                "gemm-2048, bert-base-qkv, bert-base-attn-out, bert-base-ffn-up, bert-base-ffn-down, "
                                "gpt2-mlp-up, resnet50-fc, gemm-MxKxN, operator task names (+ -packed), or SUITE/LAYER with a suite from resnet50, "
                                "resnet18, mobilenetv2, bert-base, metaschedule, zoo-bert-base, zoo-bert-tiny, zoo-densenet121, "
                                    "zoo-efficientnet-b0, zoo-gpt2, zoo-inceptionv3, zoo-lstm-ptb, zoo-mobilenetv2, zoo-resnet18, "
                                    "zoo-resnet50, zoo-resnext50, zoo-vgg16, zoo-vit-b16, v1-validation (schedule-gym tasks lists them)")),
        (["--task", "gemm-0x8x8"], "m must be a positive integer, got 0"),
        (["--budget", "lots"], "budget 'lots' is not a count (900), a percentage of the space (0.1%) or a time (600s, 15m, 2h)"),
        (["--budget", "1.5"], "budget '1.5': a measurement count must be a whole number"),
        (["--seed", "x"], "argument --seed: invalid int value: 'x' (see schedule-gym tune --help)"),
        (["--seed", "-1"], "seed must be a non-negative integer, got -1"),
        (["--agent-param", "batch_size"], "bad --agent-param 'batch_size': expected key=value with a parameter name as key"),
        (["--agent-param", "=4"], "bad --agent-param '=4': expected key=value with a parameter name as key"),
        (["--agent-param", "batch_size=2", "--agent-param", "batch_size=3"],
         "bad --agent-param 'batch_size=3': 'batch_size' is given twice"),
        (["--agent-param", "batch_size=-1"], "batch_size must be a positive integer, got -1"),
        (["--agent-param", "batch_size=big"], "batch_size must be a positive integer, got 'big'"),
        (["--agent-param", "nope=1"], ("bad parameters {'nope': 1} for agent 'random': "
                                       "RandomSearchAgent.__init__() got an unexpected keyword argument 'nope'")),
        (["--backend-param", "nope=[1, 2]"], "unknown option 'nope' for backend 'mock'; its options: records, profile, "
                                             "noise, seed, repeats"),
        # the record file the command adds is not named as the culprit; the backend's own options are listed
        (["--backend", "tvm", "--backend-param", "thread=2"], ("unknown option 'thread' for backend 'tvm'; its options: "
                                                               "records, target, template, num_threads, build_workers, "
                                                               "protocol, runner_cpus")),
        (["--budget", "-1"], "budget '-1' must be positive: a count (900), a percentage of the space (0.1%) or a time "
                             "(600s, 15m, 2h)"),
        (["--backend-param", "records=x.jsonl"], "give the record file with --records, not --backend-param records=..."),
        (["--backend", "replay"], "the replay backend serves a record file: give it with --records FILE"),
        (["--records", "a.jsonl", "--no-records"], ("argument --no-records: not allowed with argument --records "
                                                    "(see schedule-gym tune --help)")),
    ],
)
def test_bad_input_is_one_line_naming_the_value_and_exit_code_2(args, message, capsys):
    assert main(["tune", "--budget", "10", "--quiet", "--no-numpy", *args]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"schedule-gym: error: {message}\n"
    assert captured.out == ""


def test_a_broken_record_file_is_bad_input(tmp_path, capsys):
    records = tmp_path / "r.jsonl"
    records.write_text('{"not": "a record"}\n')
    assert main(_tune("--budget", "5", "--records", str(records))) == 2
    assert capsys.readouterr().err.startswith(f"schedule-gym: error: {records}:1: not a schedule-gym record")


def test_a_replay_miss_says_what_to_do_on_the_command_line(tmp_path, capsys):
    records = tmp_path / "r.jsonl"
    assert main(_tune("--task", "gemm-64", "--budget", "5", "--records", str(records))) == 0
    capsys.readouterr()
    assert main(_tune("--task", "gemm-64", "--budget", "20", "--backend", "replay", "--records", str(records))) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: config ") and err.count("\n") == 1
    assert f"is not in the records ['{records}'] (5 configs of this task for mock-cpu-v2)" in err
    # the records were measured by the mock: the way out names it, not the Python API's delegate=
    assert err.endswith("; to measure what is missing, run the command with --backend mock and the same --records "
                        "(it serves the records and measures and appends the rest)\n")
    assert "delegate" not in err
    assert main(_tune("--task", "gemm-64", "--budget", "20", "--records", str(records))) == 0  # which it does
    assert f"records   {records}: 5 reused, 15 measured now" in capsys.readouterr().out


def test_files_written_at_the_end_are_checked_before_the_run(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for flag in ("--result", "--export-kernel"):
        assert main(_tune("--budget", "5", flag, str(blocker / "out.json"))) == 2
        captured = capsys.readouterr()
        assert captured.err == f"schedule-gym: error: {flag} {blocker / 'out.json'} cannot be written: {blocker} is a file, not a folder\n"
        assert captured.err.count("\n") == 1 and captured.out == ""  # nothing ran
    assert main(_tune("--budget", "5", "--result", str(tmp_path))) == 2
    assert capsys.readouterr().err == f"schedule-gym: error: --result {tmp_path} is a directory; give a file name\n"
    out = tmp_path / "new" / "r.json"
    assert main(_tune("--budget", "5", "--result", str(out))) == 0 and json.loads(out.read_text())["stop_reason"]


def test_ctrl_c_anywhere_is_one_line_and_exit_130(monkeypatch, capsys):
    from schedule_gym.cli import space

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(space, "run", interrupted)  # Ctrl-C while a command imports its libraries, say
    assert main(["space", "gemm-64"]) == 130
    assert capsys.readouterr().err == "schedule-gym: interrupted\n"


def test_missing_budget_and_subcommand_are_usage_errors(capsys):
    assert main(["tune"]) == 2
    assert capsys.readouterr().err == (
        "schedule-gym: error: the following arguments are required: --budget (see schedule-gym tune --help)\n"
    )
    assert main([]) == 2
    assert "the following arguments are required: command" in capsys.readouterr().err


def test_key_value_parameters_are_json_where_they_parse():
    from schedule_gym.cli import parse_params

    params = parse_params(["a=1", "b=0.5", "c=true", "d=null", "e=[0, 1]", "f=text", 'g="7"', "h.i=2", "h.j=x=y"], "--p")
    assert params == {"a": 1, "b": 0.5, "c": True, "d": None, "e": [0, 1], "f": "text", "g": "7", "h": {"i": 2, "j": "x=y"}}


# ----------------------------------------------------------------------------- NumPy references
def test_numpy_reference_reports_the_openblas_kernels_that_ran():
    cores = ["Haswell"] + (["SkylakeX"] if cpu_has("avx512f") else [])
    for core in cores:
        r = library_gemm_times((64, 32, 48), "numpy", coretype=core, repeats=2, min_repeat_ms=1)
        assert r.coretype == core and r.coretype_confirmed and r.coretype_requested == core
        assert len(r.times_s) == 2 and r.number >= 1 and r.shape == (64, 32, 48) and r.flops == 2 * 64 * 32 * 48
        assert f"OpenBLAS {core} kernels" in r.label and f"OPENBLAS_CORETYPE={core}" in r.label
    if cpu_has("avx512f"):
        assert "(AVX-512)" in r.label
    else:  # a CPU without AVX-512 (Zen 3 days): a precise refusal, not an illegal instruction
        with pytest.raises(ValueError, match="OPENBLAS_CORETYPE=SkylakeX needs the CPU feature 'avx512f'"):
            library_gemm_times((64, 32, 48), "numpy", coretype="SkylakeX")
        assert [r.coretype for r in library_references((64, 32, 48))] != ["SkylakeX"]
        assert len(library_references((64, 32, 48))) == 1


def test_reference_arguments_are_checked_and_stats_computed():
    with pytest.raises(ValueError, match="unknown library 'mkl'; known libraries: numpy, torch"):
        library_gemm_times((8, 8, 8), "mkl")
    with pytest.raises(ValueError, match="coretype selects NumPy's OpenBLAS kernels; torch does not use it"):
        library_gemm_times((8, 8, 8), "torch", coretype="Haswell")
    with pytest.raises(ValueError, match=r"a GEMM shape is three positive integers \(m, k, n\), got \(8, 8\)"):
        library_gemm_times((8, 8))
    stats = gflops_stats([4e-3, 1e-3, 2e-3], flops=4_000_000)
    assert (stats.best_gflops, stats.median_gflops) == (4.0, 2.0)


def test_tune_compares_with_numpy_in_the_same_run(tmp_path, capsys):
    result = tmp_path / "out.json"
    assert main(["tune", "--task", "gemm-128", "--budget", "10", "--quiet", "--result", str(result)]) == 0
    out = capsys.readouterr().out
    assert "vs NumPy  the same GEMM, timed here after the search (GFLOP/s best / median; speed-up over the median)" in out
    assert "          note: the mock's tuned latency is modelled, not measured" in out
    refs = json.loads(result.read_text())["references"]
    assert refs and all(r["library"] == "numpy" and r["best_gflops"] >= r["median_gflops"] > 0 for r in refs)
    if cpu_has("avx512f"):  # forced, unless this environment already selects them
        assert "OpenBLAS SkylakeX kernels (AVX-512)" in out
        assert refs[-1]["coretype"] == "SkylakeX"
    else:
        assert "SkylakeX" not in out and len(refs) == 1


# -------------------------------------------------------------------------------------------- TVM
def _load_and_check(path: Path, m: int, k: int, n: int) -> None:
    """Load an exported kernel back with TVM's runtime, run it and compare with NumPy."""
    tvm = pytest.importorskip("tvm")
    module = tvm.runtime.load_module(str(path))
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (m, k)).astype("float32")
    b = rng.uniform(-1, 1, (k, n)).astype("float32")
    dev = tvm.cpu(0)
    c = tvm.runtime.empty((m, n), "float32", dev)
    module["main"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
    np.testing.assert_allclose(c.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.tvm
def test_tune_prints_tvmscript_and_exports_a_checked_kernel(tmp_path, capsys):
    pytest.importorskip("tvm")
    kernel = tmp_path / "best.so"
    args = ["tune", "--task", "gemm-128x64x96", "--budget", "10", "--quiet", "--no-numpy",
            "--print-tvmscript", "--export-kernel", str(kernel)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "as TVMScript (template gemm-cpu)" in out and "@T.prim_func" in out
    assert 'def main(A: T.Buffer((128, 64), "float32"), B: T.Buffer((64, 96), "float32"), C: T.Buffer((128, 96), "float32"))' in out
    assert f"exported the best kernel to {kernel} (gemm-cpu-v1, target kind=llvm" in out
    assert "checked against NumPy after export: max abs error" in out
    assert "main(A: float32[128, 64], B: float32[64, 96], C: float32[128, 96]) -> None; writes C = A @ B" in out
    _load_and_check(kernel, 128, 64, 96)


@pytest.mark.tvm
def test_workers_ignore_sigint_only_the_parent_reacts():
    pytest.importorskip("tvm")
    from schedule_gym.backends.tvm.workers import IsolatedWorker

    worker = IsolatedWorker()
    try:
        assert worker.call(os.getpid, (), 60.0) != os.getpid()  # started (and initialised)
        pid = worker._worker._proc.pid
        killer = subprocess.Popen([sys.executable, "-c", f"import os, signal, time; time.sleep(0.5); os.kill({pid}, signal.SIGINT)"])
        assert worker.call(time.sleep, (1.5,), 30.0) is None  # interrupted in the middle, and unharmed
        killer.wait()
        assert worker.call(os.getpid, (), 30.0) == pid  # the same process
    finally:
        worker.close()


@pytest.mark.tvm
def test_a_ctrl_c_between_the_workers_start_and_its_pipes_leaves_a_worker_that_closes(monkeypatch):
    # A Ctrl-C received by another thread of the parent is raised in the main thread even with SIGINT
    # blocked there: it can land inside PopenWorker._start after the process started and before its pipes
    # were made (seen once in CI: close() then failed on the missing pipe, a traceback after the Ctrl-C).
    pytest.importorskip("tvm")
    from tvm.support import popen_pool

    from schedule_gym.backends.tvm.workers import IsolatedWorker

    started = []

    class Recorded:  # popen_pool's subprocess, the processes it starts kept
        def __getattr__(self, name):
            return getattr(subprocess, name)

        def Popen(self, *args, **kwargs):  # noqa: N802 - subprocess's name
            started.append(subprocess.Popen(*args, **kwargs))
            return started[-1]

    class InterruptedBeforeThePipes:  # popen_pool's os, its fdopen interrupted: _proc is set, no pipe yet
        def __getattr__(self, name):
            return getattr(os, name)

        def fdopen(self, *args, **kwargs):
            raise KeyboardInterrupt

    worker = IsolatedWorker()
    monkeypatch.setattr(popen_pool, "subprocess", Recorded())
    monkeypatch.setattr(popen_pool, "os", InterruptedBeforeThePipes())
    with pytest.raises(KeyboardInterrupt):
        worker.call(os.getpid, (), 60.0)
    monkeypatch.undo()
    assert worker._worker._proc is None and started[0].poll() is not None  # the half-started process ended
    try:
        assert worker.call(os.getpid, (), 60.0) != os.getpid()  # the next call starts a new one
    finally:
        worker.close()
    worker.close()  # closing twice is harmless


TVM_TUNE = [
    "tune", "--task", "gemm-128", "--agent", "random", "--backend", "tvm", "--budget", "12",
    "--agent-param", "batch_size=4", "--backend-param", "num_threads=1", "--backend-param", "protocol.min_repeat_ms=1",
    "--no-numpy", "--quiet",
]
#: How a terminal runs the command: Python's own SIGINT handler installed even if whoever started the
#: test suite ignores SIGINT (a background job without job control inherits SIG_IGN).
LAUNCH = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " \
         "from schedule_gym.cli import main; sys.exit(main(sys.argv[1:]))"


@pytest.mark.tvm
def test_ctrl_c_on_a_tvm_run_exits_130_with_clean_records_and_resumes(tmp_path):
    pytest.importorskip("tvm")
    records, result, kernel = tmp_path / "r.jsonl", tmp_path / "out.json", tmp_path / "k.so"
    args = [*TVM_TUNE, "--records", str(records), "--result", str(result), "--export-kernel", str(kernel)]
    # its own session, so the signal to its process group reaches the CLI and its TVM workers, as a
    # terminal's Ctrl-C does, and not this test process
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, *args], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    # four lines seen: the one being flushed when Ctrl-C arrives is cut back (it was in flight), three stay
    while len(_lines(records)) < 4 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted:\n" + "".join(proc.communicate())
    os.killpg(proc.pid, signal.SIGINT)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    stopped_s = time.monotonic() - t0
    for _ in range(50):  # the workers ignored the signal: the CLI must have ended them
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("worker processes outlived the interrupted run")
    assert stopped_s < 30, f"stopping took {stopped_s:.1f} s"
    assert "Traceback" not in err, err
    assert "stopped: interrupted" in out and "the records in" in out and "run the same command to resume" in out
    assert not kernel.exists()

    first = _lines(records)
    assert 3 <= len(first) < 12
    for line in first:  # every line is a whole record, and none is a failure the interrupt caused
        data = json.loads(line)
        assert data["error"] is None and data["latency_s"] > 0, data
    assert len(RecordStore(records)) == len(first)
    assert json.loads(result.read_text())["stop_reason"] == "interrupted"

    again = subprocess.run([sys.executable, "-c", LAUNCH, *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"{records}: {len(first)} reused, {12 - len(first)} measured now" in again.stdout
    lines = _lines(records)
    assert lines[: len(first)] == first and len(lines) == 12  # the first run's records reused, not measured again
    assert all(json.loads(line)["error"] is None for line in lines)
    assert "checked against NumPy after export" in again.stdout
    _load_and_check(kernel, 128, 128, 128)


def _children(pid: int) -> list[str]:
    """The command lines of the processes under ``pid`` (Linux /proc)."""
    found, parents = [], {pid}
    for entry in sorted(os.listdir("/proc"), key=lambda e: (len(e), e)):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid in parents:
                parents.add(int(entry))
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    found.append(f.read().replace(b"\0", b" ").decode())
        except (OSError, ValueError, IndexError):
            continue
    return found


@pytest.mark.tvm
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the worker processes in /proc")
@pytest.mark.parametrize("worker", ["_zygote_main", "tvm.exec.popen_worker"])
def test_ctrl_c_while_the_workers_import_tvm_is_one_line_and_exit_130(tmp_path, worker):
    # Ctrl-C reaches the whole foreground process group: the command and its workers, which are then
    # importing TVM (seconds). Only the command may speak: one line, exit status 130.
    pytest.importorskip("tvm")
    command = [sys.executable, "-c", LAUNCH, "tune", "--task", "gemm-64", "--backend", "tvm", "--budget", "4",
               "--records", str(tmp_path / "r.jsonl"), "--quiet", "--no-numpy"]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        deadline = time.monotonic() + 120
        while not any(worker in line for line in _children(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err and err.count("\n") <= 1, err
