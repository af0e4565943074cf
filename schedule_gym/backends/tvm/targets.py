"""Targets: TVM target dicts resolved and checked, their record keys, and the cores this process may use.

An LLVM target always names a CPU LLVM knows: TVM silently builds generic SSE code for a missing or
unknown ``mcpu``, so a target that would fall back to ``generic`` raises instead.
"""

from __future__ import annotations

import json
import os

__all__ = ["device_of", "host_llvm_target", "kind_of_key", "resolve_target", "target_key", "usable_cores",
           "usable_cpus"]


def usable_cpus() -> frozenset[int] | None:
    """The CPUs this process may run on (its affinity, as a user's ``taskset`` or a cluster scheduler set
    it), or None where the operating system does not tell."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return None


def usable_cores() -> int:
    """How many cores this process may run on: its affinity where the system tells, else every core."""
    cpus = usable_cpus()
    return len(cpus) if cpus else (os.cpu_count() or 1)


def host_llvm_target(num_cores: int | None = None) -> dict:
    """The LLVM target of this machine's CPU; raises rather than fall back to ``generic``."""
    import tvm

    detected = tvm.target.Target.from_device("cpu")
    cpu = str(detected.attrs.get("mcpu", "")) or tvm.target.codegen.llvm_get_system_cpu()
    triple = _host_triple()
    if not cpu or cpu == "generic" or not tvm.target.codegen.llvm_is_valid_cpu(cpu, triple):
        raise RuntimeError(
            f"could not detect this machine's CPU for LLVM (got {cpu!r}); pass an explicit target such as "
            "{'kind': 'llvm', 'mcpu': 'skylake-avx512'}: TVM would silently build generic SSE code"
        )
    target = {"kind": "llvm", "mcpu": cpu, "mtriple": triple}
    if num_cores:
        target["num-cores"] = int(num_cores)
    return target


def _host_triple() -> str:
    import tvm

    return str(tvm.target.Target.from_device("cpu").attrs.get("mtriple", "x86_64-linux-gnu"))


def resolve_target(target: str | dict, num_threads: int | None = None) -> dict:
    """A target as a TVM target dict, checked: ``"llvm"`` (this CPU), ``"cuda"``, or a dict."""
    import tvm

    if target == "llvm":
        return host_llvm_target(num_threads)
    if target == "cuda":
        return {"kind": "cuda", "arch": _cuda_arch()}
    if isinstance(target, dict):
        kind = target.get("kind")
        if kind == "llvm":
            cpu, triple = target.get("mcpu"), target.get("mtriple") or _host_triple()
            if not cpu or not tvm.target.codegen.llvm_is_valid_cpu(str(cpu), str(triple)):
                raise ValueError(
                    f"LLVM does not know the CPU {cpu!r} for {triple!r}; TVM would silently build generic code. "
                    f"This machine is {tvm.target.codegen.llvm_get_system_cpu()!r}"
                )
            out = dict(target)
            out.setdefault("mtriple", triple)
            if num_threads and "num-cores" not in out:
                out["num-cores"] = int(num_threads)
            return out
        if kind == "cuda":
            out = dict(target)
            out.setdefault("arch", _cuda_arch())
            return out
        raise ValueError(f"unknown target kind {kind!r} in {target!r}; known kinds: 'llvm', 'cuda'")
    raise ValueError(f"unknown target {target!r}; use 'llvm' (this CPU), 'cuda', or a TVM target dict")


def _cuda_arch() -> str:
    """This machine's GPU architecture; where no GPU is present (a build-only machine), Hopper's."""
    import tvm

    dev = tvm.cuda(0)
    if dev.exist:
        return "sm_" + str(dev.compute_version).replace(".", "")
    return "sm_90"


def target_key(target: dict, num_threads: int | None) -> str:
    """The target as records name it: its dict as canonical JSON, with the timing threads for a CPU."""
    key = json.dumps(target, sort_keys=True, separators=(",", ":"))
    return f"{key};threads={num_threads}" if target.get("kind") == "llvm" else key


def kind_of_key(key: str) -> str | None:
    """The target kind (``"llvm"``, ``"cuda"``) a :func:`target_key` names, or None for a key it did not make."""
    try:
        target = json.loads(key.split(";threads=")[0])
    except ValueError:
        return None
    return target.get("kind") if isinstance(target, dict) else None


def device_of(target: dict) -> str:
    """The TVM device kind a target's kernels run on: ``"cpu"`` for LLVM, else ``"cuda"``."""
    return "cpu" if target["kind"] == "llvm" else "cuda"
