"""Starting threads, and moving the threads a step passes through onto their CPUs.

A step passes between the worker's main thread, its GPU thread and its plan thread several
times (submit, launch, done, commit, plan ready), and each handoff blocks one thread and
wakes another. On a host with deep idle states a thread woken on another core first waits for
that core to leave C6 (130-175 us on the B300 host this was measured on); woken on a core
that is already running, it starts at once. The API server's result threads hand every
step's tokens on the same way. step_thread_core (cpuplan.cpus) pins them.

A new thread starts with its creator's CPU mask, so a thread or pool that a pinned thread
starts would share its CPU. Thread and ThreadPool start theirs on the process mask: the
installed plan's mask (cpuplan.cpus.install), else cpuplan.cpus.process_mask().

This module is ``mstar.utils.threads``, name for name. On Linux
``os.sched_setaffinity(0, ...)`` sets the calling thread's mask, which is all that pinning
needs.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional

from . import cpus as _cpus
from .cpus import format_cpu_list

__all__ = ["Thread", "ThreadPool", "pin_thread"]

log = logging.getLogger("cpuplan")


def _to_process_mask() -> None:
    """Move the calling thread onto the process mask; if the kernel refuses, log a warning and stay."""
    mask = _cpus._thread_mask()
    try:
        os.sched_setaffinity(0, mask)
    except OSError as e:
        log.warning("cpuplan: a thread stays on its creator's cpus: sched_setaffinity to %s: %s", format_cpu_list(mask), e)


def _default_warm() -> None:
    """Start the intra-op pool of an already imported torch with one op as wide as the pool; nothing without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    threads = max(1, int(torch.get_num_threads()))
    # A reduction over `threads` rows of 2**15 elements splits into one chunk per pool thread.
    torch.ones(threads, 1 << 15).sum()


def _pin(cpus: Iterable[int], process_mask: Iterable[int], warm: Callable[[], object]) -> None:
    """pin_thread with warm as the op that starts the thread's pool on the process mask."""
    target = frozenset(cpus)
    mask = frozenset(process_mask)
    if not target:
        raise ValueError("cannot pin a thread to an empty cpu set")
    outside = target - mask
    if outside:
        raise ValueError(
            f"cpus {format_cpu_list(target)} are not all in the process mask {format_cpu_list(mask)} "
            f"(outside it: {format_cpu_list(outside)})"
        )
    os.sched_setaffinity(0, mask)
    warm()
    os.sched_setaffinity(0, target)
    got = frozenset(os.sched_getaffinity(0))
    if got != target:
        raise OSError(
            errno.EINVAL,
            f"asked to run on cpus {format_cpu_list(target)}, the kernel allows only {format_cpu_list(got)} of them",
        )


def pin_thread(cpus, process_mask) -> None:  # type: ignore[no-untyped-def]
    """Confine the calling thread to cpus.

    A thread's intra-op (OpenMP) pool is started by its first parallel op with the mask the
    thread has then, and a pool confined to one CPU runs a parallel op many times slower. So
    go back to the process mask first (the main thread, already confined, starts the GPU and
    plan threads), start the pool there with one op as wide as the pool, and only then move.

    That op is one torch reduction over torch.get_num_threads() chunks when torch is already
    imported, else nothing (``cpuplan.pin_thread_warm`` takes another). cpus must be in
    process_mask (ValueError), and the kernel must grant all of them (OSError otherwise).
    """
    _pin(cpus, process_mask, _default_warm)


class Thread(threading.Thread):
    """A threading.Thread that runs on the process mask, whatever its creator's and whatever its run is: a target, an override that doesn't call super().run(), a mixin's. Wrapped at start so that calling run directly stays on the caller's thread and mask."""

    def start(self) -> None:
        """Start the thread's activity.

        It must be called at most once per thread object. It arranges for the object's run()
        method to be invoked in a separate thread of control, on the process mask.

        This method will raise a RuntimeError if called more than once on the same thread object.
        """
        run = self.run

        def on_process_mask() -> None:
            if threading.current_thread() is self:
                if self.__dict__.get("run") is on_process_mask:
                    del self.__dict__["run"]
                _to_process_mask()
            run()

        self.run = on_process_mask  # type: ignore[method-assign]
        try:
            super().start()
        except BaseException:
            if self.__dict__.get("run") is on_process_mask:
                del self.__dict__["run"]
            raise


class _OnProcessMask:
    """A pool initializer that moves its thread onto the process mask, then runs the user's initializer."""

    def __init__(self, initializer: Optional[Callable[..., object]]) -> None:
        """Wrap initializer (None: only the move)."""
        self.initializer = initializer

    def __call__(self, *args: Any) -> None:
        """Move onto the process mask, then run the initializer with args."""
        _to_process_mask()
        if self.initializer is not None:
            self.initializer(*args)


class ThreadPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose threads run on the process mask before initializer, whatever the mask of the thread that started them."""

    def __init__(
        self,
        max_workers: int | None = None,
        thread_name_prefix: str = "",
        initializer: Callable[..., object] | None = None,
        initargs: tuple = (),
    ) -> None:
        """As ThreadPoolExecutor; each new thread moves onto the process mask, then runs initializer(*initargs)."""
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        super().__init__(max_workers, thread_name_prefix, _OnProcessMask(initializer), initargs)
