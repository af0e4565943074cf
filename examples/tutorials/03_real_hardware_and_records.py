"""Measure on real hardware and resume from the record file

The `"tvm"` backend compiles every config a search proposes with TVM, checks the kernel against NumPy on
seeded inputs, and times it on this CPU. Every measurement is appended to a JSON-lines record file as
soon as it is known, so a run that is stopped, or run again, measures nothing twice. This tutorial tunes
a tiny GEMM (64x64x64) so that it runs in a short time; needs the `tvm` extra.

    python examples/tutorials/03_real_hardware_and_records.py [--out runs/tutorial-records]
"""

# %% [markdown]
# ## A tuning run on real kernels
# Any environment takes `backend="tvm"`; `backend_options={"records": path}` makes the backend read the
# record file first and append every new measurement to it. Here the G-BFS agent (Zhang et al.,
# Algorithm 1) drives the environment's measurement session for 12 measurements.

import argparse
import tempfile
from pathlib import Path

import schedule_gym  # noqa: F401  (registers the environments)
from schedule_gym.agents import make_agent
from schedule_gym.envs import TilingEnv
from schedule_gym.records import RecordStore
from schedule_gym.tasks import gemm

parser = argparse.ArgumentParser()
parser.add_argument("--out", default=None, help="folder for the record file (default: a temporary folder)")
out = Path(parser.parse_args().out or tempfile.mkdtemp(prefix="schedule-gym-tutorial-"))
out.mkdir(parents=True, exist_ok=True)
records = out / "gemm-64.jsonl"

task = gemm(64, 64, 64)
BUDGET = 12


def tune() -> None:
    env = TilingEnv(task, backend="tvm", backend_options={"records": str(records), "num_threads": 1})
    try:
        result = make_agent("gbfs", seed=0).run(env, BUDGET)
    finally:
        env.close()  # stops the build workers and the runner
    failed = sum(1 for row in result.history if row.latency_s is None)
    print(f"best {result.best_gflops:.2f} GFLOP/s at {result.best_config}; {result.num_measurements} configs, {failed} failed")


tune()
lines = len(records.read_text().splitlines())
print(f"{records}: {lines} records")

# %% [markdown]
# ## What a record holds
# A record is keyed by the task, the target (this CPU, as LLVM names it), the template version and the
# config; it holds the measurement protocol, the timings or the error, the host and the time.

store = RecordStore(records)
first = store.records_of(task)[0]
print(f"target {first.target}, template {first.template}, config {first.result.config}, latency {first.result.latency_s} s")

# %% [markdown]
# ## Resuming
# The same seeded run again: every config the agent asks for is already in the file, so it is replayed
# and nothing is compiled or timed. A run that was stopped half-way continues where it stopped.

tune()
assert len(records.read_text().splitlines()) == lines, "the second run measured again"
print(f"{records}: still {lines} records: the second run measured nothing")
