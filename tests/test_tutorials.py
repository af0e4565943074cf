"""The tutorials (examples/tutorials/, rendered into the documentation site) run top to bottom as scripts.

Each runs in a fresh interpreter, as a reader would run it; the real-hardware ones are marked ``tvm``, the
Ray one skips without Ray. A tutorial that fails here is a page of the site that shows broken code."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "examples" / "tutorials"
NEEDS_TVM = {"03_real_hardware_and_records.py", "04_tune_a_whole_model.py"}
NEEDS_RAY = {"06_ray_cluster.py"}
TRAINS_RL = {"01_maskable_ppo_on_a_suite.py", "02_native_vector_env.py"}  # marked slow, as the suite's RL training is


def _params():
    for script in sorted(TUTORIALS.glob("[0-9]*.py")):
        marks = [pytest.mark.tvm] if script.name in NEEDS_TVM else []
        marks += [pytest.mark.slow] if script.name in TRAINS_RL else []
        yield pytest.param(script, id=script.stem, marks=marks)


def test_every_tutorial_is_run_here():
    assert {p.name for p in TUTORIALS.glob("[0-9]*.py")} >= NEEDS_TVM | NEEDS_RAY | TRAINS_RL
    assert len(list(TUTORIALS.glob("[0-9]*.py"))) >= 8


@pytest.mark.parametrize("script", list(_params()))
def test_tutorial_runs(script: Path, tmp_path: Path) -> None:
    if script.name in NEEDS_TVM:
        pytest.importorskip("tvm")
    if script.name in NEEDS_RAY and importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is an optional extra: pip install 'schedule-gym[ray]' (make test-ray)")
    # os.environ holds the test session's empty user cache (conftest.py): a profile the developer
    # calibrated changes nothing; the working folder is a fresh one, so no run leaves files in the checkout
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=dict(os.environ), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{script.name} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
