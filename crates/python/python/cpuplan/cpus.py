"""The CPUs this process may use, and the plan every process of a deployment reads.

``mstar.utils.cpus``'s API, backed by the Rust planner (``cpuplan._cpuplan``). Every
host file is read under a root directory (``/`` on a real host; a fixture tree in tests):
``root`` is that directory wherever a function takes one.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable, Collection, FrozenSet, Iterable, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import _cpuplan
from ._cpuplan import CpuPlanError
from ._pci import normalize_pci

__all__ = [
    "CLAIMS_DIR_VAR",
    "CpuPlan",
    "CpuPlanError",
    "DEFAULT_CLAIMS_DIR",
    "DEFAULT_PLAN",
    "HostGpu",
    "PLAN_VAR",
    "StepCpus",
    "cgroup_cpu_quota",
    "claim_gpus",
    "deployment_plan",
    "format_cpu_list",
    "hook_plan",
    "host_gpus",
    "install",
    "parse_cpu_list",
    "plan",
    "process_mask",
    "smt_siblings",
    "usable_cpus",
]

log = logging.getLogger("cpuplan")

PathLike = Union[str, "os.PathLike[str]"]

#: Where the hook writes the plan inside the container.
DEFAULT_PLAN: str = _cpuplan.DEFAULT_PLAN
#: The variable naming another plan file than DEFAULT_PLAN.
PLAN_VAR: str = _cpuplan.PLAN_VAR
#: The variable naming the directory of this host's GPU claims (claim_gpus).
CLAIMS_DIR_VAR = _cpuplan.CLAIMS_DIR_VAR
#: The claims directory when CPUPLAN_CLAIMS_DIR is not set: the hook's default.
DEFAULT_CLAIMS_DIR = "/run/cpuplan/claims"

CpuPlanError.__doc__ = "A step_thread_core value the process mask can't honour."


class HostGpu(NamedTuple):
    """One of the host's GPUs as sysfs lists it: its PCI address, NUMA node and the node's CPUs (None where sysfs doesn't say)."""

    address: str
    node: Optional[str]
    local: Optional[FrozenSet[int]]


class StepCpus(NamedTuple):
    """The CPUs one worker's main, GPU and plan threads share (one core's hardware threads in the mask), and how they were chosen, for the log."""

    cpus: FrozenSet[int]
    why: str


def _step(s: Optional[Tuple[Iterable[int], str]]) -> Optional[StepCpus]:
    """A StepCpus (or a (cpus, why) pair) with its cpus as a frozenset; None stays None."""
    if s is None:
        return None
    cpus, why = s
    return StepCpus(frozenset(cpus), str(why))


@dataclass(frozen=True)
class CpuPlan:
    """The process mask, how many of its CPUs the quota lets run, the pinned CPUs, and the pool sizes taken from the CPUs left.

    ``workers`` has one entry per worker of the deployment, in the conductor's worker order
    (empty, or all None, when nothing is pinned). ``result`` is the API server's result
    threads' CPUs (one core, as a worker's), or None. ``setting`` is the step_thread_core
    value the plan was made with and ``devices`` each worker's PCI address (None for a CPU
    worker), where known: they are what a worker is found by (``cpuplan.find_worker``).
    """

    mask: FrozenSet[int]
    usable: int
    workers: Tuple[Optional[StepCpus], ...] = ()
    result: Optional[StepCpus] = None
    why: str = "step_thread_core off"
    setting: Optional[str] = None
    devices: Tuple[Optional[str], ...] = ()
    _derived: Tuple[object, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Fields as frozensets, tuples and StepCpus; the derived values from the planner."""
        if isinstance(self.usable, bool) or not isinstance(self.usable, int) or self.usable < 0:
            raise ValueError(f"usable must be a count of CPUs, got {self.usable!r}")
        set_ = object.__setattr__
        set_(self, "mask", frozenset(self.mask))
        set_(self, "workers", tuple(_step(w) for w in self.workers))
        set_(self, "result", _step(self.result))
        set_(self, "devices", tuple(None if d is None else str(d) for d in self.devices))
        derived = _cpuplan.derived(
            self.usable,
            [None if w is None else w.cpus for w in self.workers],
            None if self.result is None else self.result.cpus,
        )
        set_(self, "_derived", derived)

    @property
    def pinned(self) -> FrozenSet[int]:
        """Every pinned CPU: the workers' and the API server's."""
        return self._derived[0]  # type: ignore[return-value]

    @property
    def left(self) -> int:
        """The CPUs the quota lets run, less the pinned ones: what the pools are sized from. At least 1."""
        return self._derived[1]  # type: ignore[return-value]

    @property
    def preprocess_threads(self) -> int:
        """The API server's intra-op threads when neither the config nor the model sets them: a quarter of the CPUs left, 1 to 4."""
        return self._derived[2]  # type: ignore[return-value]

    @property
    def png_threads(self) -> int:
        """Threads one PNG deflates on: a quarter of the CPUs left, 1 to 4."""
        return self._derived[3]  # type: ignore[return-value]

    @property
    def encode_workers(self) -> int:
        """Outputs the data worker encodes at once, so that times png_threads stays within the CPUs left."""
        return self._derived[4]  # type: ignore[return-value]

    @property
    def copy_workers(self) -> int:
        """Threads a large output read copies over: one encode's share of the CPUs left."""
        return self._derived[5]  # type: ignore[return-value]


def parse_cpu_list(text: str) -> FrozenSet[int]:
    """The CPUs in a list such as 0-3,8,10-11 (as sysfs and taskset write them); empty for an empty string.

    Whitespace, newlines and a trailing NUL are tolerated; anything else that is not a cpu
    list (reversed ranges, empty items, ids past 8191) raises ValueError quoting the text.
    """
    return _cpuplan.parse_cpu_list(text)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """cpus as ranges, the inverse of parse_cpu_list."""
    return _cpuplan.format_cpu_list(cpus)


def process_mask(pid: Optional[int] = None, *, root: PathLike = "/") -> FrozenSet[int]:
    """The CPUs this process may run on; every CPU where affinity is unknown.

    For this process (``pid`` None) it is the calling thread's affinity, as
    ``os.sched_getaffinity(0)``; for another pid its ``Cpus_allowed_list`` in
    ``<root>/proc/<pid>/status`` (an OSError if that can't be read).
    """
    try:
        return _cpuplan.process_mask(pid, root)
    except OSError:
        if pid is not None:
            raise
        log.debug("cpuplan: the affinity is unknown; taking every CPU", exc_info=True)
        return frozenset(range(os.cpu_count() or 1))


def cgroup_cpu_quota(root: PathLike = "/", pid: Optional[int] = None) -> Optional[float]:
    """The tightest cgroup CPU quota over this process's cgroup and its ancestors, in CPUs; None when no level sets one.

    Every hierarchy counts (cgroup v2 ``cpu.max`` and v1 ``cpu.cfs_quota_us``), found through
    ``<root>/proc/self/mountinfo`` and ``<root>/proc/<pid or self>/cgroup``. A malformed limit
    file raises OSError naming it.
    """
    return _cpuplan.cgroup_cpu_quota(root, pid)


def usable_cpus(pid: Optional[int] = None, *, root: PathLike = "/") -> int:
    """CPUs this process may run on (its affinity, else os.cpu_count()), capped by the cgroup quota rounded down. At least 1."""
    return _cpuplan.usable(process_mask(pid, root=root), cgroup_cpu_quota(root, pid))


def smt_siblings(cpu: int, root: PathLike = "/") -> FrozenSet[int]:
    """The hardware threads of cpu's core, cpu included (``thread_siblings_list``, else ``core_cpus_list``, else just cpu)."""
    return _cpuplan.smt_siblings(cpu, root)


def _address(address: str) -> str:
    """A PCI address in the form sysfs uses (nvidia-smi's ``00000000:18:00.0`` becomes ``0000:18:00.0``); other text as given."""
    return normalize_pci(address) or address


def host_gpus(like: str, root: PathLike = "/") -> List[HostGpu]:
    """The host's GPUs in PCI address order: the functions with the vendor and class of the device at like (0000:40:00.0).

    Every process on the host sees the same list, whatever GPUs it was given; empty without
    sysfs (or without a device at like). ``node`` is the NUMA node as sysfs writes it
    (``"0"``), None for ``-1``; ``local`` the node's CPUs.
    """
    return [
        HostGpu(address, None if node is None else str(node), local)
        for address, node, local in _cpuplan.host_gpus(_address(like), root)
    ]


def _setting_text(setting: Union[str, int]) -> str:
    """A step_thread_core value as the planner reads it: off, auto or a CPU number."""
    if isinstance(setting, bool) or not isinstance(setting, (str, int)):
        raise TypeError(f"step_thread_core must be off, auto or a cpu number, not {setting!r}")
    return str(setting)


def deployment_plan(
    setting: Union[str, int],
    addresses: Sequence[Optional[str]],
    *,
    mask: Optional[Collection[int]] = None,
    usable: Optional[int] = None,
    root: PathLike = "/",
    siblings: Optional[Callable[[int], Iterable[int]]] = None,
) -> CpuPlan:
    """The plan for a deployment whose workers' devices sit at PCI addresses, in the conductor's worker order.

    None stands for a device sysfs doesn't place, such as a CPU worker; only auto reads the
    addresses (nvidia-smi's ``00000000:18:00.0`` form is accepted). off pins nothing. A CPU
    number is the first worker's CPU; the next workers take the next cores above it, and the
    API server the last core of the mask; a number outside the mask, or too near its top for
    every worker, raises CpuPlanError. auto places by device rank, and pins nothing, saying
    why in CpuPlan.why, when the mask is too small. Either way at least one CPU of the mask
    stays unpinned.

    ``mask`` defaults to process_mask(), ``usable`` to the mask's size capped by this
    process's cgroup quota. Sysfs (SMT siblings, PCI devices) is read under ``root``; a
    ``siblings`` callable (cpu → its core's CPUs) replaces sysfs for the SMT siblings.
    An unreadable or malformed sysfs file raises OSError naming it.
    """
    text = _setting_text(setting)
    addrs = [None if a is None else _address(str(a)) for a in addresses]
    mask_set = process_mask() if mask is None else frozenset(mask)
    if usable is None:
        usable = _cpuplan.usable(mask_set, cgroup_cpu_quota())
    canonical, (m, u, workers, result, why) = _cpuplan.deployment_plan(text, addrs, mask_set, usable, root, siblings)
    return CpuPlan(m, u, tuple(_step(w) for w in workers), _step(result), why, canonical, tuple(addrs))


def hook_plan(path: Optional[PathLike] = None) -> Optional[CpuPlan]:
    """The plan the hook wrote for this container, or None where there is none.

    With no ``path``: the file ``$CPUPLAN_PLAN`` names, else ``/run/cpuplan/plan.json``, else
    the ``CPUPLAN_*`` variables of ``plan.env`` in this process's environment. A plan that
    exists but does not parse raises ValueError; one that can't be read (or a ``path`` that
    does not exist) OSError. Its ``devices`` are the container's GPUs, one per worker.
    """
    found = _cpuplan.read_hook_plan(None if path is None else os.fspath(path))
    if found is None:
        return None
    setting, (m, u, workers, result, why), devices, _source = found
    return CpuPlan(m, u, tuple(_step(w) for w in workers), _step(result), why, setting, tuple(devices))


# The affinity of the thread that imported the package: the process mask while no plan says otherwise.
try:
    _FIRST_MASK: FrozenSet[int] = frozenset(os.sched_getaffinity(0))
except (AttributeError, OSError):  # pragma: no cover - not Linux
    _FIRST_MASK = frozenset(range(os.cpu_count() or 1))


class _State:
    """This process's plan state, changed only under ``lock``."""

    lock = threading.Lock()
    #: The plan install() set.
    installed: Optional[CpuPlan] = None
    #: Whether the hook's plan was read (since import or the last install(None)).
    hook_read = False
    #: The hook's plan, if one was found.
    hook: Optional[CpuPlan] = None
    #: Why the hook's plan could not be read, if it couldn't.
    hook_error: Optional[str] = None
    #: The plan that pins nothing, once made.
    unpinned: Optional[CpuPlan] = None


def _cached_hook_plan() -> Optional[CpuPlan]:
    """hook_plan(), read once (until install(None)); a plan that can't be read is warned about and taken as none."""
    with _State.lock:
        if not _State.hook_read:
            try:
                _State.hook = hook_plan()
            except (OSError, ValueError) as e:
                warnings.warn(f"cpuplan: ignoring the hook's plan: {e}", RuntimeWarning, stacklevel=3)
                _State.hook, _State.hook_error = None, str(e)
            _State.hook_read = True
        return _State.hook


def _unpinned() -> CpuPlan:
    """The plan that pins nothing: the mask at import, usable from it and the cgroup quota."""
    try:
        quota = cgroup_cpu_quota()
    except OSError as e:
        log.warning("cpuplan: %s; sizing pools without the cgroup quota", e)
        quota = None
    path = os.environ.get(PLAN_VAR) or DEFAULT_PLAN
    cause = _State.hook_error or f"no {path} and no CPUPLAN_MASK"
    why = f"no plan installed and no hook plan: {cause}; nothing pinned"
    return CpuPlan(_FIRST_MASK, _cpuplan.usable(_FIRST_MASK, quota), (), None, why, "off")


def plan() -> CpuPlan:
    """This process's plan: the one install set, else the hook's plan when there is one, else nothing pinned.

    The hook's plan is read once (hook_plan(): ``$CPUPLAN_PLAN``, ``/run/cpuplan/plan.json``,
    the ``CPUPLAN_*`` variables); one that can't be read is warned about (RuntimeWarning)
    and nothing is pinned. Nothing pinned is the mask of the thread that imported cpuplan,
    with usable capped by the cgroup quota.
    """
    installed = _State.installed
    if installed is not None:
        return installed
    found = _cached_hook_plan()
    if found is not None:
        return found
    with _State.lock:
        if _State.unpinned is None:
            _State.unpinned = _unpinned()
        return _State.unpinned


def install(new: Optional[CpuPlan]) -> None:
    """Make new this process's plan (None: back to the plan that plan() finds by itself, nothing pinned without a hook plan).

    install(None) also forgets the hook's plan read so far, so the next plan() reads it again.
    """
    if new is not None and not isinstance(new, CpuPlan):
        raise TypeError(f"install() takes a CpuPlan or None, not {type(new).__name__}")
    with _State.lock:
        _State.installed = new
        if new is None:
            _State.hook_read, _State.hook, _State.hook_error, _State.unpinned = False, None, None, None


def claim_gpus(
    addresses: Iterable[Optional[str]],
    *,
    claims_dir: Optional[PathLike] = None,
    wait: float = 2.0,
) -> Optional[str]:
    """Hold a lock on each GPU for the life of this process; if one can't be had, hold none of them and say why.

    auto depends only on the PCI address and the mask, so two servers on one GPU (two MIG
    instances report one address) would take the same CPUs. A claim is a file per GPU in the
    claims directory (``claims_dir``, else ``$CPUPLAN_CLAIMS_DIR``, else the hook's
    ``/run/cpuplan/claims``), naming this process (``pid-<pid>`` in scope ``python``, its pid and start time) and
    changed only under an flock of the directory's lock file, waited on for at most ``wait``
    seconds. A claim whose process is gone (or whose pid now runs another process) is stale
    and taken over, so a dead server leaves nothing to clean up; claiming again from the same
    process keeps its claims. None addresses (CPU workers) are skipped; an address that is no
    PCI address raises ValueError. The lock only reaches processes that share the directory.
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
