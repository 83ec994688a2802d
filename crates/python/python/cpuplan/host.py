"""cpuplan's extras to cpuplan.cpus: any process's mask and quota under any host root, every cgroup hierarchy, and the hook's GPU claims.

The names are cpuplan.cpus's, with what the seed's functions leave out: a ``pid`` (None: this
process), a host ``root`` under which every file is read (``/`` on a real host, a fixture
tree in tests: ``<root>/proc``, ``<root>/sys``, the cgroup mounts ``<root>/proc/self/mountinfo``
lists), the quota over cgroup v1 and v2 alike, plans that carry the setting, each worker's
device and the API server's whole core (HookPlan, as the hook writes them), and claims in
the hook's claims directory, which the hook and the NRI plugin honour.
"""

from __future__ import annotations

import math
import os
from typing import Callable, Collection, Iterable, List, Optional, Sequence, Union

from . import _cpuplan
from . import _devices
from . import cpus as _cpus
from ._pci import normalize_pci
from .cpus import HostGpu, _address, _host_gpu, _planned
from .hook import HookPlan

__all__ = [
    "CLAIMS_DIR_VAR",
    "DEFAULT_CLAIMS_DIR",
    "cgroup_cpu_quota",
    "claim_gpus",
    "deployment_plan",
    "device_addresses",
    "devices_plan",
    "host_gpus",
    "process_mask",
    "smt_siblings",
    "usable_cpus",
]

#: A path as str or os.PathLike.
PathLike = Union[str, "os.PathLike[str]"]
#: The variable naming the directory of this host's GPU claims (claim_gpus).
CLAIMS_DIR_VAR: str = _cpuplan.CLAIMS_DIR_VAR
#: The claims directory when CPUPLAN_CLAIMS_DIR is not set: the hook's default.
DEFAULT_CLAIMS_DIR = "/run/cpuplan/claims"


def process_mask(pid: Optional[int] = None, *, root: PathLike = "/") -> frozenset[int]:
    """The CPUs process ``pid`` may run on: ``Cpus_allowed_list`` of ``<root>/proc/<pid>/status`` (OSError if unreadable); this process's, cpuplan.cpus.process_mask(), for None."""
    if pid is None:
        return _cpus.process_mask()
    return _cpuplan.process_mask(pid, root)


def cgroup_cpu_quota(pid: Optional[int] = None, *, root: PathLike = "/") -> Optional[float]:
    """The tightest cgroup CPU quota over process ``pid``'s cgroups (this process's for None) and their ancestors, in CPUs; None when no level sets one.

    Every hierarchy counts, cgroup v2 ``cpu.max`` and v1 ``cpu.cfs_quota_us`` (a hybrid host
    may set both), found through ``<root>/proc/self/mountinfo`` and
    ``<root>/proc/<pid or self>/cgroup``: the hook's rule. A malformed limit file raises
    OSError naming it.
    """
    return _cpuplan.cgroup_cpu_quota(root, pid)


def usable_cpus(pid: Optional[int] = None, *, root: PathLike = "/") -> int:
    """process_mask(pid) capped by cgroup_cpu_quota(pid) rounded down, at least 1: the hook's usable count."""
    return _cpuplan.usable(process_mask(pid, root=root), cgroup_cpu_quota(pid, root=root))


def smt_siblings(cpu: int, *, root: PathLike = "/") -> frozenset[int]:
    """The hardware threads of cpu's core, cpu included, from sysfs under root."""
    return _cpuplan.smt_siblings(cpu, root)


def host_gpus(like: str, *, root: PathLike = "/") -> List[HostGpu]:
    """cpuplan.cpus.host_gpus with sysfs under a host root: the PCI devices of ``<root>/sys/bus/pci/devices``."""
    return [_host_gpu(g) for g in _cpuplan.host_gpus(_address(like), root)]


def deployment_plan(
    setting: Union[str, int],
    addresses: Sequence[Optional[str]],
    *,
    mask: Optional[Collection[int]] = None,
    usable: Optional[int] = None,
    root: PathLike = "/",
    siblings: Optional[Callable[[int], Iterable[int]]] = None,
) -> HookPlan:
    """The plan the hook makes for workers on PCI ``addresses``, read under the host ``root``, as a HookPlan.

    As cpuplan.cpus.deployment_plan, with sysfs (SMT siblings and PCI devices) under
    ``root``; a ``siblings`` callable (cpu -> its core's CPUs) replaces sysfs for the SMT
    siblings. ``mask`` defaults to this process's mask, ``usable`` to the mask's size capped
    by the quota of every hierarchy (cgroup_cpu_quota()). Unreadable or malformed sysfs files
    raise OSError naming them.
    """
    where = {"root": root} if siblings is None else {"root": root, "siblings": siblings}
    canonical, addrs, planned = _planned(setting, addresses, mask, usable, cgroup_cpu_quota, **where)
    return HookPlan._planned(canonical, planned, addrs)


def device_addresses(devices: Sequence[Union[str, int]], *, root: PathLike = "/", plan: Optional[_cpus.CpuPlan] = None) -> List[Optional[str]]:
    """cpuplan.cpus.device_addresses with files under ``root``, and ``cuda:N`` the N-th of ``plan``'s devices where it is the hook's plan (hook_plan()'s: the container's GPUs)."""
    seen = getattr(plan, "devices", ()) if getattr(plan, "source", None) is not None else ()
    return _devices.addresses(devices, root, seen)


def devices_plan(
    setting: Union[str, int],
    devices: Sequence[Union[str, int]],
    *,
    mask: Optional[Collection[int]] = None,
    usable: Optional[int] = None,
    root: PathLike = "/",
) -> HookPlan:
    """deployment_plan of device_addresses(devices): the same call in the API server and in every worker."""
    return deployment_plan(setting, device_addresses(devices, root=root), mask=mask, usable=usable, root=root)


def claim_gpus(
    addresses: Iterable[Optional[str]],
    *,
    claims_dir: Optional[PathLike] = None,
    wait: float = 2.0,
) -> Optional[str]:
    """Claim each GPU in the hook's claims directory for the life of this process, all or none; None, or why not.

    A claim is a file per GPU in the claims directory (``claims_dir``, else
    ``$CPUPLAN_CLAIMS_DIR``, else the hook's ``/run/cpuplan/claims``), naming this process
    (``pid-<pid>`` in scope ``python:pidns:<inode>``, its pid and start time), changed only under an flock of
    the directory's lock file, waited on for at most ``wait`` seconds: the hook's and the NRI
    plugin's claims, which they honour and ``cpuplan claims`` lists. A claim whose
    process is gone (or whose pid now runs another process) is stale and taken over, so a dead
    server leaves nothing to clean up; claiming again from the same process keeps its claims.
    None addresses are skipped; an address that is no PCI address raises ValueError.
    """
    wanted: List[str] = []
    for a in addresses:
        if a is None:
            continue
        address = normalize_pci(str(a))
        if address is None:
            raise ValueError(f"not a PCI address: {a!r}")
        if address not in wanted:
            wanted.append(address)
    if not wanted:
        return None
    directory = claims_dir if claims_dir is not None else (os.environ.get(CLAIMS_DIR_VAR) or DEFAULT_CLAIMS_DIR)
    if not (wait >= 0 and math.isfinite(wait)):
        raise ValueError(f"wait must be a finite number of seconds, got {wait!r}")
    return _cpuplan.claim_gpus(directory, wanted, float(wait))
