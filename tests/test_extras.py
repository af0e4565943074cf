"""A core install (numpy and Gymnasium only) asked for something an extra installs names the extra: agents by
name, the TVM backend, the SB3 adapters, a trained policy, the command line's commands. The fast tests hide
modules from :func:`schedule_gym.extras.require`; the slow one installs the wheel without extras into a fresh
virtual environment and asks for each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from schedule_gym import extras
from schedule_gym.agents import AGENT_NEEDS, AGENTS, agent_class
from schedule_gym.cli import main
from schedule_gym.errors import USER_ERRORS, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def core_only(monkeypatch):
    """Every module an extra installs looks uninstalled to :func:`require`."""
    optional = {m for modules in extras.EXTRAS.values() for m in modules}
    real = extras._installed
    monkeypatch.setattr(extras, "_installed", lambda module: module not in optional and real(module))


def test_every_agent_that_needs_an_extra_names_it(core_only):
    for name, (extra, modules) in AGENT_NEEDS.items():
        with pytest.raises(MissingExtraError, match=rf"^agent '{name}' needs .*, which (is|are) not installed: "
                                                   rf"pip install 'schedule-gym\[{extra}\]'$"):
            agent_class(name)
    for name in set(AGENTS) - set(AGENT_NEEDS) - {"orders"}:
        agent_class(name)  # random, gbfs, grid: the core install runs them
    with pytest.raises(MissingExtraError, match=r"agent 'felix' needs torch"):
        from schedule_gym.agents import make_agent

        make_agent("orders")  # its default inner agent is felix


def test_the_tvm_backend_and_the_sb3_paths_name_their_extras(core_only):
    from schedule_gym import TilingEnv, make_backend
    from schedule_gym.benchmark import load_policy

    with pytest.raises(MissingExtraError, match=r"^the tvm backend needs tvm, tvm_ffi, cloudpickle, psutil, which are "
                                               r"not installed: pip install 'schedule-gym\[tvm\]'$"):
        make_backend("tvm")
    with pytest.raises(MissingExtraError, match=r"the rpc backend needs .*pip install 'schedule-gym\[tvm\]'"):
        make_backend("rpc")
    with pytest.raises(MissingExtraError, match=r"pip install 'schedule-gym\[tvm\]'"):
        TilingEnv("gemm-64", backend="tvm")
    with pytest.raises(MissingExtraError, match=r"^loading a trained policy needs torch, stable_baselines3, sb3_contrib, "
                                               r"which are not installed: pip install 'schedule-gym\[rl\]'$"):
        load_policy(b"", "v0")
    from schedule_gym.baselines.sb3_tuner import _algo_class

    with pytest.raises(MissingExtraError, match=r"algorithm 'ppo' needs .*pip install 'schedule-gym\[rl\]'"):
        _algo_class("ppo")
    assert issubclass(MissingExtraError, ImportError) and MissingExtraError in USER_ERRORS


@pytest.mark.parametrize(
    "argv, message",
    [
        (["tune", "--budget", "5", "--agent", "na2c"], "agent 'na2c' needs torch, which is not installed: "
                                                       "pip install 'schedule-gym[agents]'"),
        (["tune", "--budget", "5", "--agent", "xgb"], "agent 'xgb' needs xgboost, which is not installed: "
                                                      "pip install 'schedule-gym[baselines]'"),
        (["tune", "--budget", "5", "--backend", "tvm", "--no-records"],
         "the tvm backend needs tvm, tvm_ffi, cloudpickle, psutil, which are not installed: pip install 'schedule-gym[tvm]'"),
        (["tune", "--budget", "5", "--export-kernel", "k.so"], "--export-kernel needs tvm, tvm_ffi, cloudpickle, psutil, "
                                                               "which are not installed: pip install 'schedule-gym[tvm]'"),
        (["tune-model", "--model", "tiny-mlp", "--budget", "4"],
         "schedule-gym tune-model with agent 'xgb' needs torch, tvm, tvm_ffi, cloudpickle, psutil, xgboost, which are "
         "not installed: pip install 'schedule-gym[agents,tvm,baselines]'"),
        (["compare", "--quick"], "compare's plots (or give --no-plots) needs matplotlib, which is not installed: "
                                 "pip install 'schedule-gym[baselines]'"),
        (["compare", "--quick", "--no-plots"], "agent 'na2c' needs torch, which is not installed: "
                                               "pip install 'schedule-gym[agents]'"),
        (["calibrate"], "schedule-gym calibrate (it measures kernels with TVM) needs tvm, tvm_ffi, cloudpickle, psutil, "
                        "which are not installed: pip install 'schedule-gym[tvm]'"),
    ],
)
def test_the_command_line_names_the_extra_in_one_line(core_only, argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert capsys.readouterr().err == f"schedule-gym: error: {message}\n"


def test_a_policy_file_needs_the_rl_extra_on_the_command_line(core_only, tmp_path, capsys):
    import zipfile

    policy = tmp_path / "p.zip"
    with zipfile.ZipFile(policy, "w") as archive:
        archive.writestr("data", "{}")
    assert main(["benchmark", "--policy", str(policy)]) == 2
    assert capsys.readouterr().err == ("schedule-gym: error: --policy needs torch, stable_baselines3, sb3_contrib, which "
                                       "are not installed: pip install 'schedule-gym[rl]'\n")


# ------------------------------------------------------------------------------------- the wheel, for real
CHECKS = textwrap.dedent(
    """
    import json, sys
    from schedule_gym.agents import agent_class
    from schedule_gym.errors import MissingExtraError
    out = {}
    def named(key, call):
        try:
            call()
            out[key] = "no error"
        except MissingExtraError as exc:
            out[key] = str(exc)
        except Exception as exc:
            out[key] = f"{type(exc).__name__}: {exc}"
    for name in ("na2c", "felix", "nn", "rnn", "policy", "xgb", "csp"):
        named(name, lambda: agent_class(name))
    from schedule_gym import TilingEnv, make_backend
    named("tvm", lambda: make_backend("tvm"))
    named("env-tvm", lambda: TilingEnv("gemm-64", backend="tvm"))
    named("sb3_vec", lambda: __import__("schedule_gym.envs.sb3_vec"))
    from schedule_gym.benchmark import load_policy
    named("load_policy", lambda: load_policy(b"", "v0"))
    print(json.dumps(out))
    """
)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None and not (ROOT / "pyproject.toml").exists(), reason="needs the source")
def test_a_wheel_installed_without_extras_names_the_extra_everywhere(tmp_path):
    # the package's source only, so the wheel is built outside the working tree (no build/ left in it)
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for folder in ("schedule_gym", "agents", "baselines"):
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    run = lambda *argv, **kw: subprocess.run(argv, capture_output=True, text=True, timeout=900, **kw)  # noqa: E731
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
                str(source))
    assert built.returncode == 0, built.stdout + built.stderr
    wheel = next((tmp_path / "dist").glob("schedule_gym-*.whl"))
    venv = tmp_path / "venv"
    assert run(sys.executable, "-m", "venv", str(venv)).returncode == 0
    python = str(venv / "bin" / "python")
    core = run(python, "-m", "pip", "install", "--quiet", "-c", str(ROOT / "constraints.txt"), "numpy", "gymnasium")
    assert core.returncode == 0, core.stdout + core.stderr
    installed = run(python, "-m", "pip", "install", "--quiet", "--no-deps", str(wheel))
    assert installed.returncode == 0, installed.stdout + installed.stderr

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    checks = run(python, "-c", CHECKS, cwd=tmp_path, env=env)
    assert checks.returncode == 0, checks.stderr
    said = json.loads(checks.stdout)
    for key, extra in [("na2c", "agents"), ("felix", "agents"), ("nn", "agents"), ("rnn", "agents"), ("policy", "rl"),
                       ("xgb", "baselines"), ("csp", "baselines"), ("tvm", "tvm"), ("env-tvm", "tvm"), ("sb3_vec", "rl"),
                       ("load_policy", "rl")]:
        assert said[key].endswith(f"which is not installed: pip install 'schedule-gym[{extra}]'") or said[key].endswith(
            f"which are not installed: pip install 'schedule-gym[{extra}]'"), (key, said[key])

    cli = str(venv / "bin" / "schedule-gym")
    assert run(cli, "--help", cwd=tmp_path, env=env).returncode == 0  # the command line itself needs no extra
    ok = run(cli, "tune", "--budget", "5", "--no-numpy", "--quiet", cwd=tmp_path, env=env)
    assert ok.returncode == 0 and "best" in ok.stdout, ok.stderr  # the core runs the mock with random search
    for argv, extra in [(["tune", "--budget", "5", "--agent", "felix"], "agents"),
                        (["tune", "--budget", "5", "--backend", "tvm"], "tvm"),
                        (["tune-model", "--model", "tiny-mlp", "--budget", "4", "--agent", "random"], "agents,tvm")]:
        failed = run(cli, *argv, cwd=tmp_path, env=env)
        assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed.stderr
        assert failed.stderr.endswith(f"not installed: pip install 'schedule-gym[{extra}]'\n"), failed.stderr
