"""Loading: import without any plan, hook_plan() reading the hook's plan file or plan.env's variables (plan() never does), install()."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Dict, Optional

import pytest
from conftest import hook_json, python

import cpuplan
from cpuplan import CpuPlan, StepCpus


def hook_plan_file(repo: Path, hook_bin: str, tmp_path: Path, annotations: Optional[Dict[str, str]] = None) -> Path:
    """plan.json as the hook writes it (`explain --json` on the example bundle and host), in tmp_path."""
    bundle = repo / "examples/bundle"
    if annotations is not None:
        bundle = tmp_path / "bundle"
        shutil.copytree(repo / "examples/bundle", bundle)
        config = json.loads((bundle / "config.json").read_text())
        config["annotations"] = annotations
        (bundle / "config.json").write_text(json.dumps(config))
    plan = hook_json(hook_bin, "explain", "--bundle", str(bundle), "--root", str(repo / "examples/host"))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan, indent=2))
    return path


def test_importing_without_any_plan_works_and_pins_nothing() -> None:
    out = python(
        "import os, cpuplan; p = cpuplan.plan();"
        "print(p.mask == frozenset(os.sched_getaffinity(0)), p.workers, p.result, p.pinned, p.left == p.usable);"
        "print(p.why, cpuplan.hook_plan())"
    )
    assert out.returncode == 0, out.stderr
    no_plan = "no plan: nothing installed, and $CPUPLAN_PLAN names /nonexistent/cpuplan/plan.json, which does not exist"
    assert out.stdout.splitlines() == ["True () None frozenset() True", f"{no_plan} None"]
    # hook_plan() says once, on the cpuplan logger, that $CPUPLAN_PLAN names no file.
    assert out.stderr == "cpuplan: $CPUPLAN_PLAN names /nonexistent/cpuplan/plan.json, which does not exist: no plan file; looking for the CPUPLAN_* variables\n"


def test_with_no_plan_why_says_there_is_none_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpuplan.install(None)
    monkeypatch.delenv("CPUPLAN_PLAN")
    if not os.path.exists(cpuplan.DEFAULT_PLAN):  # pragma: no branch - only inside a planned container
        assert cpuplan.plan().why == "no plan: nothing installed, $CPUPLAN_PLAN is not set and /run/cpuplan/plan.json does not exist"
    monkeypatch.setenv("CPUPLAN_PLAN", str(tmp_path / "absent.json"))
    assert cpuplan.plan().why == f"no plan: nothing installed, and $CPUPLAN_PLAN names {tmp_path / 'absent.json'}, which does not exist"
    (tmp_path / "absent.json").write_text("{}")
    assert cpuplan.plan().why == f"no plan installed: install(cpuplan.hook_plan()) installs the one in {tmp_path / 'absent.json'}"
    assert cpuplan.plan().workers == () and cpuplan.plan().result is None


def test_a_plan_var_naming_no_file_is_logged_once_and_the_variables_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, two_cpus: tuple
) -> None:
    missing = tmp_path / "mount-missing.json"
    monkeypatch.setenv("CPUPLAN_PLAN", str(missing))
    with caplog.at_level("WARNING", logger="cpuplan"):
        assert cpuplan.hook_plan() is None
        assert cpuplan.hook_plan() is None
        a, _ = two_cpus
        monkeypatch.setenv("CPUPLAN_MASK", str(a))
        monkeypatch.setenv("CPUPLAN_USABLE", "1")
        found = cpuplan.hook_plan()
    assert found is not None and found.mask == frozenset({a})
    said = [r.getMessage() for r in caplog.records if r.name == "cpuplan"]
    assert said == [f"cpuplan: $CPUPLAN_PLAN names {missing}, which does not exist: no plan file; looking for the CPUPLAN_* variables"]


def test_install_refuses_a_plan_made_for_another_host(repo: Path, hook_bin: str, tmp_path: Path) -> None:
    # The example host's plan pins CPUs 0,112 / 1,113 / 55,167: not in this 2-CPU process's mask.
    foreign = cpuplan.hook_plan(hook_plan_file(repo, hook_bin, tmp_path))
    assert foreign is not None
    mask = cpuplan.process_mask()
    assert not {0, 112, 1, 113, 55, 167} <= mask
    cpuplan.install(None)
    with pytest.raises(ValueError) as e:
        cpuplan.install(foreign)
    outside = cpuplan.format_cpu_list(sorted({0, 112, 1, 113, 55, 167} - mask))
    assert str(e.value).startswith(f"install(): the plan's CPUs {outside} are not in this process's mask {cpuplan.format_cpu_list(sorted(mask))}: it was made for another host or container")
    assert "\n" not in str(e.value)
    assert cpuplan.plan().why.startswith("no plan"), "nothing was installed"
    # A plan within the mask, and one that pins nothing, are installed.
    a, b = sorted(mask)[:2]
    fits = CpuPlan(frozenset({a, b}), 2, (StepCpus(frozenset({b}), "w"),), a, "fits")
    cpuplan.install(fits)
    assert cpuplan.plan() is fits
    cpuplan.install(CpuPlan(frozenset({0, 1, 500}), 3))
    cpuplan.install(None)


def test_importing_reads_no_plan() -> None:
    # Even a plan file that does not parse: import succeeds, plan() pins nothing, hook_plan() says why.
    code = "import cpuplan; print(cpuplan.plan().why)\ntry: cpuplan.hook_plan()\nexcept ValueError as e: print('ValueError')"
    out = python(code, env={"CPUPLAN_PLAN": "/proc/self/status"})
    no_plan = "no plan installed: install(cpuplan.hook_plan()) installs the one in /proc/self/status"
    assert (out.returncode, out.stdout, out.stderr) == (0, f"{no_plan}\nValueError\n", "")


def test_hook_plan_reads_the_hooks_plan_file(repo: Path, hook_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = hook_plan_file(repo, hook_bin, tmp_path)
    monkeypatch.setenv("CPUPLAN_PLAN", str(path))
    p = cpuplan.hook_plan()
    assert isinstance(p, cpuplan.HookPlan) and isinstance(p, CpuPlan)
    assert p.setting == "auto" and p.usable == 16
    assert p.mask == cpuplan.parse_cpu_list("0-55,112-167")
    assert p.workers == (
        StepCpus(frozenset({0, 112}), "gpu 0000:18:00.0 rank 0 of 4 on node 0: core 0 from the bottom"),
        StepCpus(frozenset({1, 113}), "gpu 0000:2a:00.0 rank 1 of 4 on node 0: core 1 from the bottom"),
    )
    assert p.result == 55
    assert p.result_core == StepCpus(frozenset({55, 167}), "worker 0's gpu 0000:18:00.0 rank 0 of 4 on node 0: core 0 from the top")
    assert p.devices == ("0000:18:00.0", "0000:2a:00.0")
    # The hook's own pool sizes: the API server's whole core counts as pinned.
    data = json.loads(path.read_text())
    assert (p.left, p.encode_workers) == (data["left"], data["pools"]["encode_workers"]) == (10, 5)
    assert p.why.endswith("the GPUs' local CPUs within the mask 0-223")
    # The same plan through hook_plan(path); read anew at each call; plan() never reads it.
    assert cpuplan.hook_plan(path) == p
    path.write_text(path.read_text().replace('"usable": 16', '"usable": 12'))
    assert cpuplan.hook_plan().usable == 12  # type: ignore[union-attr]
    assert cpuplan.plan().why.startswith("no plan installed: ")


def test_an_unpinned_hook_plan_still_names_every_workers_device(repo: Path, hook_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = hook_plan_file(repo, hook_bin, tmp_path, {"cpuplan.step-thread-core": "off"})
    assert json.loads(path.read_text())["workers"] == [None, None]
    monkeypatch.setenv("CPUPLAN_PLAN", str(path))
    p = cpuplan.hook_plan()
    assert p is not None and p.setting == "off" and p.workers == (None, None)
    assert p.devices == ("0000:18:00.0", "0000:2a:00.0")
    w = cpuplan.find_worker("00000000:2A:00.0", plan=p)
    assert w == cpuplan.Worker(1, "0000:2a:00.0", None, p.why)


def test_each_worker_process_gets_its_share_of_the_cpus_left(repo: Path, hook_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two GPUs, 10 CPUs left: the API server keeps 2, each worker process gets (10 - 2) / 2.
    path = hook_plan_file(repo, hook_bin, tmp_path)
    data = json.loads(path.read_text())
    assert data["pool_split"] == "per-process" and data["processes"]["worker"] == 4
    p = cpuplan.hook_plan(path)
    assert p is not None and p.pool_split == "per-process"
    assert (p.left, p.preprocess_threads, p.worker_threads) == (10, 2, 4)
    assert p.worker_threads * len(p.workers) + p.preprocess_threads <= p.left
    # The seed's CpuPlan (devices_plan's) is a deployment of one process per worker too.
    seed = CpuPlan(p.mask, p.usable, p.workers, p.result, p.why)
    assert seed.worker_threads == 4
    # One process drives every GPU: all of left.
    (tmp_path / "off").mkdir()
    off = hook_plan_file(repo, hook_bin, tmp_path / "off", {"cpuplan.pool-split": "off"})
    q = cpuplan.hook_plan(off)
    assert q is not None and q.pool_split == "off" and q.worker_threads == 10
    # One worker keeps left.
    assert CpuPlan(p.mask, p.usable, p.workers[:1]).worker_threads == CpuPlan(p.mask, p.usable, p.workers[:1]).left


def test_the_default_plan_path_is_run_cpuplan(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpuplan.DEFAULT_PLAN == "/run/cpuplan/plan.json"
    assert cpuplan.PLAN_VAR == "CPUPLAN_PLAN"
    monkeypatch.delenv("CPUPLAN_PLAN")
    p = cpuplan.hook_plan()
    if os.path.exists(cpuplan.DEFAULT_PLAN):  # pragma: no cover - only inside a planned container
        assert p == cpuplan.hook_plan(cpuplan.DEFAULT_PLAN)
    else:
        assert p is None


def test_hook_plan_falls_back_to_plan_env_variables(monkeypatch: pytest.MonkeyPatch, two_cpus: tuple) -> None:
    a, b = two_cpus
    env = {
        "CPUPLAN_SETTING": str(b),
        "CPUPLAN_MASK": f"{a},{b}",
        "CPUPLAN_USABLE": "2",
        "CPUPLAN_WORKERS": f"{b};",
        "CPUPLAN_DEVICES": "0000:2a:00.0;0000:3a:00.0",
        "CPUPLAN_RESULT": str(a),
        "CPUPLAN_WHY": "from plan.env",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    p = cpuplan.hook_plan()
    assert p is not None
    assert p.mask == frozenset({a, b}) and p.usable == 2 and p.setting == str(b)
    assert p.workers[0] is not None and p.workers[0].cpus == frozenset({b}) and p.workers[1] is None
    assert p.result == a and p.result_core is not None and p.result_core.cpus == frozenset({a})
    assert p.devices == ("0000:2a:00.0", "0000:3a:00.0")
    assert p.why == "from plan.env" and p.left == 1
    assert cpuplan.find_worker("cuda:1", plan=p) == cpuplan.Worker(1, "0000:3a:00.0", None, "from plan.env")


def test_a_plan_file_wins_over_the_variables(repo: Path, hook_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPUPLAN_MASK", "0")
    monkeypatch.setenv("CPUPLAN_USABLE", "1")
    assert cpuplan.hook_plan().mask == frozenset({0})  # type: ignore[union-attr]
    monkeypatch.setenv("CPUPLAN_PLAN", str(hook_plan_file(repo, hook_bin, tmp_path)))
    assert cpuplan.hook_plan().usable == 16  # type: ignore[union-attr]


def test_a_plan_that_does_not_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: Path, hook_bin: str) -> None:
    bad = tmp_path / "plan.json"
    bad.write_text('{"version": 1, "mask": "0-x"}')
    with pytest.raises(ValueError) as e:
        cpuplan.hook_plan(bad)
    assert str(bad) in str(e.value)
    monkeypatch.setenv("CPUPLAN_PLAN", str(bad))
    with pytest.raises(ValueError):
        cpuplan.hook_plan()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpuplan.plan().why.startswith("no plan installed: ")  # plan() never reads it
    (tmp_path / "v7").mkdir()
    newer = hook_plan_file(repo, hook_bin, tmp_path / "v7")
    newer.write_text(newer.read_text().replace('"version": 1', '"version": 7'))
    with pytest.raises(ValueError, match="plan version 7"):
        cpuplan.hook_plan(newer)
    monkeypatch.setenv("CPUPLAN_PLAN", str(tmp_path / "absent.json"))
    monkeypatch.setenv("CPUPLAN_MASK", "0-1")
    monkeypatch.setenv("CPUPLAN_USABLE", "two")
    with pytest.raises(ValueError, match='CPUPLAN_USABLE="two"'):
        cpuplan.hook_plan()


def test_hook_plan_of_a_missing_path_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        cpuplan.hook_plan(tmp_path / "absent.json")
    assert cpuplan.hook_plan() is None


def test_install_makes_a_plan_this_processes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: Path, hook_bin: str) -> None:
    mine = CpuPlan(frozenset({0, 1}), 2, (StepCpus(frozenset({1}), "mine"),), None, "installed")
    cpuplan.install(mine)
    assert cpuplan.plan() is mine
    monkeypatch.setenv("CPUPLAN_PLAN", str(hook_plan_file(repo, hook_bin, tmp_path)))
    assert cpuplan.plan() is mine
    cpuplan.install(None)
    p = cpuplan.plan()  # nothing pinned, hook plan or not
    assert (p.mask, p.usable, p.workers, p.result) == (cpuplan.process_mask(), cpuplan.usable_cpus(), (), None)
    with pytest.raises(TypeError):
        cpuplan.install("auto")  # type: ignore[arg-type]


def test_plan_refresh_reads_the_rewritten_plan_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, repo: Path, hook_bin: str) -> None:
    """What the NRI plugin does at UpdateContainer, on fixture files: plan.json rewritten whole with
    a higher generation; plan() keeps what was installed, plan(refresh=True) reads it again. The
    plan pins nothing: the example host's CPUs are not this process's, and install() refuses a
    plan that pins CPUs outside the process's mask."""
    path = hook_plan_file(repo, hook_bin, tmp_path, {"cpuplan.step-thread-core": "off"})
    monkeypatch.setenv("CPUPLAN_PLAN", str(path))
    cpuplan.install(None)
    try:
        first = cpuplan.plan(refresh=True)
        doc = json.loads(path.read_text())
        assert doc["generation"] == 1
        assert first.usable == doc["usable"]
        doc["usable"] = doc["usable"] + 1
        doc["left"] = doc["left"] + 1
        doc["generation"] = 2
        fresh = tmp_path / "plan.json.new"
        fresh.write_text(json.dumps(doc))
        os.replace(fresh, path)
        assert cpuplan.plan() is first, "without refresh: as today"
        second = cpuplan.plan(refresh=True)
        assert second.usable == first.usable + 1
        assert cpuplan.plan() is second
        path.unlink()
        monkeypatch.delenv("CPUPLAN_MASK", raising=False)
        assert cpuplan.plan(refresh=True) is second, "no plan files: what was installed stays"
    finally:
        cpuplan.install(None)
