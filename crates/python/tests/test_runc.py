"""A Python worker loads the hook's plan inside a real runc container.

The container is a busybox-static rootfs with the hook registered at createRuntime and
poststop (as tests/runtimes/e2e_runc.rs does), on the one-GPU fixture host tests/fixtures/e2e-host.
Python is not in busybox: the host's /usr (and /lib, /lib64), the base interpreter's prefix
and the venv holding the wheel are bind-mounted read-only at their own paths, so the venv's
python runs unchanged inside. Runs as root with runc and busybox-static installed (CI
installs them); it fails, never skips, without them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple


def require_runc() -> str:
    """The busybox binary; fails unless root with runc and a static busybox."""
    assert os.geteuid() == 0, "the runc test runs as root (CI does)"
    assert shutil.which("runc"), "runc is missing: apt-get install -y runc (.ci/run does)"
    busybox = shutil.which("busybox")
    assert busybox, "busybox is missing: apt-get install -y busybox-static (.ci/run does)"
    return busybox


def ro_bind(path: str) -> Dict[str, object]:
    """A read-only bind mount of host path at the same path in the container."""
    return {"destination": path, "type": "bind", "source": path, "options": ["rbind", "ro"]}


def python_mounts(rootfs: Path, venv: Path) -> List[Dict[str, object]]:
    """Mounts that make the venv's python run in rootfs: /usr, /lib*, the base prefix, the venv."""
    mounts = [ro_bind("/usr")]
    for lib in ("/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(lib):
            os.symlink(os.readlink(lib), rootfs / lib.lstrip("/"))
        elif os.path.isdir(lib):
            mounts.append(ro_bind(lib))
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/usr/"):
        mounts.append(ro_bind(base))
    mounts.append(ro_bind(str(venv)))
    return mounts


def host_dir_snapshot() -> List[Tuple[str, int]]:
    """Every path under the host's /run/cpuplan with its mtime ([] when it does not exist)."""
    root = Path("/run/cpuplan")
    if not root.exists():
        return []
    return sorted((str(p), p.lstat().st_mtime_ns) for p in [root, *root.rglob("*")])


def test_a_python_worker_loads_the_hooks_plan_in_a_runc_container(repo: Path, stages_bin: str, venv: Path, tmp_path: Path) -> None:
    busybox = require_runc()
    tag = f"cpuplan-py-{os.getpid()}"
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for d in ("bin", "proc", "sys", "dev", "run", "tmp", "etc", "opt/example"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy(busybox, rootfs / "bin/busybox")
    for applet in ("sh", "cat", "echo"):
        os.symlink("busybox", rootfs / "bin" / applet)
    spec = subprocess.run(["runc", "spec"], cwd=bundle, capture_output=True, text=True)
    assert spec.returncode == 0, spec.stderr
    config = json.loads((bundle / "config.json").read_text())

    hook_config = tmp_path / "hook.json"
    # Every directory the hook writes is private: claims, the host inventory, the log. The
    # host's /run/cpuplan and /var/log are the machine's.
    hook_config.write_text(
        json.dumps(
            {
                "topology_root": str(repo / "tests/fixtures/e2e-host"),
                "claims_dir": str(tmp_path / "claims"),
                "inventory_dir": str(tmp_path / "inventory"),
                "log": str(tmp_path / "hook.log"),
            }
        )
    )
    host_dir_before = host_dir_snapshot()
    argv = [stages_bin, "--config", str(hook_config), "hook"]
    path = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    config["hooks"] = {stage: [{"path": stages_bin, "args": [*argv, stage], "env": [path], "timeout": 30}] for stage in ("createRuntime", "poststop")}

    py = str(venv / "bin/python")
    script = (
        f"{py} /opt/example/worker.py cuda:0 && "
        f"{py} -c 'import cpuplan; p = cpuplan.hook_plan(); w = cpuplan.find_worker(\"00000000:3B:00.0\", plan=p); "
        "print(w.index, w.device, w.cpus, w.why == p.why, cpuplan.visible_gpus(plan=p), cpuplan.plan().why)'"
    )
    config["process"].update(terminal=False, args=["/bin/sh", "-c", script])
    config["process"]["env"] += ["NVIDIA_VISIBLE_DEVICES=0", "PYTHONDONTWRITEBYTECODE=1"]
    config["root"]["readonly"] = False
    # The GPU's device node, as NVIDIA's toolkit gives it (the variable alone is never claimed).
    config["linux"]["devices"] = [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 0o666, "uid": 0, "gid": 0}]
    config["linux"]["cgroupsPath"] = f"/{tag}"
    config["linux"].setdefault("resources", {})["cpu"] = {"quota": 100000, "period": 100000}
    config["mounts"] += [
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=755"]},
        {"destination": "/opt/example", "type": "bind", "source": str(repo / "crates/python/examples"), "options": ["rbind", "ro"]},
        *python_mounts(rootfs, venv),
    ]
    (bundle / "config.json").write_text(json.dumps(config, indent=2))

    state = tmp_path / "state"
    try:
        out = subprocess.run(
            ["timeout", "120", "runc", "--root", str(state), "run", "--bundle", str(bundle), tag],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
    finally:
        subprocess.run(["runc", "--root", str(state), "delete", "-f", tag], capture_output=True)
        for leftover in [Path("/sys/fs/cgroup", tag), *Path("/sys/fs/cgroup").glob(f"*/{tag}")]:
            try:
                leftover.rmdir()
            except OSError:
                pass
    log = (tmp_path / "hook.log").read_text() if (tmp_path / "hook.log").exists() else ""
    assert out.returncode == 0, f"runc run failed: {out.stderr}\n{out.stdout}\nhook log:\n{log}"

    # The hook narrowed the container to the GPU's local CPU 1, which holds its 1 usable CPU;
    # one core cannot hold a worker and the API server, so auto pins nothing and says why.
    lines = out.stdout.splitlines()
    assert lines[0] == "plan: setting=auto mask=1 usable=1 left=1 devices=0000:3b:00.0", out.stdout
    assert lines[1].startswith("why: step_thread_core auto:") and "cpuset 1" in lines[1], lines[1]
    assert lines[2].startswith("cuda:0: worker 0 (0000:3b:00.0) unpinned: step_thread_core auto:"), lines[2]
    assert lines[3:6] == ["main cpus=1", "helper cpus=1", "pool cpus=1"]
    assert "fewer than 2 per GPU; nothing pinned" in lines[2]
    # plan() reads no file: the hook's plan waits to be installed, and its why says where.
    no_plan = "no plan installed: install(cpuplan.hook_plan()) installs the one in /run/cpuplan/plan.json"
    assert lines[6:] == [f"0 0000:3b:00.0 None True ['0000:3b:00.0'] {no_plan}"], out.stdout
    assert f"container {tag}: pid" in log and "released 1 GPU claim" in log, log
    # The hook kept its inventory where its config said, and left the host's directory as it was.
    assert host_dir_snapshot() == host_dir_before, "the hook wrote under the host's /run/cpuplan"
    assert (tmp_path / "inventory").is_dir(), "the hook did not use its private inventory_dir"

