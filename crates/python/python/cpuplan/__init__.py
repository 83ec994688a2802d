"""cpuplan: the CPUs a GPU container's threads should use, planned by the Rust planner in process.

``mstar.utils.cpus``'s API (planner) and ``mstar.utils.threads`` (threads) in one
package, with or without the cpuplan hook:

- the planner: parse_cpu_list, format_cpu_list, process_mask, usable_cpus,
  cgroup_cpu_quota, smt_siblings, host_gpus (HostGpu), deployment_plan, devices_plan,
  device_addresses, claim_gpus, CpuPlan (StepCpus), CpuPlanError, install, plan;
- finding "my worker": find_worker, pin_worker, pin_result, visible_gpus, hook_plan;
- threads: pin_thread, Thread, ThreadPool, to_process_mask.

plan() is the plan install() set, else the hook's plan (``$CPUPLAN_PLAN``,
``/run/cpuplan/plan.json``, or plan.env's ``CPUPLAN_*`` variables), else nothing pinned.
Importing never reads a plan and never fails for lack of one. Importing sets
``CUDA_DEVICE_ORDER=PCI_BUS_ID`` unless it is set, so that CUDA numbers devices in the PCI
address order cuda:N is resolved in (see cpuplan.devices). Documentation: docs/python.md.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

from .cpus import (  # noqa: E402
    CLAIMS_DIR_VAR,
    DEFAULT_CLAIMS_DIR,
    DEFAULT_PLAN,
    PLAN_VAR,
    CpuPlan,
    CpuPlanError,
    HostGpu,
    StepCpus,
    cgroup_cpu_quota,
    claim_gpus,
    deployment_plan,
    format_cpu_list,
    hook_plan,
    host_gpus,
    install,
    parse_cpu_list,
    plan,
    process_mask,
    smt_siblings,
    usable_cpus,
)
from .devices import Worker, device_addresses, devices_plan, find_worker, visible_gpus  # noqa: E402
from .threads import Thread, ThreadPool, pin_result, pin_thread, pin_worker, to_process_mask  # noqa: E402

__all__ = [
    "CLAIMS_DIR_VAR",
    "DEFAULT_CLAIMS_DIR",
    "DEFAULT_PLAN",
    "PLAN_VAR",
    "CpuPlan",
    "CpuPlanError",
    "HostGpu",
    "StepCpus",
    "Thread",
    "ThreadPool",
    "Worker",
    "cgroup_cpu_quota",
    "claim_gpus",
    "deployment_plan",
    "device_addresses",
    "devices_plan",
    "find_worker",
    "format_cpu_list",
    "hook_plan",
    "host_gpus",
    "install",
    "parse_cpu_list",
    "pin_result",
    "pin_thread",
    "pin_worker",
    "plan",
    "process_mask",
    "smt_siblings",
    "to_process_mask",
    "usable_cpus",
    "visible_gpus",
]
