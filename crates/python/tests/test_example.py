"""The example worker (crates/python/examples/worker.py) on a plan file, and without any plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
import os
from typing import Dict, List, Optional, Tuple

from conftest import PLAN_VARS, plan_json

import cpuplan
from cpuplan import HookPlan, StepCpus


def run_worker(repo: Path, device: str, env: Dict[str, str]) -> Tuple[int, str, str]:
    """The example worker for device, with env added to a plan-free environment."""
    base = {k: v for k, v in os.environ.items() if k not in PLAN_VARS and k != "CPUPLAN_PLAN"}
    base.update(env)
    out = subprocess.run([sys.executable, str(repo / "crates/python/examples/worker.py"), device], capture_output=True, text=True, env=base, cwd="/")
    return out.returncode, out.stdout, out.stderr


def write_plan(path: Path, plan: HookPlan, extra: Optional[dict] = None) -> Path:
    """plan as the planner's plan.json, with extra keys (as the hook adds)."""
    data = plan_json(plan)
    data.update(extra or {})
    path.write_text(json.dumps(data, indent=2))
    return path


def test_the_worker_pins_itself_and_its_helpers_run_on_the_process_mask(repo: Path, tmp_path: Path, two_cpus: tuple) -> None:
    a, b = two_cpus
    ab = cpuplan.format_cpu_list({a, b})
    plan = HookPlan(frozenset({a, b}), 2, (StepCpus(frozenset({b}), f"worker 0 on cpu {b}"), None), a, "two cpus", "auto", ("0000:2a:00.0", "0000:3a:00.0"), StepCpus(frozenset({a}), "api"))
    path = write_plan(tmp_path / "plan.json", plan, {"container": "test", "inputs": {"gpus": ["0000:2a:00.0", "0000:3a:00.0"]}})
    rc, out, err = run_worker(repo, "00000000:2A:00.0", {"CPUPLAN_PLAN": str(path)})
    assert rc == 0, err
    assert out.splitlines() == [
        f"plan: setting=auto mask={ab} usable=2 left=1 devices=0000:2a:00.0,0000:3a:00.0",
        "why: two cpus",
        f"warm cpus={ab}",
        f"00000000:2A:00.0: worker 0 (0000:2a:00.0) pinned to cpus {b}: worker 0 on cpu {b}",
        f"main cpus={b}",
        f"helper cpus={ab}",
        f"pool cpus={ab}",
    ]
    rc, out, err = run_worker(repo, "cuda:1", {"CPUPLAN_PLAN": str(path)})
    assert rc == 0, err
    assert out.splitlines()[2:4] == ["cuda:1: worker 1 (0000:3a:00.0) unpinned: two cpus", f"main cpus={ab}"]


def test_the_worker_runs_unpinned_without_a_plan(repo: Path, tmp_path: Path) -> None:
    rc, out, err = run_worker(repo, "cuda:0", {"CPUPLAN_PLAN": str(tmp_path / "absent.json")})
    assert rc == 0, err
    mask = cpuplan.format_cpu_list(cpuplan.process_mask())
    lines = out.splitlines()
    assert lines[0] == f"plan: setting=off mask={mask} usable={cpuplan.usable_cpus()} left={cpuplan.usable_cpus()} devices="
    assert lines[1] == f"why: no plan: nothing installed, and $CPUPLAN_PLAN names {tmp_path / 'absent.json'}, which does not exist"
    assert lines[2:] == ["cuda:0: no worker of the plan", f"main cpus={mask}", f"helper cpus={mask}", f"pool cpus={mask}"]


def blocks(path: Path, name: str) -> List[str]:
    """Every fenced block after a `<!-- test: name -->` line in a Markdown file."""
    text = path.read_text()
    marker = f"<!-- test: {name} -->\n```"
    out, at = [], text.find(marker)
    while at >= 0:
        body = text[text.index("\n", at + len(marker)) + 1 :]
        out.append(body[: body.index("```")])
        at = text.find(marker, at + len(marker))
    return out


def readme_block(repo: Path, name: str) -> str:
    """The fenced block after `<!-- test: name -->` in the README."""
    return blocks(repo / "README.md", name)[0]


def test_the_readme_example_pins_worker_0_and_starts_a_helper(repo: Path, tmp_path: Path, two_cpus: tuple) -> None:
    a, b = two_cpus
    plan = HookPlan(frozenset({a, b}), 2, (StepCpus(frozenset({b}), f"worker 0 on cpu {b}"), None), a, "two cpus", "auto", ("0000:2a:00.0", "0000:3a:00.0"), StepCpus(frozenset({a}), "api"))
    path = write_plan(tmp_path / "plan.json", plan)
    base = {k: v for k, v in os.environ.items() if k not in PLAN_VARS and k != "CPUPLAN_PLAN"}
    base["CPUPLAN_PLAN"] = str(path)
    out = subprocess.run([sys.executable, "-c", readme_block(repo, "python")], capture_output=True, text=True, env=base, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"worker 0 cpus frozenset({{{b}}}) - worker 0 on cpu {b}\n"), out.stdout
    assert out.stdout.endswith("the helper runs on the process mask\n"), out.stdout
    # Without a plan the example still runs, unpinned.
    base["CPUPLAN_PLAN"] = str(tmp_path / "none.json")
    out = subprocess.run([sys.executable, "-c", readme_block(repo, "python")], capture_output=True, text=True, env=base, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("the helper runs on the process mask\n"), out.stdout


def test_every_python_example_of_docs_python_md_runs_with_and_without_a_plan(repo: Path, tmp_path: Path, two_cpus: tuple) -> None:
    doc = repo / "docs/python.md"
    examples = blocks(doc, "python")
    # Every Python block of the page is one of them: none escapes this test.
    assert len(examples) == doc.read_text().count("```python") >= 5
    a, b = two_cpus
    plan = HookPlan(frozenset({a, b}), 2, (StepCpus(frozenset({b}), "worker 0"),), a, "two cpus", "auto", ("0000:2a:00.0",), StepCpus(frozenset({a}), "api"))
    with_plan = write_plan(tmp_path / "plan.json", plan)
    base = {k: v for k, v in os.environ.items() if k not in PLAN_VARS and k != "CPUPLAN_PLAN"}
    for n, code in enumerate(examples):
        for path in (with_plan, tmp_path / "none.json"):
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**base, "CPUPLAN_PLAN": str(path)}, cwd=repo)
            # Without a plan, the one line hook_plan() logs: $CPUPLAN_PLAN names no file.
            warned = f"cpuplan: $CPUPLAN_PLAN names {path}, which does not exist: no plan file; looking for the CPUPLAN_* variables\n"
            allowed = ("",) if path == with_plan else ("", warned)
            assert out.returncode == 0 and out.stderr in allowed, f"docs/python.md example {n + 1} with {path.name}:\n{code}\n{out.stderr}"
