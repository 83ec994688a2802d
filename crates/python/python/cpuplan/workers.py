"""Finding "my worker" in a plan and pinning it: cpuplan's extras to cpuplan.threads.

A worker is found by its device (a PCI address in any spelling, ``cuda:N`` or a CUDA index):
in a HookPlan (the hook's plan) by the plan's own devices, which are the container's GPUs in
PCI order; where a plan names no devices, CUDA index N is worker N.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, List, NamedTuple, Optional

from . import _devices
from . import cpus as _cpus
from ._devices import Device, PathLike
from .cpus import CpuPlan, format_cpu_list
from .threads import _default_warm, _pin, _to_process_mask, log

__all__ = ["Worker", "find_worker", "pin_result", "pin_thread_warm", "pin_worker", "to_process_mask", "use_pci_bus_order", "visible_gpus"]


class Worker(NamedTuple):
    """A worker of the plan: its index (in the conductor's worker order), its device's PCI address, its CPUs (None: unpinned) and why."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, as the spec names it
    device: Optional[str]
    cpus: Optional[frozenset]
    why: str


def _plan_devices(plan: CpuPlan) -> tuple:
    """The workers' devices a plan names (a HookPlan's), else none."""
    return tuple(getattr(plan, "devices", ()))


def _seen_devices(plan: CpuPlan) -> tuple:
    """The GPUs a plan says this process sees: a hook's plan's devices (the container's GPUs), else none."""
    return _plan_devices(plan) if getattr(plan, "source", None) is not None else ()


def visible_gpus(*, plan: Optional[CpuPlan] = None, root: PathLike = "/") -> Optional[List[str]]:
    """The PCI addresses of the GPUs this process sees, as CUDA numbers them (``cuda:0`` first); None where none are known.

    ``plan`` (default: cpuplan.plan()) names them where it is the hook's plan (hook_plan()'s,
    whose devices are the container's GPUs); else the host's NVIDIA GPUs (``/proc/driver/nvidia/gpus``, else sysfs)
    narrowed by NVIDIA_VISIBLE_DEVICES; then CUDA_VISIBLE_DEVICES. Files are read under ``root``.
    """
    p = _cpus.plan() if plan is None else plan
    return _devices.visible(root, _seen_devices(p))


def find_worker(device: Device, *, plan: Optional[CpuPlan] = None, root: PathLike = "/") -> Optional[Worker]:
    """The worker of ``plan`` (default: cpuplan.plan()) whose device is ``device``; None if no worker has it.

    ``device`` is a PCI address in any spelling (nvidia-smi's ``00000000:18:00.0``
    included), ``cuda:N`` or a CUDA index N, resolved to a PCI address as
    visible_gpus(plan=plan) says and looked up in the plan's devices. Where that can't be done (the plan names no worker's
    device, or no GPU is known to resolve cuda:N), CUDA index N is worker N: the plan's
    workers are the container's GPUs in PCI address order.
    """
    p = _cpus.plan() if plan is None else plan
    devices = _plan_devices(p)
    n = _devices.cuda_index(device)
    index: Optional[int] = None
    address = _devices.addresses([device], root, _seen_devices(p))[0] if any(d is not None for d in devices) else None
    if address is not None:
        if address in devices:
            index = devices.index(address)
    elif n is not None and n < len(p.workers):
        index = n
    if index is None or index >= len(p.workers):
        return None
    step = p.workers[index]
    known = devices[index] if index < len(devices) else None
    if step is None:
        return Worker(index, known, None, p.why)
    return Worker(index, known, frozenset(step[0]), step[1])


def pin_thread_warm(cpus: Iterable[int], process_mask: Iterable[int], warm: Optional[Callable[[], object]]) -> None:
    """cpuplan.threads.pin_thread with ``warm`` as the op that starts the thread's intra-op pool on the process mask (None: pin_thread's own)."""
    _pin(cpus, process_mask, _default_warm if warm is None else warm)


def pin_worker(device: Device, *, warm: Optional[Callable[[], object]] = None, plan: Optional[CpuPlan] = None) -> Optional[Worker]:
    """Pin the calling thread to the CPUs of the worker whose device is ``device`` (see find_worker), in pin_thread's order.

    Returns the worker (its ``cpus`` None where the plan leaves it unpinned: then nothing
    moves), or None when no worker of the plan has that device.
    """
    p = _cpus.plan() if plan is None else plan
    worker = find_worker(device, plan=p)
    if worker is not None and worker.cpus is not None:
        pin_thread_warm(worker.cpus, p.mask, warm)
        log.info("cpuplan: worker %d pinned to cpus %s: %s", worker.index, format_cpu_list(worker.cpus), worker.why)
    elif worker is not None:
        log.info("cpuplan: worker %d left unpinned: %s", worker.index, worker.why)
    return worker


def pin_result(*, warm: Optional[Callable[[], object]] = None, plan: Optional[CpuPlan] = None) -> Optional[frozenset]:
    """Pin the calling thread to the API server's result CPUs (a HookPlan's result_core, else ``result``), in pin_thread's order; returns them, or None (nothing moves) where the plan pins none."""
    p = _cpus.plan() if plan is None else plan
    if p.result is None:
        return None
    cpus = frozenset(p._result_cpus() or ())
    pin_thread_warm(cpus, p.mask, warm)
    return cpus


def to_process_mask() -> None:
    """Move the calling thread onto the process mask (the installed plan's, else cpuplan.process_mask()); if the kernel refuses, log a warning and stay."""
    _to_process_mask()


def use_pci_bus_order() -> str:
    """Set ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless it is set, so that CUDA's ``cuda:N`` is cpuplan's; returns the value in force.

    CUDA reads the variable when it initializes: call this before anything initializes CUDA
    (or set the variable in the image). Importing cpuplan changes no variable.
    """
    return os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
