"""cpuplan: the CPUs a GPU container's threads should use, planned by the Rust planner in process.

``cpuplan.cpus`` is ``mstar.utils.cpus`` and ``cpuplan.threads`` is ``mstar.utils.threads``,
name for name, signature for signature; their names are here too. What cpuplan adds has
names of its own:

- the hook's plan: ``hook_plan()`` (read only when called), ``HookPlan``;
  ``install(hook_plan())`` makes it this process's plan;
- finding and pinning "my worker": ``find_worker``, ``pin_worker``, ``pin_result``,
  ``visible_gpus``, ``Worker``, ``pin_thread_warm``, ``to_process_mask``;
- ``use_pci_bus_order()``: ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless set;
- ``cpuplan.host``: pids and host roots, the quota over cgroup v1 and v2, the hook's claims.

Importing reads no plan, changes no environment variable and never fails for lack of a
plan. Documentation: docs/python.md.
"""

from __future__ import annotations

from . import cpus, host, threads
from ._cpuplan import __version__
from .cpus import (
    CpuPlan,
    CpuPlanError,
    HostGpu,
    StepCpus,
    cgroup_cpu_quota,
    claim_gpus,
    deployment_plan,
    device_addresses,
    devices_plan,
    format_cpu_list,
    host_gpus,
    install,
    parse_cpu_list,
    plan,
    process_mask,
    smt_siblings,
    usable_cpus,
)
from .hook import DEFAULT_PLAN, PLAN_VAR, HookPlan, hook_plan
from .threads import Thread, ThreadPool, pin_thread
from .workers import Worker, find_worker, pin_result, pin_thread_warm, pin_worker, to_process_mask, use_pci_bus_order, visible_gpus

__all__ = [
    "DEFAULT_PLAN",
    "PLAN_VAR",
    "CpuPlan",
    "CpuPlanError",
    "HookPlan",
    "HostGpu",
    "StepCpus",
    "Thread",
    "ThreadPool",
    "Worker",
    "cgroup_cpu_quota",
    "claim_gpus",
    "cpus",
    "deployment_plan",
    "device_addresses",
    "devices_plan",
    "find_worker",
    "format_cpu_list",
    "hook_plan",
    "host",
    "host_gpus",
    "install",
    "parse_cpu_list",
    "pin_result",
    "pin_thread",
    "pin_thread_warm",
    "pin_worker",
    "plan",
    "process_mask",
    "smt_siblings",
    "threads",
    "to_process_mask",
    "use_pci_bus_order",
    "visible_gpus",
]
