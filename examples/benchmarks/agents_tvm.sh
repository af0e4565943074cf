#!/bin/bash
# Every agent on real TVM kernels: GEMM 1024^3 on this CPU, 900 measurements each (0.1% of the space),
# seed 0, one after another, each followed by NumPy (OpenBLAS Haswell and AVX-512 kernels) and torch
# timed in the same run. Records and results go to runs/agents-tvm/; running it again resumes.
#
#     bash examples/benchmarks/agents_tvm.sh [agents...]      (default: gbfs na2c random felix nn)
set -u
cd "$(dirname "$0")/../.."
mkdir -p runs/agents-tvm
for agent in ${@:-gbfs na2c random felix nn}; do
  echo "=== $agent $(date -u +%H:%M:%S)"
  .venv/bin/schedule-gym tune --task gemm-1024 --agent "$agent" --backend tvm --budget 900 --seed 0 \
    --records "runs/agents-tvm/$agent.jsonl" --result "runs/agents-tvm/$agent.json" --torch --quiet
  echo "=== $agent exit $? $(date -u +%H:%M:%S)"
done
