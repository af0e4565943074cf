"""Backends that measure TVM-compiled kernels, split as MetaSchedule splits measurement.

* :mod:`~schedule_gym.backends.tvm.protocol`: :class:`MeasureProtocol` (how a kernel is checked, timed
  and censored), stored with every record;
* :mod:`~schedule_gym.backends.tvm.targets`: target dicts resolved and checked, their record keys, the
  cores this process may use;
* :mod:`~schedule_gym.backends.tvm.workers`: the build and runner processes (isolated workers, the zygote
  that forks runners, the runners' environment);
* :mod:`~schedule_gym.backends.tvm.builder`: building, linking and compiling CUDA source, build directories;
* :mod:`~schedule_gym.backends.tvm.runner`: what runs in the runner process (inputs, first run, check, timing);
* :mod:`~schedule_gym.backends.tvm.export`: exported kernels and :class:`KernelTarget`;
* :mod:`~schedule_gym.backends.tvm.backend`: :class:`TVMBackend` (this machine's CPU or GPU);
* :mod:`~schedule_gym.backends.tvm.rpc`: :class:`RPCBackend` (devices behind a TVM RPC tracker).

Importing these modules does not import TVM; building, running and resolving a target do.
"""
