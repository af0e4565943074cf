"""The live display of a ``tune`` run: a progress bar on a terminal, plain lines elsewhere."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["TuneProgress", "format_gflops"]


def format_gflops(flops: int, latency_s: float | None) -> str:
    """``flops`` operations in ``latency_s`` seconds as GFLOP/s text (``-`` for no latency)."""
    return "-" if latency_s is None else f"{flops / latency_s * 1e-9:,.1f} GFLOP/s"


class TuneProgress:
    """The live display of a run, fed by the agent's progress callback.

    On a terminal: a rich progress bar (measurements / budget, best GFLOP/s, failures, elapsed, ETA).
    Elsewhere (a log file, a pipe), or without rich: a plain line at every tenth of the budget.
    """

    def __init__(self, title: str, flops: int, limit: int | None, seconds: float | None, quiet: bool) -> None:
        self.title, self.flops, self.limit, self.seconds, self.quiet = title, flops, limit, seconds, quiet
        self.failed = 0
        self._bar: Any = None
        self._id: Any = None
        self._next_line = 0.0

    def __enter__(self) -> TuneProgress:
        if self.quiet or not sys.stderr.isatty():
            return self
        try:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
        except ImportError:  # the cli extra is not installed: plain lines
            return self
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(bar_width=16), TextColumn("{task.fields[count]}"),
            TextColumn("best [bold]{task.fields[best]}[/]"), TextColumn("{task.fields[failed]}"),
            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        total = self.limit if self.limit is not None else self.seconds
        self._id = self._bar.add_task(self.title, total=total, count=self._count(0, 0.0), best="-", failed="")
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def _count(self, n: int, wall_s: float) -> str:
        if self.limit is not None:
            return f"{n}/{self.limit}"
        return f"{n}, {wall_s:.0f}/{self.seconds:.0f} s"

    def __call__(self, row: Any, limit: int | None) -> None:
        if row.latency_s is None:
            self.failed += 1
        if self.quiet:
            return
        best = format_gflops(self.flops, row.best_latency_s)
        failed = f"{self.failed} failed" if self.failed else ""
        if self._bar is not None:
            done = row.n if self.limit is not None else min(row.wall_s, self.seconds or row.wall_s)
            self._bar.update(self._id, completed=done, count=self._count(row.n, row.wall_s), best=best, failed=failed)
            return
        share = row.n / self.limit if self.limit else row.wall_s / (self.seconds or 1.0)
        if share >= self._next_line or row.n == 1:
            self._next_line = (int(share * 10) + 1) / 10
            count = f"{row.n}/{self.limit}" if self.limit is not None else f"{row.n}"
            budget = "" if self.limit is not None else f" of {self.seconds:g}"
            print(f"[{self.title}] {count} configs after {row.wall_s:.1f}{budget} s, best {best}"
                  + (f", {failed}" if failed else ""), file=sys.stderr, flush=True)
