"""Whole models: from a PyTorch model to tuned kernels and back.

| module      | what it does                                                                                  |
|-------------|-----------------------------------------------------------------------------------------------|
| zoo         | the models, in plain PyTorch with random seeded weights (ResNet-18/50, MobileNet-V2, BERT-base encoder, PTB LSTM) |
| importer    | ``torch.export`` + TVM Relax import, brought to a canonical form (batch norm, constants folded) |
| mapping     | optimization mapping (Xiao et al.): patterns as data, sub-graphs mapped to schedule-gym tasks  |
| lstm        | the paper's LSTM case: native cells found as a 2-D grid and mapped to the fused, merged form   |
| lstm_match  | its matching half: the native cell as a pattern, cells found, the layers x steps grid          |
| lstm_rewrite| its rewriting half: a grid replaced by the fused form                                        |
| scheduler   | Ansor's gradient task scheduler: a measurement budget spread over a model's tasks             |
| tuning      | ``tune_model``: the scheduler's rounds, any agent per task, one shared record file            |
| build       | tuned kernels put back, the model compiled (default schedules for the rest), run and timed    |
| pipeline    | the model contract; any module, zoo name or factory loaded; outputs checked against PyTorch   |
| compiled    | ``compile_torch``: one call from a PyTorch module to a tuned, compiled, checked callable       |
| dynamo      | ``torch_backend``: a ``torch.compile`` backend (also registered as ``"schedule_gym"``)        |
| env         | ``Model-v0``: an environment whose episode visits a model's tasks                             |

The ``schedule-gym tune-model`` command is :mod:`schedule_gym.cli.tune_model`. TVM and PyTorch are imported
when a function needs them, not by importing this package (``torch_backend`` imports PyTorch when first used).
"""

from typing import Any

from schedule_gym.models.compiled import CompiledModel, CompileReport, compile_torch

__all__ = ["CompileReport", "CompiledModel", "compile_torch", "torch_backend"]


def __getattr__(name: str) -> Any:
    if name == "torch_backend":  # its module defines a torch.nn.Module, so it imports PyTorch
        from schedule_gym.models.dynamo import torch_backend

        return torch_backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
