"""Whole models on a CUDA GPU, in one run: PyTorch eager (FP32, and with TF32) against TVM's CUDA build.

For each model (``schedule_gym.models.zoo``: random seeded weights, batch 1) it imports the model as the
CPU pipeline does (``load_model``: ``torch.export``, Relax, the canonical form), then:

* ``torch-fp32``: PyTorch eager on the GPU with TF32 off (``torch.backends.cuda.matmul.allow_tf32`` and
  ``torch.backends.cudnn.allow_tf32`` false): the same arithmetic as TVM's FP32 kernels;
* ``torch-tf32``: the same with TF32 allowed (tensor cores, 10-bit mantissas), for scale;
* ``tvm-cuda``: the canonical module compiled by ``tvm.compile`` for this GPU's ``sm_XX`` with TVM's
  default CUDA pipeline: dlight's GPU rules (matmul, GEMV, reductions, a fallback for the rest) schedule
  every function; no tuning, no library calls (the PyPI wheel has no cuBLAS or cuDNN offload).

Every build's outputs are checked against PyTorch's CPU outputs (``check_outputs``, the CPU pipeline's
tolerance) before it is timed. PyTorch is timed with CUDA events, TVM with the Relax VM's
``time_evaluator`` on the GPU; each of ``--repeat`` timings is the mean of ``--number`` calls after 10
warm-up calls; min and median are reported. The tuned CPU templates are not in these builds: the CUDA
templates build GEMM, conv2d and batch matmul without epilogues, and no model's tasks are tuned on a GPU.

    python examples/benchmarks/models_cuda.py --models bert-base resnet18 --out OUT.json
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import statistics
import subprocess
import time


def _gpu_description(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    info = {"gpu": props.name, "multiprocessors": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
            "cuda": torch.version.cuda}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        info["driver_and_max_sm_clock"] = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        info["driver_and_max_sm_clock"] = f"nvidia-smi failed: {exc}"
    return info


def _torch_times(torch, module, inputs, number: int, repeat: int) -> list[float]:
    """Seconds per forward pass: ``repeat`` means of ``number`` calls, CUDA-event timed."""
    with torch.no_grad():
        for _ in range(10):
            module(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(number):
                module(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3 / number)
    return times


def _row(label: str, times: list[float], **extra) -> dict:
    best, median = min(times), statistics.median(times)
    print(f"  {label:<11} {median * 1e3:9.3f} ms median, {best * 1e3:9.3f} min  {extra.get('note', '')}")
    return {"build": label, "median_s": median, "min_s": best, "times_s": times, **extra}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert-base", "resnet18"])
    parser.add_argument("--number", type=int, default=20, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    args = parser.parse_args()

    import numpy as np
    import torch
    import tvm
    from torch.utils import _pytree as pytree

    from schedule_gym.backends.tvm.targets import resolve_target
    from schedule_gym.hardware import cpu_name
    from schedule_gym.models.build import run_model, virtual_machine
    from schedule_gym.models.pipeline import check_outputs, load_model, output_errors, torch_outputs

    if not torch.cuda.is_available() or not tvm.cuda(0).exist:
        raise SystemExit("no CUDA GPU visible to torch and TVM: nothing to measure")
    dev = tvm.cuda(0)
    target = tvm.target.Target(resolve_target("cuda"))  # this GPU's arch
    machine = {**_gpu_description(torch), "host_cpu": cpu_name(), "tvm": tvm.__version__, "target": str(target),
               "date": datetime.date.today().isoformat()}
    print(json.dumps(machine))
    results = {"machine": machine, "models": {}}
    for name in args.models:
        t0 = time.perf_counter()
        loaded = load_model(name)
        spec = loaded.spec
        reference = torch_outputs(spec)  # PyTorch on the CPU, FP32
        print(f"{name}: imported in {time.perf_counter() - t0:.1f} s")
        rows = []

        gpu_module = copy.deepcopy(spec.module).cuda().eval()
        gpu_inputs = tuple(x.cuda() for x in spec.inputs)
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
            with torch.no_grad():
                out = gpu_module(*gpu_inputs)
            outputs = [t.detach().cpu().numpy() for t in pytree.tree_flatten(out)[0]]
            problem = check_outputs(outputs, reference)
            errors = output_errors(outputs, reference)
            times = _torch_times(torch, gpu_module, gpu_inputs, args.number, args.repeat)
            rows.append(_row("torch-tf32" if tf32 else "torch-fp32", times, check=problem or "ok",
                             max_abs_error=[e for e, _ in errors],
                             note="" if problem is None else f"(outputs: {problem})"))
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        t0 = time.perf_counter()
        executable = tvm.compile(loaded.canonical, target=target)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        vm = virtual_machine(executable, dev)  # loads the CUDA module: nvcc compiles its kernels here
        outputs = run_model(vm, spec.inputs, dev)  # the first run, its outputs copied back
        load_s = time.perf_counter() - t0
        problem = check_outputs(outputs, reference)
        errors = output_errors(outputs, reference)
        args_tvm = [tvm.runtime.tensor(np.ascontiguousarray(x.numpy()), dev) for x in spec.inputs]
        timer = vm.time_evaluator("main", dev, number=args.number, repeat=args.repeat)
        for _ in range(10):
            vm["main"](*args_tvm)
        times = list(timer(*args_tvm).results)
        rows.append(_row("tvm-cuda", times, check=problem or "ok", build_s=build_s, load_s=load_s,
                         max_abs_error=[e for e, _ in errors],
                         note=f"(build {build_s:.1f} s, load {load_s:.1f} s"
                              + ("" if problem is None else f"; outputs: {problem}") + ")"))
        fp32 = rows[0]["median_s"]
        for row in rows:
            row["speedup_vs_torch_fp32"] = fp32 / row["median_s"]
        print(f"  tvm-cuda / torch-fp32 speed-up (median): {rows[0]['median_s'] / rows[-1]['median_s']:.2f}x")
        results["models"][name] = rows
        del gpu_module, gpu_inputs, vm
        torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
