"""cpuplan.host, the extras with pids and host roots, on fixture sysfs trees and on this machine; CPU lists; HookPlan."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import cpuplan
from cpuplan import CpuPlan, CpuPlanError, HookPlan, HostGpu, StepCpus, host


def test_the_installed_wheel_is_what_runs(venv: Path, repo: Path) -> None:
    # Not the source tree: the package and its extension come from the venv's site-packages.
    assert Path(cpuplan.__file__).resolve().is_relative_to(venv.resolve())
    assert not Path(cpuplan.__file__).resolve().is_relative_to((repo / "crates/python/python").resolve())
    from cpuplan import _cpuplan

    assert _cpuplan.__file__.endswith(".abi3.so")


def test_cpu_lists_parse_and_format() -> None:
    assert cpuplan.parse_cpu_list("0-3,8,10-11") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert cpuplan.parse_cpu_list("") == frozenset()
    assert cpuplan.parse_cpu_list(" 2,4-5\n\0") == frozenset({2, 4, 5})
    assert isinstance(cpuplan.parse_cpu_list("1"), frozenset)
    assert cpuplan.format_cpu_list([11, 10, 0, 1, 2, 3, 8]) == "0-3,8,10-11"
    assert cpuplan.format_cpu_list(frozenset()) == ""
    assert cpuplan.format_cpu_list(range(4, 8)) == "4-7"
    assert cpuplan.format_cpu_list(iter([8191, 0])) == "0,8191"
    for text in ["0-3,8", "1", "0-8191", "5,7,9-12"]:
        assert cpuplan.format_cpu_list(cpuplan.parse_cpu_list(text)) == text


@pytest.mark.parametrize("text", ["3-1", "1,,2", "x", "0-", "8192", "1.5", "-1"])
def test_bad_cpu_lists_raise_value_error_quoting_the_text(text: str) -> None:
    with pytest.raises(ValueError) as e:
        cpuplan.parse_cpu_list(text)
    assert repr(text).strip("'") in str(e.value) or text in str(e.value)


@pytest.mark.parametrize("bad", [[-1], [8192], [1, "2"], 5])
def test_formatting_refuses_what_is_no_cpu_id(bad: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        cpuplan.format_cpu_list(bad)  # type: ignore[arg-type]


def test_host_process_mask_is_another_pids_or_this_processes() -> None:
    assert host.process_mask() == cpuplan.process_mask()
    assert host.process_mask(os.getpid()) == frozenset(os.sched_getaffinity(0))


# The cgroup fixture trees and what tests/fixtures/cgroup/README.md says their quota is.
QUOTAS = [
    ("v2", 4242, 2.5),
    ("v2", 4243, None),
    ("v1", 4242, 1.5),
    ("hybrid", 4242, 1.25),
    ("hybrid", 4244, 1.5),
    ("container", 1, 0.5),
    ("container", 7, 0.5),
    ("container", 8, None),
    ("container", 9, None),
    ("escaped", 5, 0.75),
]


@pytest.mark.parametrize("tree,pid,quota", QUOTAS)
def test_cgroup_quota_of_fixture_trees(repo: Path, tree: str, pid: int, quota: object) -> None:
    root = repo / "tests/fixtures/cgroup" / tree
    assert host.cgroup_cpu_quota(pid, root=root) == quota
    mask = host.process_mask(pid, root=root)
    status = (root / f"proc/{pid}/status").read_text()
    listed = next(line.split(":", 1)[1] for line in status.splitlines() if line.startswith("Cpus_allowed_list:"))
    assert mask == cpuplan.parse_cpu_list(listed)
    expected = len(mask) if quota is None else max(1, min(len(mask), int(quota)))  # type: ignore[call-overload]
    assert host.usable_cpus(pid, root=root) == expected


def test_quota_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as e:
        host.cgroup_cpu_quota(1, root=tmp_path)
    assert str(tmp_path / "proc/1/cgroup") in str(e.value)
    with pytest.raises(FileNotFoundError):
        host.process_mask(1, root=tmp_path)


def test_usable_cpus_of_this_process_counts_every_hierarchy() -> None:
    mask = cpuplan.process_mask()
    quota = host.cgroup_cpu_quota()
    expected = len(mask) if quota is None else max(1, min(len(mask), int(quota)))
    assert host.usable_cpus() == expected


def test_smt_siblings_from_sysfs(repo: Path, tmp_path: Path) -> None:
    host = repo / "examples/host"
    assert cpuplan.host.smt_siblings(3, root=host) == frozenset({3, 115})
    assert cpuplan.host.smt_siblings(115, root=host) == frozenset({3, 115})
    assert cpuplan.host.smt_siblings(5, root=tmp_path) == frozenset({5})
    bad = tmp_path / "sys/devices/system/cpu/cpu0/topology"
    bad.mkdir(parents=True)
    (bad / "thread_siblings_list").write_text("0-x\n")
    with pytest.raises(OSError) as e:
        cpuplan.host.smt_siblings(0, root=tmp_path)
    assert "thread_siblings_list" in str(e.value) and "0-x" in str(e.value)


def test_host_gpus_in_pci_order(repo: Path) -> None:
    h224 = repo / "examples/host"
    gpus = host.host_gpus("0000:ab:00.0", root=h224)
    assert [g.address for g in gpus] == [
        "0000:18:00.0",
        "0000:2a:00.0",
        "0000:3a:00.0",
        "0000:5d:00.0",
        "0000:9a:00.0",
        "0000:ab:00.0",
        "0000:ba:00.0",
        "0000:db:00.0",
    ]
    assert gpus[0] == HostGpu("0000:18:00.0", "0", cpuplan.parse_cpu_list("0-55,112-167"))
    assert gpus[7].node == "1" and isinstance(gpus[7].local, frozenset)
    # nvidia-smi's 8-hex-digit domain names the same device.
    assert host.host_gpus("00000000:AB:00.0", root=h224) == gpus
    # The seed's call on the same host's PCI devices directory: the same list.
    assert cpuplan.host_gpus("0000:ab:00.0", h224 / "sys/bus/pci/devices") == gpus
    kvm = repo / "tests/fixtures/topologies/ghw-kvm-xeon-e5-2695v4-tesla-p100"
    assert host.host_gpus("0000:06:00.0", root=kvm) == [HostGpu("0000:06:00.0", None, frozenset(range(8)))]
    # Without sysfs, or without the device: empty.
    assert host.host_gpus("0000:77:00.0", root=h224) == []
    assert host.host_gpus("0000:18:00.0", root="/nonexistent") == []


def test_auto_places_by_rank_and_the_api_server_from_the_top(repo: Path) -> None:
    p = host.deployment_plan(
        "auto",
        ["0000:18:00.0", "00000000:2A:00.0", None],
        mask=cpuplan.parse_cpu_list("0-55,112-167"),
        usable=16,
        root=repo / "examples/host",
    )
    assert p.workers[0] == StepCpus(frozenset({0, 112}), "gpu 0000:18:00.0 rank 0 of 4 on node 0: core 0 from the bottom")
    assert p.workers[1] is not None and p.workers[1].cpus == frozenset({1, 113})
    assert p.workers[2] is None
    assert type(p) is HookPlan
    assert p.result == 55 and p.result_core == StepCpus(frozenset({55, 167}), "worker 0's gpu 0000:18:00.0 rank 0 of 4 on node 0: core 0 from the top")
    assert p.pinned == frozenset({0, 1, 55, 112, 113, 167})
    assert (p.left, p.preprocess_threads, p.png_threads, p.encode_workers, p.copy_workers) == (10, 2, 2, 5, 2)
    assert p.setting == "auto"
    assert p.devices == ("0000:18:00.0", "0000:2a:00.0", None)
    assert p.why.startswith("step_thread_core auto: 2 of 3 workers pinned by GPU rank on node 0")


def test_auto_pins_nothing_and_says_why_when_the_mask_is_small(repo: Path) -> None:
    p = host.deployment_plan("auto", ["0000:18:00.0"], mask={0, 1, 2}, usable=3, root=repo / "examples/host")
    assert p.workers == (None,) and p.result is None and p.pinned == frozenset()
    assert "fewer than 2 per GPU" in p.why and p.why.endswith("nothing pinned")
    assert p.left == 3


def test_a_cpu_number_and_off(repo: Path) -> None:
    host = repo / "examples/host"
    p = cpuplan.host.deployment_plan(3, [None, None], mask=range(224), usable=8, root=host)
    assert [w.cpus for w in p.workers if w] == [frozenset({3, 115}), frozenset({4, 116})]
    assert p.result == 111 and p.result_core == StepCpus(frozenset({111, 223}), "the last core of the mask")
    assert p.setting == "3"
    off = cpuplan.host.deployment_plan("off", ["0000:18:00.0", None], mask={0, 1, 2, 3}, usable=4, root=host)
    assert off == HookPlan(frozenset({0, 1, 2, 3}), 4, (None, None), None, "step_thread_core off", "off", ("0000:18:00.0", None))


@pytest.mark.parametrize(
    "setting,mask,needle",
    [
        (300, range(16), "cpu 300 is not in the mask 0-15"),
        ("14", range(16), "too near the top of the mask"),
        ("fast", range(16), '"fast" is not off, auto or a cpu number'),
        ("-1", range(16), '"-1"'),
    ],
)
def test_settings_the_mask_cannot_honour_raise_cpu_plan_error(setting: object, mask: range, needle: str, tmp_path: Path) -> None:
    with pytest.raises(CpuPlanError) as e:
        host.deployment_plan(setting, [None, None], mask=mask, usable=16, root=tmp_path)  # type: ignore[arg-type]
    assert needle in str(e.value)
    assert isinstance(e.value, ValueError)


@pytest.mark.parametrize("setting", [True, 1.5, None, ["auto"]])
def test_a_setting_of_another_type_is_a_type_error(setting: object) -> None:
    with pytest.raises(TypeError):
        cpuplan.deployment_plan(setting, [None], mask={0, 1, 2}, usable=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        host.deployment_plan(setting, [None], mask={0, 1, 2}, usable=3)  # type: ignore[arg-type]


def test_a_siblings_callable_replaces_sysfs(tmp_path: Path) -> None:
    calls = []

    def siblings(cpu: int) -> frozenset:
        calls.append(cpu)
        return frozenset({cpu, cpu ^ 1})  # pairs 0-1, 2-3, ...

    p = host.deployment_plan(3, [None, None], mask=range(16), usable=16, root=tmp_path, siblings=siblings)
    assert [w.cpus for w in p.workers if w] == [frozenset({2, 3}), frozenset({4, 5})]
    assert p.result_core is not None and p.result_core.cpus == frozenset({14, 15})
    assert p.left == 10 and calls
    # Without SMT (each CPU its own core), as the planner's own test on a flat topology.
    flat = host.deployment_plan(3, [None, None], mask=range(16), usable=16, root=tmp_path, siblings=lambda c: [c])
    assert flat.pinned == frozenset({3, 4, 15}) and flat.left == 13
    assert flat.workers[1] is not None and flat.workers[1].why == "core 1 above cpu 3's core"


def test_an_error_in_the_siblings_callable_is_raised(tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    def siblings(cpu: int) -> frozenset:
        raise Boom(f"no siblings for {cpu}")

    with pytest.raises(Boom, match="no siblings for"):
        host.deployment_plan(3, [None], mask=range(8), usable=8, root=tmp_path, siblings=siblings)


def test_defaults_are_this_process_mask_and_usable_over_every_hierarchy(tmp_path: Path) -> None:
    p = host.deployment_plan("off", [None], root=tmp_path)
    assert p.mask == cpuplan.process_mask()
    assert p.usable == host.usable_cpus()


def test_a_hook_plan_is_a_cpu_plan_that_counts_the_api_servers_whole_core() -> None:
    p = HookPlan(frozenset(range(64)), 40, (StepCpus(frozenset({0, 32}), "a"),), 31, "why", "auto", ("0000:18:00.0",), StepCpus(frozenset({31, 63}), "b"))
    assert isinstance(p, CpuPlan)
    assert p.pinned == frozenset({0, 31, 32, 63})
    assert (p.left, p.preprocess_threads, p.png_threads, p.encode_workers, p.copy_workers) == (36, 4, 4, 9, 4)
    # The seed's plan of the same fields counts result's one CPU.
    seed = CpuPlan(p.mask, p.usable, p.workers, p.result, p.why)
    assert seed.pinned == frozenset({0, 31, 32}) and seed.left == 37
    # A result moved off the core is one CPU again; no result, none.
    p.result = 5
    assert p.pinned == frozenset({0, 5, 32})
    p.result = None
    assert p.pinned == frozenset({0, 32})
    with pytest.raises(ValueError):
        CpuPlan(frozenset({0}), 1, (StepCpus(frozenset({9000}), "past the highest cpu id"),)).pinned


def test_cpu_plan_error_is_the_seeds() -> None:
    assert issubclass(CpuPlanError, ValueError)
    assert CpuPlanError.__module__ == "cpuplan.cpus"
    assert CpuPlanError.__doc__ == "A step_thread_core value the process mask can't honour."


def test_a_gpu_on_a_node_without_cpus_is_placed_on_the_nearest_grace_node(repo: Path) -> None:
    off = repo / "tests/fixtures/grace/gb200-cdmm-off"
    on = repo / "tests/fixtures/grace/gb200-cdmm-on"
    # The seed's HostGpu keeps what sysfs says: the GPU's memory node and its empty local CPUs.
    assert host.host_gpus("0008:01:00.0", root=off)[0] == HostGpu("0008:01:00.0", "2", frozenset())
    addresses = ["0008:01:00.0", "0009:01:00.0", None, "0018:01:00.0"]
    p = host.deployment_plan("auto", addresses, mask=range(144), usable=16, root=off)
    q = host.deployment_plan("auto", addresses, mask=range(144), usable=16, root=on)
    cpus = [None if w is None else w.cpus for w in p.workers]
    assert cpus == [None if w is None else w.cpus for w in q.workers]
    assert cpus == [frozenset({0}), frozenset({1}), None, frozenset({72})]
    assert p.result == q.result == 71
    # Where the placement node shows: the worker's why and the plan's.
    assert p.workers[0] is not None and "rank 0 of 2 on node 0 (nearest to its node 2)" in p.workers[0].why
    assert "gpu 0008:01:00.0's node 2 has no CPUs: node 0" in p.why
    # The seed's call over the same host's PCI devices directory places them alike.
    s = cpuplan.cpus.deployment_plan(
        "auto", addresses, mask=range(144), usable=16, pci_root=off / "sys/bus/pci/devices", siblings=lambda c: frozenset({c})
    )
    assert [None if w is None else w.cpus for w in s.workers] == cpus
