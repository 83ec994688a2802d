"""PCI addresses as runtimes, nvidia-smi and sysfs spell them, and their numeric order (the planner's rule)."""

from ._cpuplan import normalize_pci, pci_key

__all__ = ["normalize_pci", "pci_key"]
