"""Load the plan, pin this thread as worker 0, start a helper thread on the process mask, print both threads' CPUs.

    CPUPLAN_LIB=target/debug/libcpuplan_shim.so python3 examples/python/worker.py [PLAN_JSON]
"""

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpuplan  # noqa: E402


def cpus():
    return ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))


def main():
    try:
        cpuplan.load(sys.argv[1] if len(sys.argv) > 1 else None)
    except OSError as e:
        print(f"no plan, running unpinned: {e}", file=sys.stderr)
        return 1
    print(f"plan: usable={cpuplan.usable()} left={cpuplan.left()} workers={cpuplan.workers()}")
    print("worker 0:", cpuplan.pin_worker(0, warm=lambda: print(f"warm cpus={cpus()}")))
    seen = {}
    helper = cpuplan.Thread(target=lambda: seen.update(helper=cpus()))
    helper.start()
    helper.join()
    print(f"main cpus={cpus()}")
    print(f"helper cpus={seen['helper']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
