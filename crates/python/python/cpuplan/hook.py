"""The plan the cpuplan hook (or NRI plugin) wrote into this container, read by one explicit call: hook_plan().

Nothing in cpuplan.cpus reads it: ``cpuplan.plan()`` is the installed plan, else nothing
pinned, as in ``mstar.utils.cpus``. ``install(hook_plan())`` makes the hook's plan this
process's (``None`` where there is none: nothing pinned).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple, Union

from . import _cpuplan
from .cpus import CpuPlan, StepCpus, _steps

__all__ = ["DEFAULT_PLAN", "HookPlan", "PLAN_VAR", "hook_plan"]

#: Where the hook writes the plan inside the container.
DEFAULT_PLAN: str = _cpuplan.DEFAULT_PLAN
#: The variable naming another plan file than DEFAULT_PLAN.
PLAN_VAR: str = _cpuplan.PLAN_VAR

PathLike = Union[str, "os.PathLike[str]"]

_log = logging.getLogger("cpuplan")
#: The $CPUPLAN_PLAN values already warned about (once each: plan(refresh=True) may poll).
_warned: set = set()


@dataclass
class HookPlan(CpuPlan):
    """A CpuPlan as cpuplan's planner makes it (the hook's, the NRI plugin's, cpuplan.host.deployment_plan's), with what the seed's CpuPlan leaves out.

    ``setting`` is the step_thread_core value it was made with, ``devices`` each worker's PCI
    address (None for a CPU worker), which is what a worker is found by
    (``cpuplan.find_worker``), and ``result_core`` the API server's whole core and why
    (a StepCpus, as a worker's): the planner reserves all of it, so ``pinned`` and ``left``
    count all of it (as the hook's ``plan.json`` and ``OMP_NUM_THREADS`` do) while ``result``
    is its lowest CPU, as the seed's int. ``source`` is where hook_plan() read it (a file, or
    the environment's variables), None for a plan made in process: only the hook's plan's
    devices are the container's GPUs, which ``cuda:N`` counts.
    """

    setting: Optional[str] = None
    devices: Tuple[Optional[str], ...] = ()
    result_core: Optional[StepCpus] = None
    source: Optional[str] = None
    pool_split: str = "per-process"

    def _split(self) -> str:
        """The plan's own pool_split (the hook's config or the container's cpuplan.pool-split)."""
        return self.pool_split

    def _result_cpus(self) -> Optional[Iterable[int]]:
        """result_core's CPUs while result is one of them, else result's CPU."""
        if self.result is None:
            return None
        if self.result_core is not None and self.result in self.result_core.cpus:
            return self.result_core.cpus
        return (self.result,)

    @classmethod
    def _planned(cls, setting: str, planned: tuple, devices: Iterable[Optional[str]], source: Optional[str] = None, pool_split: str = "per-process") -> "HookPlan":
        """A HookPlan from the planner's (mask, usable, workers, result, why)."""
        mask, usable, workers, result, why = planned
        core = _steps([result])[0]
        return cls(
            frozenset(mask),
            usable,
            _steps(workers),
            None if core is None else min(core.cpus),
            why,
            setting,
            tuple(None if d is None else str(d) for d in devices),
            core,
            source,
            pool_split,
        )


def hook_plan(path: Optional[PathLike] = None) -> Optional[HookPlan]:
    """The plan the hook wrote for this container, or None where there is none.

    With no ``path``: the file ``$CPUPLAN_PLAN`` names, else ``/run/cpuplan/plan.json``, else
    the ``CPUPLAN_*`` variables of ``plan.env`` in this process's environment (a ``$CPUPLAN_PLAN``
    naming no file is logged once as a warning on the ``cpuplan`` logger, then the variables are
    looked for, so that a container started without its plan mount still starts). A plan that
    exists but does not parse raises ValueError; one that can't be read (or a ``path`` that
    does not exist) OSError. Its ``devices`` are the container's GPUs, one per worker. Read
    anew at each call.
    """
    if path is None:
        named = os.environ.get(PLAN_VAR)
        if named and named not in _warned and not os.path.exists(named):
            _warned.add(named)
            _log.warning("cpuplan: $%s names %s, which does not exist: no plan file; looking for the CPUPLAN_* variables", PLAN_VAR, named)
    found = _cpuplan.read_hook_plan(None if path is None else os.fspath(path))
    if found is None:
        return None
    setting, planned, devices, source, pool_split = found
    return HookPlan._planned(setting, planned, devices, source, pool_split)
