"""The same fixture cases through the Python package and through the CLI (cpuplan plan/gpus/quota --json): identical results."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import pytest
from conftest import hook_json, plan_json, run_hook

import cpuplan

H224 = "examples/host"
SYN8N = "tests/fixtures/synthetic/host-8node-16gpu"
KVM = "tests/fixtures/topologies/ghw-kvm-xeon-e5-2695v4-tesla-p100"
POWER9 = "tests/fixtures/topologies/hwloc-power9-ac922-6xv100"
HASWELL = "tests/fixtures/topologies/hwloc-haswell-offline-cpu0-node0"
SILVER = "tests/fixtures/topologies/hwloc-xeon-silver-4108-2s-8ve"

# (root, setting, devices ('-' for a CPU worker), mask, usable)
PLANS = [
    (H224, "auto", "0000:18:00.0,0000:2a:00.0,-", "0-55,112-167", 16),
    (H224, "auto", "0000:18:00.0,0000:2a:00.0", "0-223", 32),
    (H224, "auto", "0000:9a:00.0,0000:db:00.0", "56-111,168-223", 8),
    (H224, "auto", "0000:18:00.0,0000:9a:00.0", "0-223", 200),
    (H224, "auto", "0000:18:00.0,0000:18:00.0", "0-223", 16),
    (H224, "auto", "0000:18:00.0", "0-5", 6),
    (H224, "auto", "0000:77:00.0", "0-223", 16),
    (H224, "auto", "-,-", "0-223", 16),
    (H224, "3", "0000:9a:00.0", "0-223", 8),
    (H224, "0", "-,-,-", "0-15,112-127", 12),
    (H224, "off", "0000:18:00.0,-", "0-223", 224),
    (H224, "auto", "", "0-223", 16),
    (H224, "auto", "0000:3a:00.0,0000:5d:00.0,0000:ab:00.0", "0-223", 24),
    (SYN8N, "auto", "0000:01:00.0,0000:11:00.0,0000:c1:00.0,0000:d1:00.0", "0-127", 64),
    (SYN8N, "auto", "0000:f1:00.0", "112-127", 4),
    (SYN8N, "5", "-,-", "0-127", 2),
    (KVM, "auto", "0000:06:00.0", "0-7", 8),
    (KVM, "2", "0000:06:00.0", "0-7", 8),
    (POWER9, "auto", "0004:05:00.0,0035:05:00.0", "0-15,88-103", 32),
    (POWER9, "8", "-", "0-15,88-103", 32),
    (HASWELL, "4", "-,-", "4-20", 17),
    (SILVER, "auto", "-", "0-31", 4),
    (SILVER, "2", "-,-,-", "0-31", 4),
]


def addresses(devices: str) -> List[Optional[str]]:
    """The CLI's --devices as the Python call's addresses: '-' is a CPU worker (None)."""
    return [None if d == "-" else d for d in devices.split(",") if d]


@pytest.mark.parametrize("root,setting,devices,mask,usable", PLANS)
def test_plans_match_the_cli(repo: Path, hook_bin: str, root: str, setting: str, devices: str, mask: str, usable: int) -> None:
    r = str(repo / root)
    cli = hook_json(hook_bin, "plan", "--setting", setting, "--devices", devices, "--mask", mask, "--usable", str(usable), "--root", r)
    s = int(setting) if setting.isdigit() else setting
    p = cpuplan.host.deployment_plan(s, addresses(devices), mask=cpuplan.parse_cpu_list(mask), usable=usable, root=r)
    assert plan_json(p) == cli


def test_the_cases_exercise_pinned_and_unpinned_plans(repo: Path, hook_bin: str) -> None:
    # Guards the table above: it must hold plans that pin and plans that pin nothing.
    pinned = unpinned = 0
    for root, setting, devices, mask, usable in PLANS:
        cli = hook_json(hook_bin, "plan", "--setting", setting, "--devices", devices, "--mask", mask, "--usable", str(usable), "--root", str(repo / root))
        if cli["pinned"]:
            pinned += 1
        else:
            unpinned += 1
    assert pinned >= 8 and unpinned >= 5, (pinned, unpinned)


@pytest.mark.parametrize(
    "root,setting,devices,mask,usable",
    [
        (H224, "300", "-", "0-223", 16),
        (H224, "222", "-,-", "0-223", 16),
        (H224, "0", "-,-", "0-1", 2),
        (SYN8N, "127", "-", "0-127", 8),
    ],
)
def test_settings_the_mask_cannot_honour_fail_alike(repo: Path, hook_bin: str, root: str, setting: str, devices: str, mask: str, usable: int) -> None:
    r = str(repo / root)
    out = run_hook(hook_bin, "plan", "--setting", setting, "--devices", devices, "--mask", mask, "--usable", str(usable), "--root", r, "--json")
    assert out.returncode == 2, out
    with pytest.raises(cpuplan.CpuPlanError) as e:
        cpuplan.host.deployment_plan(int(setting), addresses(devices), mask=cpuplan.parse_cpu_list(mask), usable=usable, root=r)
    assert str(e.value) in out.stderr


@pytest.mark.parametrize(
    "root,like",
    [(H224, "0000:ab:00.0"), (SYN8N, "0000:01:00.0"), (KVM, "0000:06:00.0"), (H224, "0000:03:00.0"), (SYN8N, "0000:c2:00.0")],
)
def test_host_gpus_match_the_cli(repo: Path, hook_bin: str, root: str, like: str) -> None:
    r = str(repo / root)
    cli = hook_json(hook_bin, "gpus", "--like", like, "--root", r)
    mine = cpuplan.host.host_gpus(like, root=r)
    assert cpuplan.host_gpus(like, Path(r) / "sys/bus/pci/devices") == mine
    assert mine, "the fixture has GPUs"
    as_json = [
        {"address": g.address, "node": None if g.node is None else int(g.node), "local": None if g.local is None else cpuplan.format_cpu_list(g.local)}
        for g in mine
    ]
    assert as_json == cli


QUOTA_CASES = [("v2", "4242"), ("v2", "4243"), ("v1", "4242"), ("hybrid", "4242"), ("hybrid", "4244"), ("container", "1"), ("container", "8"), ("escaped", "5")]


@pytest.mark.parametrize("tree,pid", QUOTA_CASES)
def test_quota_mask_and_usable_match_the_cli(repo: Path, hook_bin: str, tree: str, pid: str) -> None:
    root = repo / "tests/fixtures/cgroup" / tree
    cli = hook_json(hook_bin, "quota", "--root", str(root), "--pid", pid)
    mine = {
        "quota": cpuplan.host.cgroup_cpu_quota(int(pid), root=root),
        "mask": cpuplan.format_cpu_list(cpuplan.host.process_mask(int(pid), root=root)),
        "usable": cpuplan.host.usable_cpus(int(pid), root=root),
    }
    assert mine == cli


def test_this_process_matches_the_cli(hook_bin: str) -> None:
    # The CLI is a child of this process: same cgroup, and the same mask (this process's).
    cli = hook_json(hook_bin, "quota")
    assert cli == {
        "quota": cpuplan.host.cgroup_cpu_quota(),
        "mask": cpuplan.format_cpu_list(cpuplan.process_mask()),
        "usable": cpuplan.host.usable_cpus(),
    }
