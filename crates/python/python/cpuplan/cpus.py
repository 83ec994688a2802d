"""The CPUs this process may use, and the plan every process of a deployment reads.

os.cpu_count() reports the host's CPUs. In a container the cgroup CPU quota can be far
smaller, and a thread pool sized to the host then runs more threads than the quota lets run,
so a fork-join op waits on whichever thread the scheduler parked.

CpuPlan holds the process mask, how many of its CPUs the quota lets run, the CPUs the
step_thread_core knob pins (each worker's step threads and the API server's result threads,
see cpuplan.threads), and the pool sizes, taken from the CPUs left after those. The API
server and every worker build it with deployment_plan from the same inputs (the knob, the
mask, the deployment's devices), so they agree on it without talking.

Placement under auto is by the device's rank among the host's GPUs on its NUMA node, as sysfs
lists them (every GPU of the host, not only the ones this process was given), so servers on
different GPUs pick different CPUs without knowing about each other. A worker takes the core
at its device's rank from the bottom of the node's allowed CPUs, the API server the core at
its first device's rank from the top, so the cores a GPU picks from must hold two per GPU or
auto pins nothing. Servers on one GPU can't be told apart that way, so the first holds a lock
on it (claim_gpus) and the next pins nothing.

This module is ``mstar.utils.cpus``, name for name, backed by cpuplan's Rust planner
(``cpuplan._cpuplan``). What cpuplan adds (the hook's plan, pids and host roots, the cgroup
v1 quota, the hook's claims) has names of its own: ``cpuplan.hook_plan``, ``cpuplan.host``,
``cpuplan.pin_worker`` (docs/python.md, "Porting from mstar.utils").
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Dict, Iterable, NamedTuple, Optional, Sequence, Union
from urllib.parse import quote

from . import _cpuplan
from . import _devices
from ._cpuplan import CpuPlanError
from ._pci import normalize_pci

__all__ = [
    "CpuPlan",
    "CpuPlanError",
    "HostGpu",
    "StepCpus",
    "cgroup_cpu_quota",
    "claim_gpus",
    "deployment_plan",
    "device_addresses",
    "devices_plan",
    "format_cpu_list",
    "host_gpus",
    "install",
    "parse_cpu_list",
    "plan",
    "process_mask",
    "smt_siblings",
    "usable_cpus",
]

#: The cgroup v2 mount cgroup_cpu_quota reads by default.
_CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The PCI devices directory host_gpus and deployment_plan read by default.
_PCI_DEVICES = Path("/sys/bus/pci/devices")
#: Where claim_gpus keeps one lock file per GPU; servers that share it see each other's locks.
#: A fixed path, so that every process on a host (or in a container) agrees on it; made at
#: the first claim, never at import (a read-only /tmp must not stop the import).
_GPU_LOCK_DIR = Path("/tmp/cpuplan-gpu-locks")

CpuPlanError.__doc__ = "A step_thread_core value the process mask can't honour."


class HostGpu(NamedTuple):
    """One of the host's GPUs as sysfs lists it: its PCI address, NUMA node and the node's CPUs (None where sysfs doesn't say)."""

    address: str
    node: str | None
    local: frozenset[int] | None


class StepCpus(NamedTuple):
    """The CPUs one worker's main, GPU and plan threads share (one core's hardware threads in the mask), and how they were chosen, for the log."""

    cpus: frozenset[int]
    why: str


@dataclass
class CpuPlan:
    """See the module docstring. workers has one entry per worker of the deployment, in the conductor's worker order (empty, or all None, when nothing is pinned).

    result is the CPU the API server's result threads run on, or None.
    """

    mask: frozenset[int]
    usable: int
    workers: tuple[StepCpus | None, ...] = ()
    result: int | None = None
    why: str = "step_thread_core off"

    def _result_cpus(self) -> Optional[Iterable[int]]:
        """The CPUs pinned for the API server: result's."""
        return None if self.result is None else (self.result,)

    def _split(self) -> str:
        """How the CPUs left are shared among the workers' processes: the seed's deployments run one process per worker."""
        return "per-process"

    def _derived(self) -> tuple:
        """(pinned, left, preprocess_threads, png_threads, encode_workers, copy_workers, worker_threads), from the planner."""
        workers = [None if w is None else w[0] for w in self.workers]
        return _cpuplan.derived(self.usable, workers, self._result_cpus(), self._split())

    @property
    def copy_workers(self) -> int:
        """Threads a large output read copies over (host_copy.HostCopier): one encode's share of the CPUs left. Reads run one at a time on the data worker's thread, each ahead of its own encode."""
        return self._derived()[5]

    @property
    def encode_workers(self) -> int:
        """Outputs the data worker encodes at once. A PNG deflates on png_threads of its own, so the pool times that stays within the CPUs left."""
        return self._derived()[4]

    @property
    def left(self) -> int:
        """The CPUs the quota lets run, less the pinned ones: what the pools are sized from."""
        return self._derived()[1]

    @property
    def pinned(self) -> frozenset[int]:
        """Every pinned CPU: the workers' and the API server's."""
        return self._derived()[0]

    @property
    def png_threads(self) -> int:
        """Threads one PNG deflates on (image_io.uint8_to_png)."""
        return self._derived()[3]

    @property
    def worker_threads(self) -> int:
        """A worker process's intra-op threads: its share of the CPUs left where each of two or more workers runs in a process of its own, after the API server's preprocess_threads; every CPU left otherwise. At least 1."""
        return self._derived()[6]

    @property
    def preprocess_threads(self) -> int:
        """The API server's intra-op threads when neither the config nor the model sets them. A quarter of the CPUs left, at most 4: the process shares them with the engine workers, and its per-request ops are a few MB."""
        return self._derived()[2]


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs in a list such as 0-3,8,10-11 (as sysfs and taskset write them); empty for an empty string.

    Whitespace, newlines and a trailing NUL are tolerated; anything else that is not a cpu
    list (reversed ranges, empty items, ids past 8191) raises ValueError quoting the text.
    """
    return _cpuplan.parse_cpu_list(text)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """cpus as ranges, the inverse of parse_cpu_list."""
    return _cpuplan.format_cpu_list(cpus)


def _affinity() -> Optional[frozenset]:
    """The calling thread's affinity; None where it is unknown."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


#: The process mask: the affinity of the thread that imported cpuplan, renewed by process_mask().
_PROCESS_MASK: frozenset = _affinity() or frozenset(range(os.cpu_count() or 1))


def process_mask() -> frozenset[int]:
    """The CPUs this process may run on; every CPU where affinity is unknown.

    It is the process's mask whatever the calling thread's: the affinity cpuplan found at
    import, which pinning a thread (only ever narrower) leaves alone. A calling thread allowed
    CPUs outside it means the process itself was moved (taskset -p, a wider cpuset), and its
    mask is taken from then on.
    """
    global _PROCESS_MASK
    now = _affinity()
    if now is not None and not now <= _PROCESS_MASK:
        _PROCESS_MASK = now
    return _PROCESS_MASK


def cgroup_cpu_quota(root: Path = _CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The tightest cgroup v2 cpu.max quota over this process's cgroup and its ancestors, in CPUs; None when no level sets one (or cgroup v2 is absent).

    root is the cgroup v2 mount; the cgroup is the ``0::PATH`` line of proc_cgroup, taken
    under root, and every level from it up to root counts. A malformed cpu.max raises
    OSError naming it. cgroup v1 limits are not counted here: ``cpuplan.host.cgroup_cpu_quota``
    counts every hierarchy.
    """
    return _cpuplan.cgroup_v2_quota(os.fspath(root), os.fspath(proc_cgroup))


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity, else os.cpu_count()), capped by the cgroup quota rounded down. At least 1."""
    return _cpuplan.usable(process_mask(), cgroup_cpu_quota())


def smt_siblings(cpu: int) -> frozenset[int]:
    """The hardware threads of cpu's core, cpu included.

    From the host's sysfs: ``thread_siblings_list``, else ``core_cpus_list``, else just cpu.
    """
    return _cpuplan.smt_siblings(cpu, "/")


def _address(address: str) -> str:
    """A PCI address in the form sysfs uses (nvidia-smi's ``00000000:18:00.0`` becomes ``0000:18:00.0``); other text as given."""
    return normalize_pci(address) or address


def _host_gpu(found: tuple) -> HostGpu:
    """A HostGpu from the planner's (address, node, local)."""
    address, node, local = found
    return HostGpu(address, None if node is None else str(node), local)


def host_gpus(like: str, root: Path = _PCI_DEVICES) -> list[HostGpu]:
    """The host's GPUs in PCI address order: the functions with the vendor and class of the device at like (0000:40:00.0). Every process on the host sees the same list, whatever GPUs it was given; empty without sysfs.

    root is the PCI devices directory. ``node`` is the NUMA node as sysfs writes it (``"0"``),
    None for ``-1``; ``local`` the device's local CPUs (its node's).
    """
    return [_host_gpu(g) for g in _cpuplan.host_gpus_in(_address(like), os.fspath(root))]


def _setting_text(setting: Union[str, int]) -> str:
    """A step_thread_core value as the planner reads it: off, auto or a CPU number."""
    if isinstance(setting, bool) or not isinstance(setting, (str, int)):
        raise TypeError(f"step_thread_core must be off, auto or a cpu number, not {setting!r}")
    return str(setting)


def _planned(
    setting: Union[str, int],
    addresses: Sequence[Optional[str]],
    mask: Optional[Collection[int]],
    usable: Optional[int],
    quota: Callable[[], Optional[float]],
    **where: object,
) -> tuple:
    """(canonical setting, addresses, (mask, usable, workers, result, why)) from the planner, with this process's mask and usable by default."""
    text = _setting_text(setting)
    addrs = [None if a is None else _address(str(a)) for a in addresses]
    mask_set = process_mask() if mask is None else frozenset(mask)
    if usable is None:
        usable = _cpuplan.usable(mask_set, quota())
    canonical, planned = _cpuplan.deployment_plan(text, addrs, mask_set, usable, **where)
    return canonical, addrs, planned


def _steps(workers: Iterable[Optional[tuple]]) -> tuple:
    """The planner's (cpus, why) pairs as StepCpus."""
    return tuple(None if w is None else StepCpus(frozenset(w[0]), str(w[1])) for w in workers)


def deployment_plan(
    setting: str | int,
    addresses: Sequence[str | None],
    *,
    mask: Collection[int] | None = None,
    usable: int | None = None,
    pci_root: Path = _PCI_DEVICES,
    siblings: Callable[[int], frozenset[int]] = smt_siblings,
) -> CpuPlan:
    """The plan for a deployment whose workers' devices sit at PCI addresses, in the conductor's worker order (None for a device sysfs doesn't place, such as a CPU worker; only auto reads them).

    off pins nothing. A CPU number is the first worker's CPU; the next workers take the next
    cores above it, and the API server the last core of the mask; a number outside the mask,
    or too near its top for every worker, raises CpuPlanError. auto places by device rank
    (module docstring), and pins nothing, saying why in CpuPlan.why, when the mask is too
    small. Either way at least one CPU of the mask stays unpinned.

    mask defaults to process_mask(), usable to the mask's size capped by the cgroup quota
    (usable_cpus()). The GPUs are read from pci_root, each CPU's core from siblings. The API
    server's result is one CPU: the lowest of the core the planner gives it.
    """
    where: Dict[str, object] = {"root": "/", "pci": os.fspath(pci_root)}
    if siblings is not smt_siblings:  # smt_siblings is the host's sysfs, which the planner reads itself
        where["siblings"] = siblings
    _, _, (m, u, workers, result, why) = _planned(setting, addresses, mask, usable, cgroup_cpu_quota, **where)
    return CpuPlan(m, u, _steps(workers), None if result is None else min(result[0]), why)


def device_addresses(devices: Sequence[str]) -> list[str | None]:
    """The PCI address of each worker's device (cuda:1); None for a CPU worker, or where the platform doesn't report one.

    ``cuda:N`` (``cuda`` is ``cuda:0``) is the N-th GPU this process sees in PCI address
    order: ``/proc/driver/nvidia/gpus`` (else the NVIDIA functions in sysfs), narrowed by
    NVIDIA_VISIBLE_DEVICES, then CUDA_VISIBLE_DEVICES as CUDA does. A PCI address in any
    spelling is itself in canonical form; anything else (``cpu``, ``mps``) is None.
    """
    return _devices.addresses(devices, root="/", plan_devices=())


def devices_plan(setting: str | int, devices: Sequence[str]) -> CpuPlan:
    """deployment_plan for the workers' device strings, in the conductor's worker order: the same call in the API server and in every worker."""
    return deployment_plan(setting, device_addresses(devices))


class _State:
    """This process's installed plan and GPU locks, changed only under ``lock``."""

    lock = threading.Lock()
    installed: Optional[CpuPlan] = None
    #: Lock file path -> the open fd holding its flock, for the life of the process.
    held: Dict[str, int] = {}


def install(new: CpuPlan | None) -> None:
    """Make new this process's plan (None: back to nothing pinned).

    A plan that pins a CPU outside this process's mask (one made for another host or
    container) is refused with ValueError, before anything changes: pinning would fail.
    """
    if new is not None and not isinstance(new, CpuPlan):
        raise TypeError(f"install() takes a CpuPlan or None, not {type(new).__name__}")
    if new is not None:
        _check_fits(new)
    with _State.lock:
        _State.installed = new


def _check_fits(new: CpuPlan) -> None:
    """ValueError where new pins a CPU outside this process's mask."""
    pinned: set = set()
    for w in new.workers:
        if w is not None:
            pinned |= set(w.cpus)
    pinned |= set(new._result_cpus() or ())
    mask = process_mask()
    outside = pinned - mask
    if outside:
        raise ValueError(
            f"install(): the plan's CPUs {_cpuplan.format_cpu_list(sorted(outside))} are not in this process's mask "
            f"{_cpuplan.format_cpu_list(sorted(mask))}: it was made for another host or container ({new.why})"
        )


def _no_plan() -> str:
    """Why plan() pins nothing where nothing is installed, for CpuPlan.why (existence only: no file is read)."""
    var, default = _cpuplan.PLAN_VAR, _cpuplan.DEFAULT_PLAN
    named = os.environ.get(var) or None
    path = named or default
    if os.path.exists(path):
        return f"no plan installed: install(cpuplan.hook_plan()) installs the one in {path}"
    if os.environ.get("CPUPLAN_MASK"):
        return "no plan installed: install(cpuplan.hook_plan()) installs the one in the CPUPLAN_* variables"
    if named:
        return f"no plan: nothing installed, and ${var} names {named}, which does not exist"
    return f"no plan: nothing installed, ${var} is not set and {default} does not exist"


def plan(refresh: bool = False) -> CpuPlan:
    """This process's plan: the one install set, else nothing pinned.

    Nothing pinned is ``CpuPlan(process_mask(), usable_cpus())``, made at each call, its ``why``
    saying that there is no plan and why (``no plan: ...``, or where the hook's plan waits to be
    installed). No file is read for it: the hook's plan is ``cpuplan.hook_plan()``, installed with
    ``install(cpuplan.hook_plan())``. With ``refresh=True`` the plan files are read again first
    (``cpuplan.hook_plan()``: the NRI plugin rewrites them, with a higher
    ``CPUPLAN_GENERATION``, when kubelet changes the container's CPUs) and the plan found is
    installed; where there is none, what was installed stays. The environment never changes
    after start: only the files hold the new plan.
    """
    if refresh:
        from .hook import hook_plan

        found = hook_plan()
        if found is not None:
            install(found)
    installed = _State.installed
    if installed is not None:
        return installed
    return CpuPlan(process_mask(), usable_cpus(), why=_no_plan())


def _thread_mask() -> frozenset:
    """The mask cpuplan.threads starts threads on: the installed plan's, else the process mask."""
    installed = _State.installed
    return frozenset(installed.mask) if installed is not None else process_mask()


def _lock_name(address: str) -> str:
    """The lock file of a GPU: its canonical PCI address, else the text quoted to one safe file name."""
    return f"{normalize_pci(address) or quote(address, safe='')}.lock"


def claim_gpus(addresses: Iterable[str | None]) -> str | None:
    """Hold a lock on each GPU for the life of this process; if one can't be had, hold none of them and say why.

    auto depends only on the PCI address and the mask, so two servers on one GPU (two MIG
    instances report one address) would take the same CPUs. The kernel drops an flock
    however the process exits, so a dead server leaves nothing to clean up. The file is never
    unlinked: another process may already hold an fd on this inode, and removing it would let
    a third lock a different one. The lock only reaches servers that share _GPU_LOCK_DIR.

    None addresses (CPU workers) are skipped; claiming again what this process holds keeps it.
    """
    names: Dict[str, str] = {}
    for a in addresses:
        if a is not None:
            names.setdefault(_lock_name(str(a)), str(a))
    if not names:
        return None
    directory = Path(_GPU_LOCK_DIR)
    with _State.lock:
        wanted = [n for n in names if str(directory / n) not in _State.held]
        if not wanted:
            return None
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return f"cannot make the GPU lock directory {directory}: {e.strerror or e}"
        taken: Dict[str, int] = {}
        why: Optional[str] = None
        for name in wanted:
            path = directory / name
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
            except OSError as e:
                why = f"cannot open {path}: {e.strerror or e}"
                break
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                held = e.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
                why = f"gpu {names[name]} is held by another process ({path})" if held else f"cannot lock {path}: {e.strerror or e}"
                break
            taken[str(path)] = fd
        if why is not None:
            for fd in taken.values():
                os.close(fd)
            return why
        _State.held.update(taken)
    return None
