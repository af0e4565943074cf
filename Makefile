# One command sets up and runs the demo, one sets up and runs the tests (README, "Quick start").
# Everything installs into .venv from PyPI, with the versions pinned in constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast test-ray bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: installing SB3 without it would let pip pull a multi-GB CUDA build
	$(PY) -m pip install --quiet -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all]'
	touch $(STAMP)

demo: setup
	$(PY) examples/quickstart.py

test: setup
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m 'not slow and not tvm'

# The Ray and RLlib paths (tests/test_ray.py and tests/test_rllib.py skip them without Ray or RLlib): installs
# the ray and rllib extras, then runs them.
test-ray: setup
	$(PY) -m pip install --quiet -c constraints.txt -e '.[ray,rllib]'
	$(PY) -m pytest -q tests/test_ray.py tests/test_rllib.py

bench: setup
	$(PY) examples/benchmarks/env_steps.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
