"""A named model from import to a checked, timed, tuned build: what ``tune-model`` and the benchmark run.

* :func:`load_model`: the model (:mod:`~schedule_gym.models.zoo`), imported (canonical Relax), its
  LSTM grid mapped to the fused form (:mod:`~schedule_gym.models.lstm`, where the model has one) and its
  sub-graphs mapped to tasks (:func:`~schedule_gym.models.mapping.map_model`).
* :func:`check_outputs`: a compiled model's outputs against PyTorch's on the same inputs.
* :func:`torch_latency`: PyTorch eager latency with a given number of threads.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from schedule_gym.models.importer import import_model
from schedule_gym.models.mapping import MappedModel, map_model

__all__ = ["LoadedModel", "check_outputs", "load_model", "torch_latency", "torch_outputs"]

#: outputs must agree with PyTorch's to this fraction of the largest |output| (float32 kernels that sum
#: thousands of products in another order differ by ~1e-6 relative; a wrong kernel differs by O(1))
RELATIVE_TOLERANCE = 1e-4


@dataclass
class LoadedModel:
    """A model ready to tune: its spec (module, inputs), canonical module, mapping and LSTM report."""

    spec: Any
    canonical: Any  # the canonical Relax module before mapping (the "TVM default" baseline builds it)
    mapped: MappedModel
    lstm: Any = None  # the LSTM mapping's report, if the model has LSTM cells

    def report_lines(self) -> list[str]:
        lines = []
        if self.lstm is not None:
            lines += [f"lstm     {line}" for line in _lines(self.lstm)]
        return lines + self.mapped.report.lines()


def _lines(report: Any) -> list[str]:
    if hasattr(report, "lines"):
        return list(report.lines())
    return [str(report)]


def load_model(name: str, seed: int = 0, map_lstm: bool = True) -> LoadedModel:
    """Build, import and map the zoo model ``name`` (see :data:`schedule_gym.models.zoo.MODELS`)."""
    from schedule_gym.models.zoo import build_model

    spec = build_model(name, seed=seed)
    canonical = import_model(spec.module, spec.inputs, name=name)
    mod, lstm_report = canonical, None
    if map_lstm:
        from schedule_gym.models import lstm

        cells = lstm.find_lstm_cells(canonical)
        if cells:
            mod, lstm_report = lstm.map_lstm(canonical)
    return LoadedModel(spec, canonical, map_model(mod), lstm_report)


def torch_outputs(spec: Any) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        out = spec.module(*spec.inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o.detach().numpy() for o in outs]


def check_outputs(outputs: list[np.ndarray], reference: list[np.ndarray]) -> str | None:
    """None if every output matches PyTorch's within :data:`RELATIVE_TOLERANCE` of its largest value."""
    if len(outputs) != len(reference):
        return f"{len(outputs)} outputs, PyTorch gives {len(reference)}"
    for i, (out, ref) in enumerate(zip(outputs, reference)):
        if out.shape != ref.shape:
            return f"output {i}: shape {out.shape}, PyTorch's {ref.shape}"
        scale = float(np.max(np.abs(ref))) or 1.0
        err = float(np.max(np.abs(out.astype(np.float64) - ref)))
        if not err <= RELATIVE_TOLERANCE * scale:
            return f"output {i}: max |error| {err:.3g} exceeds {RELATIVE_TOLERANCE:g} x max |output| {scale:.3g}"
    return None


def torch_latency(spec: Any, threads: int, repeat: int = 10, min_seconds: float = 0.2) -> list[float]:
    """Seconds per forward pass of PyTorch eager with ``threads`` threads: ``repeat`` means over at
    least ``min_seconds`` each, after one warm-up run."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.no_grad():
            spec.module(*spec.inputs)
            out = []
            for _ in range(repeat):
                n, start = 0, time.perf_counter()
                while True:
                    spec.module(*spec.inputs)
                    n += 1
                    elapsed = time.perf_counter() - start
                    if elapsed >= min_seconds:
                        break
                out.append(elapsed / n)
        return out
    finally:
        torch.set_num_threads(before)


def summary(times: list[float]) -> tuple[float, float]:
    """(min, median) of repeated timings."""
    return min(times), statistics.median(times)
