"""PCI addresses as runtimes, nvidia-smi and sysfs spell them, and their numeric order."""

from __future__ import annotations

import re
from typing import Optional, Tuple

# [domain:]bus:device.function: a 4 to 8 hex digit domain (0 when absent), two hex digits each
# for bus and device, function 0 to 7 (the planner's rule, crates/cpuplan/src/pci.rs).
_PCI = re.compile(r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])")


def pci_key(address: str) -> Optional[Tuple[int, int, int, int]]:
    """(domain, bus, device, function) of a PCI address in any accepted spelling; None if it is none."""
    m = _PCI.fullmatch(address)
    if m is None:
        return None
    domain, bus, device, function = m.groups()
    return (int(domain or "0", 16), int(bus, 16), int(device, 16), int(function))


def normalize_pci(address: str) -> Optional[str]:
    """`0000:18:00.0` for `00000000:18:00.0` (nvidia-smi), `18:00.0` or upper case; None if it is no PCI address."""
    key = pci_key(address)
    if key is None:
        return None
    domain, bus, device, function = key
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}"
