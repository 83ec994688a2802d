"""ctypes wrapper of cpuplan-shim's C ABI (include/cpuplan.h).

The library is found at $CPUPLAN_LIB, else as libcpuplan_shim.so on the loader's path.
Failures raise OSError(errno, message); an unpinned worker is not a failure.

    import cpuplan
    try:
        cpuplan.load()                  # $CPUPLAN_PLAN, /run/cpuplan/plan.json, or plan.env's variables
        print(cpuplan.pin_worker(0))    # "pinned to cpus 3 (...)" or "left unpinned: ..."
    except OSError as e:
        print("running unpinned:", e)
    cpuplan.Thread(target=work).start() # runs on the process mask, not this thread's CPUs
"""

import ctypes
import os
import threading

_WARM = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _open():
    lib = ctypes.CDLL(os.environ.get("CPUPLAN_LIB") or "libcpuplan_shim.so")
    for name, args in [
        ("cpuplan_load", [ctypes.c_char_p]),
        ("cpuplan_pin_worker", [ctypes.c_int]),
        ("cpuplan_pin_worker_warm", [ctypes.c_int, _WARM, ctypes.c_void_p]),
        ("cpuplan_pin_result", []),
        ("cpuplan_to_process_mask", []),
        ("cpuplan_usable", []),
        ("cpuplan_left", []),
        ("cpuplan_workers", []),
    ]:
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = ctypes.c_int
    for name in ("cpuplan_last_error", "cpuplan_last_why"):
        f = getattr(lib, name)
        f.argtypes = []
        f.restype = ctypes.c_char_p
    return lib


_lib = _open()


def _check(rc):
    """rc if it is not a negative errno; else OSError with the library's message."""
    if rc < 0:
        msg = _lib.cpuplan_last_error()
        raise OSError(-rc, msg.decode() if msg else os.strerror(-rc))
    return rc


def _why():
    w = _lib.cpuplan_last_why()
    return w.decode() if w else ""


def load(path=None):
    """Load and install the plan at path (None: $CPUPLAN_PLAN, /run/cpuplan/plan.json, else plan.env's variables)."""
    _check(_lib.cpuplan_load(None if path is None else os.fsencode(path)))


def pin_worker(i, warm=None):
    """Pin the calling thread to worker i's CPUs, calling warm() on the process mask just before; returns what was done."""
    if warm is None:
        _check(_lib.cpuplan_pin_worker(i))
    else:
        cb = _WARM(lambda _arg: warm())
        _check(_lib.cpuplan_pin_worker_warm(i, cb, None))
    return _why()


def pin_result():
    """Pin the calling thread to the API server's result CPUs; returns what was done."""
    _check(_lib.cpuplan_pin_result())
    return _why()


def to_process_mask():
    """Move the calling thread onto the process mask."""
    _check(_lib.cpuplan_to_process_mask())


def usable():
    """The plan's usable CPU count."""
    return _check(_lib.cpuplan_usable())


def left():
    """The plan's CPUs left for pools."""
    return _check(_lib.cpuplan_left())


def workers():
    """How many workers the plan lists."""
    return _check(_lib.cpuplan_workers())


class Thread(threading.Thread):
    """A threading.Thread that runs on the process mask, whatever its creator's mask."""

    def start(self):
        run = self.run

        def on_mask():
            to_process_mask()
            run()

        self.run = on_mask
        super().start()
