"""The results pages' generated parts (docs/results/): every figure of examples/plot_results.py, drawn from
the shipped results files at each build into results/figures/, the leaderboard's tables from
leaderboard/v0.jsonl and leaderboard/v1.jsonl (included into results/leaderboard.md from build/docs-snippets/), and
the whole models' standing per CPU from examples/results/models/ (included into results/models.md)."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import mkdocs_gen_files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import plot_results  # noqa: E402
from leaderboard_table import table, tables  # noqa: E402
from models_table import standings, table as models_table  # noqa: E402

for name, fig in plot_results.figures():
    buffer = io.BytesIO()
    plot_results.save(fig, buffer)
    with mkdocs_gen_files.open(f"results/figures/{name}.png", "wb") as f:
        f.write(buffer.getvalue())

snippets = ROOT / "build" / "docs-snippets"
snippets.mkdir(parents=True, exist_ok=True)
(snippets / "leaderboard-v0.md").write_text(table(plot_results.LEADERBOARD) + "\n")
(snippets / "leaderboard-v1.md").write_text(tables(plot_results.LEADERBOARD_V1) + "\n")
(snippets / "models-standing.md").write_text(models_table(standings()) + "\n")
