"""The gain bench's workload, run inside the container: one fork-join op in a loop for a fixed time, each op timed.

    python workload.py numpy SECONDS
    python workload.py onnx SECONDS MODEL plain|cpuplan|env [THREADS]

numpy: a 384x384 float64 matmul (OpenBLAS from the numpy wheel), its pool as OpenBLAS sizes
it: OPENBLAS_NUM_THREADS when set (the hook's plan gives it; the bench sets it to simulate a
larger host), else the CPUs it sees. onnx: a 3-layer MLP (MatMul+Relu, batch 64, width 512)
in onnxruntime; ``plain`` leaves intra_op_num_threads to onnxruntime (THREADS when given, to
simulate a larger host), ``cpuplan`` sets it from the plan, the three-line change:

    import cpuplan
    plan = cpuplan.hook_plan() or cpuplan.plan()
    options.intra_op_num_threads = plan.left

``env`` sizes it from OMP_NUM_THREADS as torch sizes its intra-op pool (0: onnxruntime's
default), for the multi-process runs where a launcher or the plan sets the variable.

Prints one JSON line: the workload, its pool's threads, ops, seconds and each op's latency in ms.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Callable, List, Tuple


def numpy_op() -> Tuple[Callable[[], object], int]:
    """The matmul op, and the threads of the OpenBLAS pool it runs on (as OpenBLAS sized it: no code here changes it)."""
    import numpy as np
    from threadpoolctl import threadpool_info

    rng = np.random.default_rng(0)
    a, b = rng.random((384, 384)), rng.random((384, 384))
    pool = sum(i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas")
    return (lambda: a @ b), pool


def onnx_op(model: str, how: str, threads: int) -> Tuple[Callable[[], object], int]:
    """One inference of the MLP, and its intra-op threads (0: onnxruntime's default, the CPUs it sees)."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    if how == "cpuplan":
        import cpuplan

        plan = cpuplan.hook_plan() or cpuplan.plan()
        options.intra_op_num_threads = plan.left
    elif how == "env":
        import os

        options.intra_op_num_threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    elif threads:
        options.intra_op_num_threads = threads
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).random((64, 512), dtype=np.float32)
    return (lambda: session.run(None, {"x": x})), options.intra_op_num_threads


def main() -> int:
    """Run the op for SECONDS after a short warm-up; print the JSON line."""
    workload, seconds = sys.argv[1], float(sys.argv[2])
    if workload == "numpy":
        op, threads = numpy_op()
    else:
        op, threads = onnx_op(sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 0)
    for _ in range(5):
        op()
    latencies: List[float] = []
    start = time.perf_counter()
    end = start + seconds
    now = start
    while now < end:
        op()
        done = time.perf_counter()
        latencies.append((done - now) * 1000.0)
        now = done
    print(json.dumps({"workload": workload, "threads": threads, "ops": len(latencies), "seconds": now - start, "latencies_ms": latencies}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
