"""Tune a whole model

From a PyTorch model to tuned kernels and back: the model is captured with `torch.export`, imported into
TVM Relax, its convolutions and matmuls are mapped to schedule-gym tasks, a task scheduler spreads the
measurement budget over them (at least one round of measurements per task), and the tuned kernels are put back and checked against PyTorch. This
tutorial uses `tiny-cnn`, a small ResNet-style network from the model zoo, with the mock backend for the
search; the rebuilt model runs for real. Needs the `tvm` extra.

    python examples/tutorials/04_tune_a_whole_model.py
"""

# %% [markdown]
# ## The command line
# `schedule-gym tune-model` does every step and prints the mapping report, a line per scheduler round and
# the check against PyTorch. `--backend tvm` measures real kernels instead of scoring the mock model (the
# same command then resumes from its record file).

import json
import tempfile
from pathlib import Path

from schedule_gym.cli import main

out = Path(tempfile.mkdtemp(prefix="schedule-gym-tutorial-")) / "tiny-cnn.json"
code = main(["tune-model", "--model", "tiny-cnn", "--budget", "48", "--agent", "random", "--backend", "mock",
             "--threads", "1", "--repeat", "2", "--result", str(out)])
assert code == 0
result = json.loads(out.read_text())
print(f"check: {result['check']}; {result['measurements']} measurements")

# %% [markdown]
# ## The same steps in Python
# `load_model` builds the model from its definition (random seeded weights), imports it and maps its
# sub-graphs to tasks; `tune_model` runs the task scheduler with any tile agent on any backend. Each task
# carries its weight: how often the network runs it.

from schedule_gym.models.pipeline import load_model  # noqa: E402
from schedule_gym.models.tuning import tune_model  # noqa: E402

loaded = load_model("tiny-cnn")
for line in loaded.report_lines()[:6]:
    print(line)
for model_task in loaded.mapped.tasks:
    print(f"  task {model_task.task.name} x{model_task.weight}")

# 48 measurements over tiny-cnn's six tasks: the default round (16, lowered to 8 here) gives each task one
tuned = tune_model(loaded.mapped, 48, agent="gbfs", backend="mock")
print(f"{tuned.measurements} measurements; estimated kernel time {tuned.estimated_latency_s * 1e3:.3f} ms")
for task_name, config in tuned.configs.items():
    print(f"  {task_name}: {config}")
