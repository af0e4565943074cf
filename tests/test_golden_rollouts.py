"""Seeded rollouts of every registered id, single and vector, equal to what the environments did before the
episode core was rewritten (tests/golden/rollouts-v0.npz, written by tests/golden/make_rollouts.py on an
AVX-512 CPU).

Integers, flags and every discrete outcome must be equal. Floats must be equal to within 4 units in the last
place, or 4 machine epsilons where they are near zero: NumPy picks its ``log`` and ``exp`` loops by the CPU's
vector instructions, and on an AVX2 CPU (AMD Zen 3) they differ from the AVX-512 ones in the last bit (a
reward ``log(prev / cost)`` of a move that barely changes the latency is near zero, so one bit of ``log``'s
argument there is many units in its own last place). A change of behaviour moves values by far more. Within one
run the single and vector environments are compared to the bit (test_vector_env.py, test_multitask_vector.py).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

_SPEC = importlib.util.spec_from_file_location("make_rollouts", Path(__file__).parent / "golden" / "make_rollouts.py")
golden = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(golden)
GOLDEN = np.load(golden.OUT)


def _check(name: str, arrays: dict[str, np.ndarray]) -> None:
    stored = sorted(k.split("/", 1)[1] for k in GOLDEN.files if k.split("/", 1)[0] == name)
    assert sorted(arrays) == stored
    for key, value in arrays.items():
        expected = GOLDEN[f"{name}/{key}"]
        assert value.shape == expected.shape, f"{name}/{key}: shape {value.shape}, golden {expected.shape}"
        if value.dtype.kind == "f":
            assert value.dtype == expected.dtype, f"{name}/{key}: dtype {value.dtype}, golden {expected.dtype}"
            # equal numbers to the last bits, NaN where the golden has NaN
            eps = np.finfo(value.dtype).eps
            close = np.isclose(value, expected, rtol=4 * eps, atol=4 * eps, equal_nan=True)
            differ = ~(close & (np.isnan(value) == np.isnan(expected)))
            assert not differ.any(), f"{name}/{key} differs at {np.argwhere(differ)[:5].tolist()}"
        else:
            assert np.array_equal(value, expected), f"{name}/{key} differs"


@pytest.mark.parametrize("name, env_id, kwargs", golden.CASES, ids=[c[0] for c in golden.CASES])
def test_single_rollouts_equal_the_golden_ones(name, env_id, kwargs):
    _check(name, golden.single_rollout(env_id, kwargs))


@pytest.mark.parametrize("name, env_id, num_envs, kwargs", golden.VECTOR_CASES, ids=[c[0] for c in golden.VECTOR_CASES])
def test_vector_rollouts_equal_the_golden_ones(name, env_id, num_envs, kwargs):
    _check(name, golden.vector_rollout(env_id, num_envs, kwargs))
