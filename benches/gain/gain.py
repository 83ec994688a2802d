"""The gain of cpuplan's plan on real libraries, measured under real runc with a CPU quota (run by benches/gain/run.sh, as root).

Each workload (benches/gain/workload.py: a numpy matmul loop on OpenBLAS; an onnxruntime
MLP) runs in a runc container with a cgroup CPU quota, in two variants, interleaved pass by
pass (the order flipped each pass, so drift in the machine's load falls on both):

- ``host``: no hook; the pool is sized to the host as the library sizes it (OpenBLAS and
  onnxruntime: the CPUs they see), or to ``--host-cpus`` threads to simulate a larger host
  (OPENBLAS_NUM_THREADS, intra_op_num_threads);
- ``plan``: the hook registered as podman registers it: its precreate stage applied to the
  bundle's config.json (the plan's OPENBLAS_NUM_THREADS/OMP_NUM_THREADS in the container's
  environment: no code change for numpy), createRuntime and poststop in config.json (the plan
  files: onnxruntime's three-line change reads ``cpuplan.hook_plan()``).

With ``--processes N`` (N >= 2) a launcher in the container starts N workload processes as
torchrun starts them (one per fake GPU, ``LOCAL_RANK`` set, the environment inherited,
``OMP_NUM_THREADS=1`` only where it is unset; onnxruntime's intra-op pool sized from
``OMP_NUM_THREADS`` as torch sizes its own), in three variants interleaved:

- ``launcher``: no hook, the launcher's default (one thread each);
- ``left``: the hook with ``cpuplan.pool-split: off``, today's container-wide ``left`` for
  every process (with ``--sim-left L``: ``OMP_NUM_THREADS=L``, the container-wide value a
  larger host's plan would give);
- ``shares``: the hook's default, each process's share (with ``--sim-left L``: the planner's
  share of L for N workers, from the cpuplan wheel).

The rootfs is busybox-static with the host's /usr, the interpreter's prefix and the bench's
venv bind-mounted read-only (no registry, no image); the venv at /venv, so the checkout may be
anywhere, under /tmp too (the container's own /tmp is a tmpfs). It prints ops/s and p50/p99
latency per variant with the ratios, writes the figures as JSON and draws the latency
distributions to a PNG.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

HERE = Path(__file__).resolve().parent
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where the bench's venv is in the container: a path of its own, not the host's, which may lie
# under a directory the container mounts a tmpfs on (a checkout under /tmp).
VENV = "/venv"


def ro_bind(path: str) -> Dict[str, object]:
    """A read-only bind mount of host path at the same path in the container."""
    return {"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]}


def make_model(path: Path) -> None:
    """The onnxruntime workload's model: x[64,512] -> 3 x (MatMul 512x512, Relu)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, last = [], [], "x"
    for i in range(3):
        w = numpy_helper.from_array((rng.random((512, 512), dtype=np.float32) - 0.5) / 16, f"w{i}")
        inits.append(w)
        nodes += [helper.make_node("MatMul", [last, f"w{i}"], [f"m{i}"]), helper.make_node("Relu", [f"m{i}"], [f"r{i}"])]
        last = f"r{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 512])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [64, 512])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    path.write_bytes(model.SerializeToString())


class Bench:
    """The bundles, the hook and the runs."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        """Lay out the rootfs, the model and the hook config under work."""
        self.args = args
        self.work = work
        self.venv = Path(args.venv).resolve()
        self.hook = str(Path(args.hook).resolve())
        self.rootfs = work / "rootfs"
        for d in ("bin", "proc", "sys", "dev", "run", "tmp", "etc", "bench", "venv"):
            (self.rootfs / d).mkdir(parents=True)
        shutil.copy(shutil.which("busybox") or "/bin/busybox", self.rootfs / "bin/busybox")
        os.symlink("busybox", self.rootfs / "bin/sh")
        # The tmpfs mounts first: a bind below /run or /tmp (an interpreter's prefix there)
        # then lands on the tmpfs instead of being hidden by it.
        self.mounts: List[Dict[str, object]] = [
            {"destination": tmpfs, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777" if tmpfs == "/tmp" else "mode=755"]}
            for tmpfs in ("/run", "/tmp")
        ]
        self.mounts.append(ro_bind("/usr"))
        for lib in ("/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(lib):
                os.symlink(os.readlink(lib), self.rootfs / lib.lstrip("/"))
            elif os.path.isdir(lib):
                self.mounts.append(ro_bind(lib))
        base = os.path.realpath(sys.base_prefix)
        if not base.startswith("/usr/"):
            self.mounts.append(ro_bind(base))
        self.mounts.append({"destination": VENV, "type": "bind", "source": str(self.venv), "options": ["rbind", "ro"]})
        self.mounts.append({"destination": "/bench", "type": "bind", "source": str(HERE), "options": ["rbind", "ro"]})
        self.model = work / "model" / "mlp.onnx"
        self.model.parent.mkdir()
        make_model(self.model)
        self.mounts.append({"destination": "/model", "type": "bind", "source": str(self.model.parent), "options": ["rbind", "ro"]})
        self.hook_config = work / "hook.json"
        hook = {"claims_dir": str(work / "claims"), "log": str(work / "hook.log")}
        if args.processes > 1:
            hook["topology_root"] = str(self.fake_host(work / "host", args.processes))
        self.hook_config.write_text(json.dumps(hook))
        self.runs = 0

    def config(self, cid: str, args: List[str], env: List[str], hooked: bool, annotations: Optional[Dict[str, str]] = None, gpus: int = 0) -> dict:
        """runc spec's config.json for the workload args, with the quota, the annotations and gpus fake GPUs (the fake host's); through the hook's precreate when hooked."""
        spec_dir = self.work / "spec"
        if not spec_dir.exists():
            spec_dir.mkdir()
            subprocess.run(["runc", "spec"], cwd=spec_dir, check=True)
        config = json.loads((spec_dir / "config.json").read_text())
        config["root"] = {"path": str(self.rootfs), "readonly": True}
        config["process"].update(terminal=False, args=args)
        config["process"]["env"] = [PATH, "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp", *env]
        config["mounts"] += self.mounts
        period = 100000
        config["linux"].setdefault("resources", {})["cpu"] = {"quota": int(self.args.quota * period), "period": period}
        config["linux"]["cgroupsPath"] = f"/{cid}"
        if annotations:
            config["annotations"] = annotations
        if gpus:
            config["linux"]["devices"] = [
                {"path": f"/dev/nvidia{m}", "type": "c", "major": 195, "minor": m, "fileMode": 0o666, "uid": 0, "gid": 0} for m in range(gpus)
            ]
        if hooked:
            argv = [self.hook, "--config", str(self.hook_config), "hook"]
            config["hooks"] = {stage: [{"path": self.hook, "args": [*argv, stage], "env": [PATH], "timeout": 30}] for stage in ("createRuntime", "poststop")}
            out = subprocess.run([self.hook, "--config", str(self.hook_config), "precreate"], input=json.dumps(config), capture_output=True, text=True, check=True)
            config = json.loads(out.stdout)
        return config

    @staticmethod
    def fake_host(root: Path, gpus: int) -> Path:
        """This machine's CPUs with gpus fake NVIDIA GPUs (minors 0..gpus-1, local to every CPU), as the hook's topology_root: the tests' e2e host, grown."""
        cpus = sorted(os.sched_getaffinity(0))
        online = f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 else str(cpus[0])
        system = root / "sys/devices/system"
        (system / "node/node0").mkdir(parents=True)
        (system / "node/node0/cpulist").write_text(online + "\n")
        (system / "cpu").mkdir(parents=True, exist_ok=True)
        (system / "cpu/online").write_text(online + "\n")
        for c in cpus:
            (system / f"cpu/cpu{c}/topology").mkdir(parents=True)
            (system / f"cpu/cpu{c}/topology/thread_siblings_list").write_text(f"{c}\n")
        for m in range(gpus):
            address = f"0000:{0x3b + m:02x}:00.0"
            dev = root / "sys/bus/pci/devices" / address
            dev.mkdir(parents=True)
            for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("numa_node", "0"), ("local_cpulist", online)):
                (dev / name).write_text(value + "\n")
            info = root / "proc/driver/nvidia/gpus" / address
            info.mkdir(parents=True)
            (info / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-5d1b2c3e-0000-4a6f-9c1d-{m:012x}\nBus Location: \t {address}\nDevice Minor: \t {m}\n")
        return root

    def share(self) -> int:
        """A worker process's share of --sim-left for --processes workers, as the planner decides it."""
        import cpuplan

        n, left = self.args.processes, self.args.sim_left
        plan = cpuplan.CpuPlan(frozenset(range(left)), left, tuple([None] * n))
        return plan.worker_threads

    def run_multi(self, workload: str, variant: str) -> dict:
        """One container of --processes workload processes started as torchrun starts them, in variant."""
        n, seconds = self.args.processes, str(self.args.seconds)
        if workload == "numpy":
            child = f"{VENV}/bin/python /bench/workload.py numpy {seconds}"
        else:
            child = f"{VENV}/bin/python /bench/workload.py onnx {seconds} /model/mlp.onnx env"
        # Each process's result line (tens of KB, past PIPE_BUF) goes to a file of its own and
        # is printed after all are done: N writers on one pipe interleave such lines.
        script = (
            f'i=0; while [ $i -lt {n} ]; do (export LOCAL_RANK=$i; '
            f'[ -n "$OMP_NUM_THREADS" ] || export OMP_NUM_THREADS=1; exec {child} > /tmp/result.$i) & i=$((i+1)); done; wait; '
            f'for f in /tmp/result.*; do busybox cat $f; done'
        )
        env: List[str] = []
        if self.args.sim_left and variant != "launcher":
            threads = self.args.sim_left if variant == "left" else self.share()
            env += [f"OMP_NUM_THREADS={threads}", f"OPENBLAS_NUM_THREADS={threads}"]
        self.runs += 1
        cid = f"cpuplan-gain-{os.getpid()}-{self.runs}"
        annotations = {"cpuplan.pool-split": "off"} if variant == "left" else {}
        config = self.config(cid, ["/bin/sh", "-c", script], env, hooked=variant != "launcher", annotations=annotations, gpus=n)
        out = self.execute(cid, config, f"{workload}/{variant}")
        lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(lines) == n, f"{n} workers, {len(lines)} results: {out}"
        return {
            "ops": sum(r["ops"] for r in lines),
            "seconds": max(r["seconds"] for r in lines),
            "latencies_ms": [x for r in lines for x in r["latencies_ms"]],
            "threads": sum(int(r["threads"]) for r in lines),
            "env": sorted(e for e in config["process"]["env"] if e.split("=")[0] in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CPUPLAN_LEFT", "CPUPLAN_WORKER_THREADS")),
        }

    def execute(self, cid: str, config: dict, what: str) -> str:
        """runc run of config as container cid; its stdout."""
        bundle = self.work / f"bundle-{self.runs}"
        bundle.mkdir()
        (bundle / "config.json").write_text(json.dumps(config))
        state = self.work / "state"
        try:
            out = subprocess.run(["timeout", str(int(self.args.seconds) + 120), "runc", "--root", str(state), "run", "--bundle", str(bundle), cid], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        finally:
            subprocess.run(["runc", "--root", str(state), "delete", "-f", cid], capture_output=True)
            for leftover in [Path("/sys/fs/cgroup", cid), *Path("/sys/fs/cgroup").glob(f"*/{cid}")]:
                try:
                    leftover.rmdir()
                except OSError:
                    pass
        if out.returncode != 0:
            log = (self.work / "hook.log").read_text() if (self.work / "hook.log").exists() else ""
            raise SystemExit(f"runc run {what} failed ({out.returncode}): {out.stderr}\n{out.stdout}\nhook log:\n{log}")
        return out.stdout

    def run(self, workload: str, variant: str) -> dict:
        """One container run of workload in variant; its JSON line, with the thread variables it got."""
        if self.args.processes > 1:
            return self.run_multi(workload, variant)
        seconds = str(self.args.seconds)
        host = self.args.host_cpus
        simulated = host != len(os.sched_getaffinity(0))
        env: List[str] = []
        if workload == "numpy":
            args = [f"{VENV}/bin/python", "/bench/workload.py", "numpy", seconds]
            if variant == "host" and simulated:
                env.append(f"OPENBLAS_NUM_THREADS={host}")
        else:
            how = "cpuplan" if variant == "plan" else "plain"
            args = [f"{VENV}/bin/python", "/bench/workload.py", "onnx", seconds, "/model/mlp.onnx", how]
            if variant == "host" and simulated:
                args.append(str(host))
        self.runs += 1
        cid = f"cpuplan-gain-{os.getpid()}-{self.runs}"
        config = self.config(cid, args, env, hooked=variant == "plan")
        stdout = self.execute(cid, config, f"{workload}/{variant}")
        result = json.loads(stdout.strip().splitlines()[-1])
        result["env"] = sorted(e for e in config["process"]["env"] if e.split("=")[0] in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "CPUPLAN_LEFT"))
        return result


def percentile(values: List[float], q: float) -> float:
    """The q-th percentile (0-100), nearest rank."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(q / 100.0 * len(ordered) + 0.5)) - 1))
    return ordered[k]


def summarize(runs: List[dict]) -> Dict[str, object]:
    """Throughput and latency over a variant's runs."""
    lat = [x for r in runs for x in r["latencies_ms"]]
    ops = sum(r["ops"] for r in runs)
    secs = sum(r["seconds"] for r in runs)
    return {
        "ops": ops,
        "ops_per_pass": [r["ops"] for r in runs],
        "ops_per_s": ops / secs,
        "p50_ms": statistics.median(lat),
        "p99_ms": percentile(lat, 99),
        "threads": runs[0]["threads"],
        "env": runs[0]["env"],
    }


def plot(results: Dict[str, Dict[str, List[dict]]], summary: Dict[str, Dict[str, dict]], title: str, png: Path) -> None:
    """The latency distributions (CDF, log-scaled latency), one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.2), squeeze=False)
    labels = {
        "host": "pool sized to the host",
        "plan": "pool from cpuplan's plan",
        "launcher": "launcher's default",
        "left": "container-wide left",
        "shares": "per-process shares",
    }
    colors = {"host": "#c0392b", "plan": "#2471a3", "launcher": "#7f8c8d", "left": "#c0392b", "shares": "#2471a3"}
    for ax, (workload, variants) in zip(axes[0], results.items()):
        for variant, runs in variants.items():
            lat = sorted(x for r in runs for x in r["latencies_ms"])
            s = summary[workload][variant]
            ys = [(i + 1) / len(lat) for i in range(len(lat))]
            threads = "default threads" if not s["threads"] else f"{s['threads']} thread{'s' if s['threads'] != 1 else ''} in all"
            ax.plot(lat, ys, color=colors[variant], label=f"{labels[variant]} ({threads}): p50 {s['p50_ms']:.1f}, p99 {s['p99_ms']:.1f} ms")
            ax.axvline(s["p99_ms"], color=colors[variant], linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("latency of one op (ms, log scale)")
        ax.set_ylabel("fraction of ops")
        ax.set_title({"numpy": "numpy matmul 384x384 (OpenBLAS)", "onnx": "onnxruntime MLP 64x512"}[workload])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def versions() -> Dict[str, str]:
    """The libraries' versions in the bench's venv."""
    out = {}
    for mod in ("numpy", "onnxruntime", "cpuplan"):
        try:
            out[mod] = __import__(mod).__version__ if mod != "cpuplan" else "wheel"
        except ImportError:
            out[mod] = "missing"
    try:
        from threadpoolctl import threadpool_info

        out["openblas"] = ",".join(sorted({i["version"] for i in threadpool_info() if i.get("internal_api") == "openblas"}))
    except ImportError:
        pass
    return out


def main() -> int:
    """Parse the arguments, run the passes, print and write the figures."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hook", required=True, help="the cpuplan-hook binary")
    p.add_argument("--venv", required=True, help="the venv with numpy, onnxruntime and the cpuplan wheel")
    p.add_argument("--quota", type=float, default=0.5, help="the container's CPU quota in CPUs (default 0.5)")
    p.add_argument("--host-cpus", type=int, default=len(os.sched_getaffinity(0)), help="the host size the host-sized pool is sized to (default: this machine's CPUs; larger simulates a larger host)")
    p.add_argument("--seconds", type=float, default=6.0, help="each run's measured time (default 6)")
    p.add_argument("--passes", type=int, default=2, help="interleaved passes (default 2)")
    p.add_argument("--workloads", default="numpy,onnx", help="numpy, onnx or both (default)")
    p.add_argument("--processes", type=int, default=1, help="workload processes per container, started as torchrun starts them (default 1: the two-variant bench)")
    p.add_argument("--sim-left", type=int, default=0, help="with --processes: the container-wide left a larger host's plan gives (default 0: this machine's plan)")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--png", type=Path, help="draw the latency distributions here")
    args = p.parse_args()
    assert os.geteuid() == 0, "the gain bench runs containers: run it as root"
    for tool in ("runc", "busybox"):
        assert shutil.which(tool), f"{tool} is missing: apt-get install -y runc busybox-static"
    workloads = args.workloads.split(",")
    load_before = os.getloadavg()
    variants = ["launcher", "left", "shares"] if args.processes > 1 else ["host", "plan"]
    results: Dict[str, Dict[str, List[dict]]] = {w: {v: [] for v in variants} for w in workloads}
    with tempfile.TemporaryDirectory(prefix="cpuplan-gain-") as tmp:
        bench = Bench(args, Path(tmp))
        for n in range(args.passes):
            order = variants[n % len(variants) :] + variants[: n % len(variants)]
            for workload in workloads:
                for variant in order:
                    r = bench.run(workload, variant)
                    results[workload][variant].append(r)
                    print(f"pass {n + 1} {workload:5} {variant:8}: {r['ops']:5} ops in {r['seconds']:.1f} s, threads {r['threads'] or 'default'} {' '.join(r['env'])}", flush=True)
    load_after = os.getloadavg()
    summary = {w: {v: summarize(runs) for v, runs in vs.items()} for w, vs in results.items()}
    cpus = len(os.sched_getaffinity(0))
    if args.processes > 1:
        sim = f", container-wide left simulated = {args.sim_left}" if args.sim_left else ""
        title = f"{args.processes} processes, {args.quota:g}-CPU quota on a {cpus}-CPU machine{sim}; {args.passes} interleaved passes of {args.seconds:g} s; load {load_before[0]:.2f} -> {load_after[0]:.2f}"
    else:
        title = f"{args.quota:g}-CPU quota on a {cpus}-CPU machine, host-sized pool = {args.host_cpus} threads; {args.passes} interleaved passes of {args.seconds:g} s; load {load_before[0]:.2f} -> {load_after[0]:.2f}"
    print(f"\n{title}")
    print(f"{'workload':9} {'variant':5} {'threads':>8} {'ops/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
    ratios = {}
    for w, vs in summary.items():
        for v, s in vs.items():
            print(f"{w:9} {v:8} {str(s['threads'] or 'default'):>8} {s['ops_per_s']:8.1f} {s['p50_ms']:8.2f} {s['p99_ms']:8.2f}")
        pairs = [("shares", "left"), ("shares", "launcher")] if args.processes > 1 else [("plan", "host")]
        for new, base in pairs:
            r = {
                "throughput": vs[new]["ops_per_s"] / vs[base]["ops_per_s"],
                "p50": vs[base]["p50_ms"] / vs[new]["p50_ms"],
                "p99": vs[base]["p99_ms"] / vs[new]["p99_ms"],
            }
            ratios.setdefault(w, {})[f"{new}/{base}"] = r
            print(f"{w:9} ratio {new}/{base}: throughput x{r['throughput']:.2f}, p50 x{r['p50']:.2f} lower, p99 x{r['p99']:.2f} lower")
    info = {"quota": args.quota, "cpus": cpus, "host_cpus": args.host_cpus, "processes": args.processes, "sim_left": args.sim_left, "seconds": args.seconds, "passes": args.passes, "load": [load_before, load_after], "versions": versions(), "summary": summary, "ratios": ratios}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(info, indent=2))
    if args.png:
        plot(results, summary, title, args.png)
        print(f"latency distributions: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
