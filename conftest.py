"""Test set-up for the whole repository: the tests in tests/ and the doctests in the package.

* The user cache (:mod:`schedule_gym.cache`) is an empty temporary folder for the whole run, so a profile
  the developer calibrated with ``schedule-gym calibrate`` never changes what the tests see.
* Doctests run as if on a Zen 5 (the mock's ``profile="auto"`` picks ``znver5-2core-fitted``): the
  documented examples in ``envs/tiling_env.py`` and ``envs/vector_env.py`` show that profile's rewards.
  Tests in tests/ name the profile wherever they assert the model's numbers.
"""

from __future__ import annotations

import pytest
from _pytest.doctest import DoctestItem

from schedule_gym import hardware
from schedule_gym.cache import CACHE_ENV


@pytest.fixture(scope="session", autouse=True)
def _empty_user_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(CACHE_ENV, str(tmp_path_factory.mktemp("user-cache")))
        yield


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if not isinstance(item, DoctestItem):
        return (yield)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hardware, "cpu_name", lambda: "znver5")
        return (yield)
