# One command sets up and runs the demo, one sets up and runs the tests (README, "Quick start").
# Everything installs into .venv from PyPI, with the versions pinned in constraints.txt.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-fast test-ray bench docs docs-serve plots clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: installing SB3 without it would let pip pull a multi-GB CUDA build
	$(PY) -m pip install --quiet -c constraints.txt torch
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,docs]'
	touch $(STAMP)

demo: setup
	$(PY) examples/quickstart.py

# The documentation site is part of the tests: a page, link, anchor or docstring the build cannot resolve,
# or a module of the package that fails to import, fails `make test` as a failing test would.
test: setup docs
	$(PY) -m pytest -q

test-fast: setup
	$(PY) -m pytest -q -m 'not slow and not tvm'

# The Ray and RLlib paths (tests/test_ray.py and tests/test_rllib.py skip them without Ray or RLlib): installs
# the ray and rllib extras, then runs them.
test-ray: setup
	$(PY) -m pip install --quiet -c constraints.txt -e '.[ray,rllib]'
	$(PY) -m pytest -q tests/test_ray.py tests/test_rllib.py

# The documentation site (mkdocs.yml) into site/: warnings are errors (--strict), internal links and their
# anchors are checked (mkdocs.yml, validation). The two variables silence the notices about MkDocs' future
# that mkdocs-gen-files and Material print at every build.
MKDOCS := DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs

docs: setup
	$(MKDOCS) build --strict --site-dir site

docs-serve: setup
	$(MKDOCS) serve

# Every figure of the results pages, from the shipped results files, into build/plots/ (the docs build
# makes the same figures itself).
plots: setup
	$(PY) examples/plot_results.py --out build/plots

bench: setup
	$(PY) examples/benchmarks/env_steps.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache site
