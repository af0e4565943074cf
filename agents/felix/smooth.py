"""Smooth versions of the non-differentiable operators the features use (Zhao et al., Section 3.3).

f_smooth = f convolved with a kernel. The paper's kernel is ``phi(t) = 1 / (1 + t^2)`` (a Cauchy density
up to ``1/pi``); its heavy tails keep gradients alive far from the kink. Temperatures ``tau`` are in the
units of the argument (log units for the features).
"""

from __future__ import annotations

import math

import torch

__all__ = ["is_one_gate", "smooth_max", "smooth_min", "smooth_relu", "smooth_step"]


def smooth_step(x: torch.Tensor, tau: float) -> torch.Tensor:
    """``select(x > 0, 1, 0)`` convolved with the paper's kernel ``phi(t / tau) / (pi tau)``.

    That is ``1/2 + atan(x / tau) / pi``.
    """
    return 0.5 + torch.atan(x / tau) / math.pi


def smooth_relu(x: torch.Tensor, tau: float) -> torch.Tensor:
    """``max(x, 0)`` smoothed: ``(x + sqrt(x^2 + tau^2)) / 2``.

    Convolving ``max(x, 0)`` with the paper's Cauchy kernel itself diverges (its tails are too heavy for
    a function that grows linearly), so this is the convolution with the next kernel of the same family,
    ``tau^2 / (2 (t^2 + tau^2)^{3/2})``: also rational-tailed (gradients never vanish, unlike a softplus's
    exponential tail), exact as ``|x| / tau -> inf``, and off by ``tau / 2`` at the kink.
    """
    return 0.5 * (x + torch.sqrt(x * x + tau * tau))


def smooth_max(a: torch.Tensor, b: torch.Tensor | float, tau: float) -> torch.Tensor:
    """``max(a, b) = b + max(a - b, 0)``, smoothed with :func:`smooth_relu`."""
    return b + smooth_relu(a - b, tau)


def smooth_min(a: torch.Tensor, b: torch.Tensor | float, tau: float) -> torch.Tensor:
    """``min(a, b) = a - max(a - b, 0)``, smoothed with :func:`smooth_relu`."""
    return a - smooth_relu(a - b, tau)


def is_one_gate(log_x: torch.Tensor, tau: float) -> torch.Tensor:
    """``select(x == 1, 1, 0)`` for ``x = e^{log_x}``: the paper's kernel itself, ``phi(log_x / tau)``."""
    return 1.0 / (1.0 + (log_x / tau) ** 2)
