"""Fixtures the pytest suite shares: the repository, the binaries, two CPUs, and a process with no plan.

The suite runs on the installed wheel (scripts/python-test.sh), which sets CPUPLAN_REPO,
CPUPLAN_BIN, CPUPLAN_HOOK and CPUPLAN_VENV; a missing one fails the test that needs it, never
skips it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

import cpuplan

#: Variables that would hand a test a plan, a claims dir or GPUs it did not ask for.
PLAN_VARS = [
    "CPUPLAN_MASK",
    "CPUPLAN_USABLE",
    "CPUPLAN_WORKERS",
    "CPUPLAN_DEVICES",
    "CPUPLAN_RESULT",
    "CPUPLAN_SETTING",
    "CPUPLAN_WHY",
    "CPUPLAN_LEFT",
    "CPUPLAN_PINNED",
    "CPUPLAN_CLAIMS_DIR",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
]


def _required(var: str) -> str:
    """The value of var, which scripts/python-test.sh sets; the test fails without it."""
    value = os.environ.get(var)
    assert value, f"{var} is not set: run the suite through scripts/python-test.sh"
    return value


@pytest.fixture(scope="session")
def repo() -> Path:
    """The repository root."""
    return Path(_required("CPUPLAN_REPO"))


@pytest.fixture(scope="session")
def hook_bin() -> str:
    """The operator's command, cpuplan (explain, plan, quota...)."""
    path = _required("CPUPLAN_BIN")
    assert os.access(path, os.X_OK), f"CPUPLAN_BIN={path} is not an executable"
    return path


@pytest.fixture(scope="session")
def stages_bin() -> str:
    """The runtime's hook, cpuplan-hook (its stages)."""
    path = _required("CPUPLAN_HOOK")
    assert os.access(path, os.X_OK), f"CPUPLAN_HOOK={path} is not an executable"
    return path


@pytest.fixture(scope="session")
def venv() -> Path:
    """The venv the wheel is installed in."""
    return Path(_required("CPUPLAN_VENV"))


@pytest.fixture(scope="session")
def two_cpus() -> Tuple[int, int]:
    """The first two CPUs this process may run on (the CI machine has 2)."""
    mask = sorted(os.sched_getaffinity(0))
    assert len(mask) >= 2, f"these tests need 2 CPUs or more, the process has {mask}"
    return mask[0], mask[1]


@pytest.fixture(autouse=True)
def no_plan(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Every test starts with no plan: no plan file, no CPUPLAN_* variables, nothing installed; the thread's mask is restored."""
    for var in PLAN_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("CPUPLAN_PLAN", str(tmp_path / "no-plan.json"))
    cpuplan.install(None)
    mask = os.sched_getaffinity(0)
    yield
    cpuplan.install(None)
    os.sched_setaffinity(0, mask)


# The hook config of defaults but for the host directories it writes: its claims, inventory and
# log are private (under the work dir when scripts/python-test.sh runs the suite), never the
# host's /run/cpuplan or /var/log.
_PRIVATE = tempfile.mkdtemp(prefix="cpuplan-hook-", dir=str(Path(os.environ["CPUPLAN_VENV"]).parent) if os.environ.get("CPUPLAN_VENV") else None)
atexit.register(shutil.rmtree, _PRIVATE, True)
_DEFAULTS = os.path.join(_PRIVATE, "hook.json")
with open(_DEFAULTS, "w") as _f:
    json.dump({k: os.path.join(_PRIVATE, k) for k in ("claims_dir", "inventory_dir")} | {"log": os.path.join(_PRIVATE, "hook.log")}, _f)


def run_hook(hook_bin: str, *args: str) -> subprocess.CompletedProcess:
    """cpuplan-hook with args and a hook config of defaults (private claims, inventory, log), its output captured as text."""
    return subprocess.run([hook_bin, "--config", _DEFAULTS, *args], capture_output=True, text=True)


def hook_json(hook_bin: str, *args: str) -> object:
    """The JSON cpuplan-hook prints for args (which must succeed)."""
    out = run_hook(hook_bin, *args, "--json")
    assert out.returncode == 0, f"cpuplan-hook {args}: {out.stderr}"
    return json.loads(out.stdout)


def plan_json(p: cpuplan.HookPlan) -> Dict[str, object]:
    """p in the shape of the planner's plan JSON (PlanFile), as `cpuplan plan --json` prints it."""
    fmt = cpuplan.format_cpu_list
    devices: List[Optional[str]] = list(p.devices) + [None] * (len(p.workers) - len(p.devices))
    workers = len(p.workers) if p.pool_split == "per-process" else min(1, len(p.workers))
    return {
        "version": 1,
        "setting": p.setting,
        "mask": fmt(p.mask),
        "usable": p.usable,
        "devices": devices,
        "workers": [None if w is None else {"device": devices[i], "cpus": fmt(w.cpus), "why": w.why} for i, w in enumerate(p.workers)],
        "result": None if p.result_core is None else {"cpus": fmt(p.result_core.cpus), "why": p.result_core.why},
        "pinned": fmt(p.pinned),
        "left": p.left,
        "pools": {
            "preprocess_threads": p.preprocess_threads,
            "png_threads": p.png_threads,
            "encode_workers": p.encode_workers,
            "copy_workers": p.copy_workers,
        },
        "pool_split": p.pool_split,
        "processes": {
            "api_server": p.preprocess_threads,
            "worker": p.worker_threads,
            "workers": workers,
            "other": p.worker_threads,
            "sum": p.preprocess_threads + workers * p.worker_threads,
            "left": p.left,
            "usable": p.usable,
        },
        "why": p.why,
    }


def python(code: str, env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """This interpreter (the venv's) running code in a new process, with env added to a plan-free environment."""
    base = {k: v for k, v in os.environ.items() if k not in PLAN_VARS and k != "CUDA_DEVICE_ORDER"}
    base["CPUPLAN_PLAN"] = "/nonexistent/cpuplan/plan.json"
    base.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=base, cwd=cwd or "/")
