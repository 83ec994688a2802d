"""A GPU worker process on the cpuplan package: find this worker in the plan, pin its step thread, start helpers on the process mask.

    python worker.py [DEVICE]    # DEVICE: cuda:N (default cuda:0), N, or a PCI address

The plan is the hook's, installed as this process's: inside a container the hook planned,
its /run/cpuplan/plan.json ($CPUPLAN_PLAN names another file); without one, nothing is
pinned and the worker still runs.
"""

from __future__ import annotations

import os
import sys

import cpuplan


def cpus() -> str:
    """The calling thread's CPUs as a cpu list."""
    return cpuplan.format_cpu_list(os.sched_getaffinity(0))


def main() -> int:
    """Print the plan, pin this thread as the worker of DEVICE, and print where this thread, a Thread and a ThreadPool run."""
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda:0"
    cpuplan.install(cpuplan.hook_plan())  # the hook's plan; None (no plan): nothing pinned
    plan = cpuplan.plan()
    setting = getattr(plan, "setting", None) or "off"
    devices = ",".join(d or "-" for d in getattr(plan, "devices", ()))
    print(f"plan: setting={setting} mask={cpuplan.format_cpu_list(plan.mask)} usable={plan.usable} left={plan.left} devices={devices}")
    print(f"why: {plan.why}")
    worker = cpuplan.pin_worker(device, warm=lambda: print(f"warm cpus={cpus()}"))
    if worker is None:
        print(f"{device}: no worker of the plan")
    elif worker.cpus is None:
        print(f"{device}: worker {worker.index} ({worker.device}) unpinned: {worker.why}")
    else:
        print(f"{device}: worker {worker.index} ({worker.device}) pinned to cpus {cpuplan.format_cpu_list(worker.cpus)}: {worker.why}")
    seen = {}
    helper = cpuplan.Thread(target=lambda: seen.update(helper=cpus()))
    helper.start()
    helper.join()
    with cpuplan.ThreadPool(max_workers=2) as pool:
        pooled = pool.submit(cpus).result()
    print(f"main cpus={cpus()}")
    print(f"helper cpus={seen['helper']}")
    print(f"pool cpus={pooled}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
