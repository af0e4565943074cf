from pathlib import Path

import pytest

from schedule_gym.cli import main
from schedule_gym.records import RecordStore
from schedule_gym.spaces import TileSpace
from schedule_gym.tasks import gemm


def test_space_prints_the_paper_counts(capsys):
    assert main(["space"]) == 0
    out = capsys.readouterr().out
    for count in ("484,000", "899,756", "1,589,952"):
        assert count in out


def test_space_of_a_shape_and_a_bad_one(capsys):
    assert main(["space", "bert-base-qkv", "--shape", "1000", "768", "3072"]) == 0
    assert "8,236,800 configs" in capsys.readouterr().out
    assert main(["space", "--shape", "0", "8", "8"]) == 2
    assert "m must be a positive integer, got 0" in capsys.readouterr().err
    assert main(["space", "gemm-3"]) == 2
    assert "unknown task 'gemm-3'" in capsys.readouterr().err


def test_tasks_lists_presets(capsys):
    assert main(["tasks"]) == 0
    assert "bert-base-ffn-up" in capsys.readouterr().out


@pytest.mark.tvm
def test_table_measures_every_config_and_resumes(tmp_path, capsys):
    pytest.importorskip("tvm")
    out = tmp_path / "t.jsonl"
    args = ["table", "--shape", "8", "8", "8", "--splits", "2", "1", "2", "--threads", "1", "--out", str(out),
            "--gzip", str(tmp_path / "t.jsonl.gz"), "--min-repeat-ms", "1"]
    assert main(args) == 0
    task = gemm(8, 8, 8, 2, 1, 2)
    assert len(RecordStore(out).records_of(task)) == TileSpace(task).size == 16
    assert len(RecordStore(tmp_path / "t.jsonl.gz")) == 16
    assert "16/16 configs, 0 failed" in capsys.readouterr().out
    assert main(args) == 0  # resumes: nothing left to measure
    assert "16 already in" in capsys.readouterr().out


def test_a_records_path_that_is_a_directory_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["tune", "--task", "gemm-64x64x64", "--budget", "3", "--records", str(tmp_path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: ") and err.count("\n") == 1 and f"{tmp_path}: is a directory" in err


@pytest.mark.tvm
def test_rpc_failures_are_one_line_and_exit_2(tmp_path, capsys):
    pytest.importorskip("tvm")
    import socket

    from tvm.rpc.tracker import Tracker

    tune = ["tune", "--task", "gemm-64x64x64", "--budget", "3", "--backend", "rpc", "--no-records", "--quiet",
            "--no-numpy", "--backend-param", "connect_timeout_s=1"]
    assert main([*tune, "--backend-param", "tracker=127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: no RPC tracker answers at 127.0.0.1:1") and err.count("\n") == 1
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        port = silent.getsockname()[1]
        assert main([*tune, "--backend-param", f"tracker=127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert f"schedule-gym: error: the listener at 127.0.0.1:{port} is not an RPC tracker" in err and err.count("\n") == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        tracker_port = s.getsockname()[1]
    tracker = Tracker(host="127.0.0.1", port=tracker_port, port_end=65000, silent=True)
    try:
        assert main([*tune, "--backend-param", f"tracker=127.0.0.1:{tracker.port}", "--backend-param", "key=nobody"]) == 2
    finally:
        tracker.terminate()
    err = capsys.readouterr().err
    assert err.startswith("schedule-gym: error: no free RPC device with key 'nobody'") and err.count("\n") == 1


def test_space_with_orders_prints_mdf_and_adf(capsys):
    assert main(["space", "--orders", "gemm-1024"]) == 0
    out = capsys.readouterr().out
    assert "loop orders 3,150" in out and "MDF tiles x orders = 2,834,231,400" in out
    assert "ADF tiles + orders = 902,906" in out


def test_tune_with_orders_runs_schedule_agents_and_refuses_them_without(capsys):
    tune = ["tune", "--task", "gemm-128", "--budget", "40", "--no-records", "--quiet", "--no-numpy"]
    assert main([*tune, "--agent", "csp"]) == 2
    assert "agent 'csp' tunes schedules (tiles and loop order): add --orders" in capsys.readouterr().err
    assert main([*tune, "--agent", "csp", "--orders"]) == 0
    out = capsys.readouterr().out
    assert "in order m0 n0 m1 n1 k0 m2 n2 k1 m3 n3: " in out  # s0 in the default order
    assert main([*tune, "--agent", "gbfs", "--orders"]) == 0
    assert "best      ((" in capsys.readouterr().out


def test_a_kernel_built_for_a_gpu_is_not_compared_with_the_cpu_libraries(capsys):
    from types import SimpleNamespace

    from schedule_gym.backends.tvm.export import KernelTarget
    from schedule_gym.cli.tune import _not_comparable_here

    task = gemm(64, 64, 64)
    here = "the kernel ran on a cuda device and NumPy and torch are timed on this CPU"
    assert _not_comparable_here(SimpleNamespace(kernel_target=None), task) is None  # the mock: no kernels
    for target in ({"kind": "llvm", "mcpu": "znver3"}, "llvm"):
        assert _not_comparable_here(SimpleNamespace(kernel_target=KernelTarget(target=target)), task) is None
    for target in ({"kind": "cuda", "arch": "sm_90"}, "cuda"):
        why = _not_comparable_here(SimpleNamespace(kernel_target=KernelTarget(target=target)), task)
        assert why.startswith(here), why
    # records measured on an H100, replayed here: no "x as fast" against this CPU's NumPy
    records = Path(__file__).parents[1] / "examples" / "results" / "cuda-h100" / "gemm-cuda-random.jsonl.gz"
    code = main(["tune", "--task", "gemm-1024", "--backend", "replay", "--records", str(records), "--agent", "random",
                 "--budget", "16", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0 and "best      " in out, out + err
    assert f"vs NumPy  not measured: {here}" in err and "as fast" not in out, out + err
