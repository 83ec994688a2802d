"""Device strings to PCI addresses: ``cuda:N`` as CUDA numbers devices, for cpuplan.cpus.device_addresses and the extras.

``cuda:N`` is the N-th GPU this process sees in PCI address order, which is how CUDA numbers
devices under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (``cpuplan.use_pci_bus_order()`` sets it;
importing cpuplan never does). Which GPUs this process sees is the Rust planner's discovery
(``cpuplan::gpu::nvidia::cuda_gpus``, through ``_cpuplan.visible_gpus``; one implementation for
the hook, the shims and this package):

1. where a plan names its workers' devices (a HookPlan: the hook's plan), those, which are
   the container's GPUs in PCI address order;
2. else the host's NVIDIA GPUs in PCI address order: the entries of
   ``/proc/driver/nvidia/gpus`` (which the NVIDIA container runtime narrows to the
   container's GPUs), else the NVIDIA display-class functions in sysfs, narrowed by
   ``NVIDIA_VISIBLE_DEVICES`` (indices, ``GPU-`` UUIDs, PCI bus ids; ``all``; ``none``,
   ``void`` or empty for none) unless /proc already lists exactly that many GPUs;
3. else none are known, and every ``cuda:N`` is None.

``CUDA_VISIBLE_DEVICES`` then narrows and reorders that list as CUDA does (indices or
``GPU-`` UUID prefixes, up to the first entry that names no GPU; empty for none).
"""

from __future__ import annotations

import logging
import os
from typing import Iterable, List, Optional, Sequence, Union

from . import _cpuplan
from ._pci import normalize_pci

log = logging.getLogger("cpuplan")

#: A device as callers name it: cuda:N, cuda, a PCI address, cpu, or a CUDA index.
Device = Union[str, int]
#: A path as str or os.PathLike.
PathLike = Union[str, "os.PathLike[str]"]


def visible(root: PathLike, plan_devices: Iterable[Optional[str]]) -> Optional[List[str]]:
    """The PCI addresses of the GPUs this process sees, as CUDA numbers them (``cuda:0`` first); None where none are known.

    The rule is the module docstring's, applied by the Rust planner to this process's
    NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES. Files are read under root.
    """
    return _cpuplan.visible_gpus(
        os.fspath(root),
        list(plan_devices),
        os.environ.get("NVIDIA_VISIBLE_DEVICES"),
        os.environ.get("CUDA_VISIBLE_DEVICES"),
    )


def cuda_index(device: Device) -> Optional[int]:
    """N for ``cuda:N`` (or an int N), 0 for ``cuda``; None for any other device."""
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return device if device >= 0 else None
    text = str(device).strip().lower()
    if text == "cuda":
        return 0
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    return None


def addresses(devices: Sequence[Device], root: PathLike, plan_devices: Iterable[Optional[str]]) -> List[Optional[str]]:
    """The PCI address of each device: ``cuda:N`` (or the int N; ``cuda`` is ``cuda:0``) the N-th of visible(root, plan_devices); a PCI address in any spelling itself, canonical; anything else (``cpu``, ``mps``) None."""
    order = os.environ.get("CUDA_DEVICE_ORDER")
    if order is not None and order != "PCI_BUS_ID":
        log.warning("cpuplan: CUDA_DEVICE_ORDER is %s: cuda:N may not be the N-th GPU in PCI order", order)
    gpus: Optional[List[str]] = None
    looked = False
    out: List[Optional[str]] = []
    for d in devices:
        index = cuda_index(d)
        if index is None:
            out.append(None if isinstance(d, int) else normalize_pci(str(d).strip()))
            continue
        if not looked:
            gpus, looked = visible(root, plan_devices), True
        out.append(gpus[index] if gpus is not None and index < len(gpus) else None)
    return out
