"""Real-hardware data shipped with the package (compressed record files, read with the replay backend).

* ``TABLES``: exhaustive tables, every config of one task measured on one machine, named by key;
* ``CALIBRATION``: the sample of GEMM 1024^3 configs the mock's default CPU profile was fitted to;
  ``CALIBRATION_ZNVER3``: the samples of four operators' tasks behind the Zen 3 profile;
  ``CALIBRATION_ZNVER4``: the samples of three operators' tasks behind the Zen 4 profile;
  ``CALIBRATION_SAPPHIRERAPIDS``: the samples of three operators' tasks behind the Intel Xeon profile.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from schedule_gym.tasks import Task, conv2d, gemm

__all__ = ["CALIBRATION", "CALIBRATION_SAPPHIRERAPIDS", "CALIBRATION_ZNVER3", "CALIBRATION_ZNVER4", "DATA_DIR", "TABLES", "Table", "get_table"]

DATA_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Table:
    key: str
    file: str
    task: Task
    machine: str

    @property
    def path(self) -> Path:
        return DATA_DIR / self.file


TABLES: dict[str, Table] = {
    "gemm-128-323-znver5-1t": Table(
        key="gemm-128-323-znver5-1t",
        file="gemm-128x128x128-323-znver5-1t.jsonl.gz",
        task=gemm(128, 128, 128, 3, 2, 3),
        machine="AMD Zen 5 (znver5), 1 thread, TVM 0.27 LLVM, template gemm-cpu-v1",
    ),
    "conv2d-14-k3-znver3-1t": Table(
        key="conv2d-14-k3-znver3-1t",
        file="conv2d-1x14x14x16-32-k3-s1-p1-1332112-znver3-1t.jsonl.gz",
        task=conv2d(1, 14, 14, 16, 32, 3, padding=1, splits=(1, 3, 3, 2, 1, 1, 2), name="conv2d-14-k3"),
        machine="AMD Zen 3 (znver3), 1 thread, TVM 0.27 LLVM, template conv2d-cpu-v1",
    ),
}

CALIBRATION = DATA_DIR / "calibration-gemm-1024.jsonl.gz"
#: 300 random configs each of resnet50/conv6, bert-base/attn-pv, bert-base/attn-qk and gemm-1024 measured on
#: a Zen 3 (2 threads): the sample the ``znver3-2core-fitted`` mock profile was fitted to
CALIBRATION_ZNVER3 = DATA_DIR / "calibration-znver3.jsonl.gz"
#: 300 random configs each of gemm-256, resnet50/conv6 and bert-base/attn-pv measured on a Zen 4 (2 threads):
#: the sample the ``znver4-2core-fitted`` mock profile was fitted to
CALIBRATION_ZNVER4 = DATA_DIR / "calibration-znver4.jsonl.gz"
#: 300 random configs each of gemm-256, resnet50/conv6 and bert-base/attn-pv measured on an Intel Xeon
#: (``sapphirerapids``, 2 threads): the sample the ``sapphirerapids-2core-fitted`` mock profile was fitted to
CALIBRATION_SAPPHIRERAPIDS = DATA_DIR / "calibration-sapphirerapids.jsonl.gz"


def get_table(key: str) -> Table:
    if not isinstance(key, str) or key not in TABLES:
        raise ValueError(f"unknown table {key!r}; shipped tables: {', '.join(TABLES)}")
    return TABLES[key]
