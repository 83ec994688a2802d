"""Finding "my worker": device strings to PCI addresses, and a device to its worker in the plan.

``cuda:N`` is the N-th GPU this process sees in PCI address order, which is how CUDA numbers
devices under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (set when cpuplan is imported, unless already
set). The GPUs this process sees are:

1. the container's GPUs from the hook's plan (its workers' devices: ``inputs.gpus`` of
   ``plan.json``, ``CPUPLAN_DEVICES`` of ``plan.env``), which are in PCI address order;
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
from typing import Collection, Dict, FrozenSet, List, NamedTuple, Optional, Sequence, Union

from . import cpus as _cpus
from ._pci import normalize_pci, pci_key
from .cpus import CpuPlan, PathLike

__all__ = ["Worker", "device_addresses", "devices_plan", "find_worker", "visible_gpus"]

log = logging.getLogger("cpuplan")

#: NVIDIA's PCI vendor id, and the display controller class (sysfs ``class`` >> 16).
_NVIDIA_VENDOR = 0x10DE
_DISPLAY_CLASS = 0x03

Device = Union[str, int]


class Worker(NamedTuple):
    """A worker of the plan: its index (in the conductor's worker order), its device's PCI address, its CPUs (None: unpinned) and why."""

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, as the spec names it
    device: Optional[str]
    cpus: Optional[FrozenSet[int]]
    why: str


def _under(root: PathLike, path: str) -> str:
    """path (absolute) placed under root."""
    return os.path.join(os.fspath(root), path.lstrip("/"))


def _read(path: str) -> Optional[str]:
    """The text of a small file, None if it can't be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _sorted(addresses: Sequence[str]) -> List[str]:
    """Canonical PCI addresses, deduplicated, in numeric address order."""
    unique = {a for a in (normalize_pci(x) for x in addresses) if a is not None}
    return sorted(unique, key=lambda a: pci_key(a) or (0, 0, 0, 0))


def _proc_gpus(root: PathLike) -> Optional[List[str]]:
    """The GPUs ``/proc/driver/nvidia/gpus`` lists, in PCI order; None without that directory."""
    try:
        names = os.listdir(_under(root, "/proc/driver/nvidia/gpus"))
    except OSError:
        return None
    return _sorted(names)


def _sysfs_gpus(root: PathLike) -> List[str]:
    """The NVIDIA display-class PCI functions in sysfs, in PCI order (empty without sysfs)."""
    devices = _under(root, "/sys/bus/pci/devices")
    try:
        names = os.listdir(devices)
    except OSError:
        return []
    found = []
    for name in names:
        vendor = _read(os.path.join(devices, name, "vendor"))
        klass = _read(os.path.join(devices, name, "class"))
        try:
            if vendor and klass and int(vendor, 16) == _NVIDIA_VENDOR and int(klass, 16) >> 16 == _DISPLAY_CLASS:
                found.append(name)
        except ValueError:
            continue
    return _sorted(found)


def _uuids(root: PathLike, addresses: Sequence[str]) -> Dict[str, str]:
    """Each GPU's ``GPU-`` UUID (lower case) from ``/proc/driver/nvidia/gpus/<address>/information``, where it says."""
    out = {}
    for a in addresses:
        text = _read(_under(root, f"/proc/driver/nvidia/gpus/{a}/information")) or ""
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "GPU UUID" and value.strip():
                out[a] = value.strip().lower()
    return out


def _by_entry(entry: str, gpus: List[str], uuids: Dict[str, str]) -> Optional[str]:
    """The GPU an NVIDIA_VISIBLE_DEVICES entry names: an index, a GPU- UUID, a PCI bus id, or a MIG form's parent; None if none."""
    pci = normalize_pci(entry)
    if pci is not None:
        return pci if pci in gpus else None
    e = entry.lower()
    if e.startswith("mig-gpu-"):  # MIG-GPU-<uuid>/<gi>/<ci>
        e = e[len("mig-") :].split("/")[0]
    elif ":" in e:  # <gpu>:<mig>
        e = e.split(":")[0]
    if e.isdigit():
        i = int(e)
        return gpus[i] if i < len(gpus) else None
    if e.startswith("gpu-"):
        return next((a for a, u in uuids.items() if u == e), None)
    return None


def _nvidia_visible(gpus: List[str], from_proc: bool, root: PathLike) -> List[str]:
    """gpus narrowed by NVIDIA_VISIBLE_DEVICES (see the module docstring)."""
    value = os.environ.get("NVIDIA_VISIBLE_DEVICES")
    if value is None or value.strip() == "all":
        return gpus
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if value.strip() in ("none", "void") or not entries:
        return []
    if from_proc and len(gpus) == len(set(entries)):
        return gpus  # the NVIDIA runtime already narrowed /proc to the container's GPUs
    uuids = _uuids(root, gpus)
    return _sorted([a for a in (_by_entry(e, gpus, uuids) for e in entries) if a is not None])


def _cuda_visible(gpus: List[str], root: PathLike) -> List[str]:
    """gpus as CUDA_VISIBLE_DEVICES narrows and orders them: indices or GPU- UUID prefixes, up to the first entry that names none."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return gpus
    uuids: Optional[Dict[str, str]] = None
    out: List[str] = []
    for entry in (e.strip() for e in value.split(",")):
        found: Optional[str] = None
        if entry.isdigit():
            i = int(entry)
            found = gpus[i] if i < len(gpus) else None
        elif entry.lower().startswith("gpu-"):
            if uuids is None:
                uuids = _uuids(root, gpus)
            matches = [a for a, u in uuids.items() if u.startswith(entry.lower())]
            found = matches[0] if len(matches) == 1 else None
        if found is None or found in out:
            break
        out.append(found)
    return out


def visible_gpus(*, root: PathLike = "/") -> Optional[List[str]]:
    """The PCI addresses of the GPUs this process sees, as CUDA numbers them (``cuda:0`` first); None where none are known.

    The rule is the module docstring's: the hook's plan, else the host's NVIDIA GPUs narrowed
    by NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES. Files are read under ``root``.
    """
    hook = _cpus._cached_hook_plan()
    base: Optional[List[str]] = None
    if hook is not None and any(d is not None for d in hook.devices):
        base = _sorted([d for d in hook.devices if d is not None])
    if base is None:
        proc = _proc_gpus(root)
        listed = proc if proc else _sysfs_gpus(root)
        if listed:
            base = _nvidia_visible(listed, bool(proc), root)
    if base is None:
        return None
    return _cuda_visible(base, root)


def _cuda_index(device: Device) -> Optional[int]:
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


def device_addresses(devices: Sequence[Device], *, root: PathLike = "/") -> List[Optional[str]]:
    """The PCI address of each worker's device (cuda:1); None for a CPU worker, or where the platform doesn't report one.

    ``cuda:N`` (or the int N; ``cuda`` is ``cuda:0``) is the N-th GPU of visible_gpus(); a
    PCI address in any spelling (nvidia-smi's ``00000000:18:00.0`` included) is itself in
    canonical form; anything else (``cpu``, ``mps``) is None.
    """
    if os.environ.get("CUDA_DEVICE_ORDER", "PCI_BUS_ID") != "PCI_BUS_ID":
        log.warning("cpuplan: CUDA_DEVICE_ORDER is %s: cuda:N may not be the N-th GPU in PCI order", os.environ["CUDA_DEVICE_ORDER"])
    gpus: Optional[List[str]] = None
    looked = False
    out: List[Optional[str]] = []
    for d in devices:
        index = _cuda_index(d)
        if index is None:
            out.append(None if isinstance(d, int) else normalize_pci(str(d).strip()))
            continue
        if not looked:
            gpus, looked = visible_gpus(root=root), True
        out.append(gpus[index] if gpus is not None and index < len(gpus) else None)
    return out


def devices_plan(
    setting: Union[str, int],
    devices: Sequence[Device],
    *,
    mask: Optional[Collection[int]] = None,
    usable: Optional[int] = None,
    root: PathLike = "/",
) -> CpuPlan:
    """deployment_plan for the workers' device strings, in the conductor's worker order: the same call in the API server and in every worker."""
    return _cpus.deployment_plan(setting, device_addresses(devices, root=root), mask=mask, usable=usable, root=root)


def find_worker(device: Device, *, plan: Optional[CpuPlan] = None, root: PathLike = "/") -> Optional[Worker]:
    """The worker of ``plan`` (default: plan()) whose device is ``device``; None if no worker has it.

    ``device`` is a PCI address in any spelling (nvidia-smi's ``00000000:18:00.0``
    included), ``cuda:N`` or a CUDA index N, resolved to a PCI address by device_addresses
    and looked up in the plan's devices. Where that can't be done (the plan knows no
    worker's device, or no GPU is known to resolve cuda:N), CUDA index N is worker N: the
    plan's workers are the container's GPUs in PCI address order.
    """
    p = _cpus.plan() if plan is None else plan
    n = _cuda_index(device)
    index: Optional[int] = None
    address = device_addresses([device], root=root)[0] if any(d is not None for d in p.devices) else None
    if address is not None:
        if address in p.devices:
            index = p.devices.index(address)
    elif n is not None and n < len(p.workers):
        index = n
    if index is None or index >= len(p.workers):
        return None
    step = p.workers[index]
    known = p.devices[index] if index < len(p.devices) else None
    if step is None:
        return Worker(index, known, None, p.why)
    return Worker(index, known, step.cpus, step.why)
