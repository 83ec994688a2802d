"""Device strings to PCI addresses: ``cuda:N`` as CUDA numbers devices, for cpuplan.cpus.device_addresses and the extras.

``cuda:N`` is the N-th GPU this process sees in PCI address order, which is how CUDA numbers
devices under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (``cpuplan.use_pci_bus_order()`` sets it;
importing cpuplan never does). The GPUs this process sees are:

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
from typing import Dict, Iterable, List, Optional, Sequence, Union

from ._pci import normalize_pci, pci_key

log = logging.getLogger("cpuplan")

#: NVIDIA's PCI vendor id, and the display controller class (sysfs ``class`` >> 16).
_NVIDIA_VENDOR = 0x10DE
_DISPLAY_CLASS = 0x03

#: A device as callers name it: cuda:N, cuda, a PCI address, cpu, or a CUDA index.
Device = Union[str, int]
#: A path as str or os.PathLike.
PathLike = Union[str, "os.PathLike[str]"]


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


def visible(root: PathLike, plan_devices: Iterable[Optional[str]]) -> Optional[List[str]]:
    """The PCI addresses of the GPUs this process sees, as CUDA numbers them (``cuda:0`` first); None where none are known.

    The rule is the module docstring's: plan_devices where any is known, else the host's
    NVIDIA GPUs narrowed by NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES. Files are read
    under root.
    """
    known = [d for d in plan_devices if d is not None]
    base: Optional[List[str]] = _sorted(known) if known else None
    if base is None:
        proc = _proc_gpus(root)
        listed = proc if proc else _sysfs_gpus(root)
        if listed:
            base = _nvidia_visible(listed, bool(proc), root)
    if base is None:
        return None
    return _cuda_visible(base, root)


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
