"""Starting threads, and moving the threads a step passes through onto their CPUs.

``mstar.utils.threads``'s API. A new thread starts with its creator's CPU mask, so a
thread or pool that a pinned thread starts would share its CPU. Thread and ThreadPool start
theirs on the process mask: the mask of this process's plan (``cpuplan.plan().mask``: the
installed plan, else the hook's, else the mask of the thread that imported cpuplan).

On Linux ``os.sched_setaffinity(0, ...)`` sets the calling thread's mask, which is all that
pinning needs; the CPUs come from the Rust planner.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional, Tuple

from . import cpus as _cpus
from .cpus import CpuPlan, StepCpus, format_cpu_list
from .devices import Device, Worker, find_worker

__all__ = ["Thread", "ThreadPool", "pin_result", "pin_thread", "pin_worker", "to_process_mask"]

log = logging.getLogger("cpuplan")


def to_process_mask() -> None:
    """Move the calling thread onto the process mask (plan().mask); if the kernel refuses, log a warning and stay."""
    mask = _cpus.plan().mask
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


def pin_thread(
    cpus: Iterable[int],
    process_mask: Iterable[int],
    *,
    warm: Optional[Callable[[], object]] = None,
) -> None:
    """Confine the calling thread to cpus.

    A thread's intra-op (OpenMP) pool is started by its first parallel op with the mask the
    thread has then, and a pool confined to one CPU runs a parallel op many times slower. So
    go back to the process mask first (the main thread, already confined, starts the GPU and
    plan threads), start the pool there with one op as wide as the pool, and only then move.
    ``warm`` is that op (default: one torch reduction over torch.get_num_threads() chunks when
    torch is already imported, else nothing). cpus must be in process_mask (ValueError), and
    the kernel must grant all of them (OSError otherwise).
    """
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
    (_default_warm if warm is None else warm)()
    os.sched_setaffinity(0, target)
    got = frozenset(os.sched_getaffinity(0))
    if got != target:
        raise OSError(
            errno.EINVAL,
            f"asked to run on cpus {format_cpu_list(target)}, the kernel allows only {format_cpu_list(got)} of them",
        )


def pin_worker(
    device: Device,
    *,
    warm: Optional[Callable[[], object]] = None,
    plan: Optional[CpuPlan] = None,
) -> Optional[Worker]:
    """Pin the calling thread to the CPUs of the worker whose device is ``device`` (see find_worker), in pin_thread's order.

    Returns the worker (its ``cpus`` None where the plan leaves it unpinned: then nothing
    moves), or None when no worker of the plan has that device.
    """
    p = _cpus.plan() if plan is None else plan
    worker = find_worker(device, plan=p)
    if worker is not None and worker.cpus is not None:
        pin_thread(worker.cpus, p.mask, warm=warm)
        log.info("cpuplan: worker %d pinned to cpus %s: %s", worker.index, format_cpu_list(worker.cpus), worker.why)
    elif worker is not None:
        log.info("cpuplan: worker %d left unpinned: %s", worker.index, worker.why)
    return worker


def pin_result(
    *,
    warm: Optional[Callable[[], object]] = None,
    plan: Optional[CpuPlan] = None,
) -> Optional[StepCpus]:
    """Pin the calling thread to the API server's result CPUs, in pin_thread's order; returns them, or None (nothing moves) where the plan leaves them unpinned."""
    p = _cpus.plan() if plan is None else plan
    if p.result is not None:
        pin_thread(p.result.cpus, p.mask, warm=warm)
    return p.result


class Thread(threading.Thread):
    """A threading.Thread that runs on the process mask, whatever its creator's and whatever its run is.

    A target, an override that doesn't call super().run(), a mixin's: run is wrapped at
    start, so calling run directly stays on the caller's thread and mask.
    """

    def start(self) -> None:
        """Start the thread's activity: it moves onto the process mask, then runs run()."""
        run = self.run

        def on_process_mask() -> None:
            if threading.current_thread() is self:
                if self.__dict__.get("run") is on_process_mask:
                    del self.__dict__["run"]
                to_process_mask()
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
        to_process_mask()
        if self.initializer is not None:
            self.initializer(*args)


class ThreadPool(ThreadPoolExecutor):
    """A ThreadPoolExecutor whose threads run on the process mask before initializer, whatever the mask of the thread that started them."""

    def __init__(
        self,
        max_workers: Optional[int] = None,
        thread_name_prefix: str = "",
        initializer: Optional[Callable[..., object]] = None,
        initargs: Tuple[Any, ...] = (),
    ) -> None:
        """As ThreadPoolExecutor; each new thread moves onto the process mask, then runs initializer(*initargs)."""
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        super().__init__(max_workers, thread_name_prefix, _OnProcessMask(initializer), initargs)
