"""One RPC session as a device measures on it, and the references to its remote objects, let go of with the
GIL released.

Freeing the last reference to a remote object (a module, a function, a tensor, the session itself) asks its
server to free it and waits for the answer. ``tvm_ffi`` does that in the Python wrapper's destructor with the
GIL held, so a device thread that lets go of a remote object while its server has stopped answering freezes
every thread of the process, the one that enforces the run deadlines included (a session is dropped at its
deadline only if that thread runs). :class:`RemoteRefs` holds a C++ reference of its own to each remote
object a device thread makes and lets go of them through ``ctypes``, which releases the GIL for the call: the
Python wrappers die first without a remote call, and the last reference's free blocks only the thread that
lets go of it.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from schedule_gym.backends.tvm.builder import Built

__all__ = ["RPCDevice", "RemoteRefs"]

T = TypeVar("T")

_LIB: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    """``libtvm_ffi`` through ctypes (the copy ``tvm_ffi`` already loaded): its calls release the GIL."""
    global _LIB
    if _LIB is None:
        from tvm_ffi.libinfo import find_libtvm_ffi

        lib = ctypes.CDLL(find_libtvm_ffi())
        for name in ("TVMFFIObjectIncRef", "TVMFFIObjectDecRef"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_int
        _LIB = lib
    return _LIB


class RemoteRefs:
    """A C++ reference to each object :meth:`hold` is given, all dropped by :meth:`release`.

    Contract: :meth:`release` runs only once no Python wrapper of the held objects is left (their last
    reference must be the held one, or the wrapper's destructor makes the remote call with the GIL held);
    it may block for as long as the server takes to answer, with the GIL released.
    """

    def __init__(self) -> None:
        self._handles: list[int] = []

    def hold(self, obj: T) -> T:
        """Take a reference to the ``tvm_ffi`` object ``obj`` (returned, for use in an expression)."""
        handle = obj.__ctypes_handle__().value  # type: ignore[attr-defined]
        if not handle:
            raise ValueError(f"{type(obj).__name__} has no object handle to hold")
        _lib().TVMFFIObjectIncRef(handle)
        self._handles.append(handle)
        return obj

    def hold_all(self, objs: Any) -> None:
        """:meth:`hold` each object of the iterable ``objs``."""
        for obj in objs:
            self.hold(obj)

    def release(self) -> None:
        """Drop every held reference, newest first, with the GIL released (see the class's contract)."""
        lib = _lib()
        while self._handles:
            lib.TVMFFIObjectDecRef(self._handles.pop())


class RPCDevice:
    """One RPC session, the task inputs already uploaded to it, and the run it is busy with.

    Every remote object made on the session is held in :class:`RemoteRefs` and let go of with the GIL
    released (:meth:`release`, :meth:`forget_inputs`, :meth:`end_run`): see
    the module's docstring for why.
    """

    def __init__(self, session: Any, name: str) -> None:
        self.session = session
        self.name = name
        #: the current task's inputs (by its key) and those laid out for its kernels (by key and layout)
        self.inputs: dict[Any, Any] = {}
        #: (position, built, monotonic deadline) of the run in flight, or None
        self.current: tuple[int, Built, float] | None = None
        #: set when the session was dropped: whatever its thread finds later is discarded
        self.dropped = False
        #: the server's file functions (fetched on the first run), and the references to the remote objects
        #: of the session (the session and its file functions), of ``inputs`` and of the run in flight
        self._files: dict[str, Any] = {}
        self._session_refs, self._input_refs, self.run_refs = RemoteRefs(), RemoteRefs(), RemoteRefs()
        self._session_refs.hold(session._sess)

    def _file_function(self, name: str) -> Any:
        if name not in self._files:
            self._files[name] = self._session_refs.hold(self.session.get_function(f"tvm.rpc.server.{name}"))
        return self._files[name]

    def upload(self, data: bytes | bytearray, name: str) -> None:
        """``data`` as the file ``name`` in the server's folder (``RPCSession.upload``'s call)."""
        self._file_function("upload")(name, data)

    def remove(self, name: str) -> None:
        self._file_function("remove")(name)

    def keep_inputs(self, key: Any, inputs: tuple[list[Any], Any, Any]) -> None:
        """Store ``inputs`` (device arrays, expected output, tolerance) under ``key``."""
        self._input_refs.hold_all(inputs[0])
        self.inputs[key] = inputs

    def forget_inputs(self) -> None:
        """Let go of every stored input (blocks while the server does not answer)."""
        self.inputs = {}
        self._input_refs.release()

    def end_run(self) -> None:
        """Let go of the remote objects of the run just finished (none of them may be referenced here)."""
        self.run_refs.release()

    def release(self) -> None:
        """Let go of the session and everything made on it, once nothing on this process uses them (blocks
        while the server does not answer)."""
        self.session, self._files, self.inputs = None, {}, {}
        for refs in (self.run_refs, self._input_refs, self._session_refs):
            refs.release()
