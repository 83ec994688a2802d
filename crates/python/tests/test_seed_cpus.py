"""cpuplan.cpus does what mstar.utils.cpus documents, call for call: each test is a sentence of the seed's reference.

Each place where an implementation could easily drift from the seed has a test here, named after
what the seed says.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import subprocess
import sys
import threading
from pathlib import Path
import pytest
from conftest import python

from cpuplan import cpus, host, threads
from cpuplan.cpus import CpuPlan, CpuPlanError, HostGpu, StepCpus

H224 = "examples/host"
A, B, C = "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0"


@pytest.fixture
def pci(repo: Path) -> Path:
    """The example host's PCI devices directory (8 NVIDIA GPUs, 4 per NUMA node)."""
    return repo / H224 / "sys/bus/pci/devices"


@pytest.fixture
def sib(repo: Path):  # type: ignore[no-untyped-def]
    """The example host's SMT siblings (n and n+112) as a siblings callable."""
    return lambda cpu: host.smt_siblings(cpu, root=repo / H224)


# --- cgroup_cpu_quota(root=_CGROUP_ROOT, proc_cgroup='/proc/self/cgroup') ---------------


@pytest.mark.parametrize(
    "tree,mount,pid,quota",
    [
        ("v2", "sys/fs/cgroup", 4242, 2.5),  # kubepods/pod1's 2.5 under the leaf's 4.0
        ("v2", "sys/fs/cgroup", 4243, None),  # no level sets one
        ("v1", "sys/fs/cgroup", 4242, None),  # cgroup v2 is absent: v1's 1.5 is not counted
        ("hybrid", "sys/fs/cgroup/unified", 4242, 1.5),  # the v2 limits only (v1 sets 1.25)
        ("hybrid", "sys/fs/cgroup", 4242, None),  # the v1 tmpfs is no v2 mount
        ("container", "sys/fs/cgroup", 1, 0.5),  # the limit on the mount point itself
        ("container", "sys/fs/cgroup", 7, 0.5),
        ("container", "sys/fs/cgroup", 9, None),  # `..` in the path: outside this mount's view
        ("escaped", "sys/fs/cgroup/my cgroup", 5, 0.75),  # one-field cpu.max, a colon in the path
    ],
)
def test_the_quota_is_the_tightest_v2_cpu_max_over_the_cgroup_and_its_ancestors(repo: Path, tree: str, mount: str, pid: int, quota: object) -> None:
    root = repo / "tests/fixtures/cgroup" / tree
    got = cpus.cgroup_cpu_quota(root=root / mount, proc_cgroup=str(root / f"proc/{pid}/cgroup"))
    assert got == quota
    # Positionally, and with the root as text, the same.
    assert cpus.cgroup_cpu_quota(str(root / mount), str(root / f"proc/{pid}/cgroup")) == quota


def test_cgroup_v1_limits_are_cpuplan_hosts_extra(repo: Path) -> None:
    # The seed's call counts v2 only; every hierarchy is cpuplan.host's.
    tree = repo / "tests/fixtures/cgroup/hybrid"
    assert cpus.cgroup_cpu_quota(tree / "sys/fs/cgroup/unified", str(tree / "proc/4242/cgroup")) == 1.5
    assert host.cgroup_cpu_quota(4242, root=tree) == 1.25


def test_the_quota_defaults_are_the_v2_mount_and_this_process(tmp_path: Path) -> None:
    assert cpus.cgroup_cpu_quota() == cpus.cgroup_cpu_quota(Path("/sys/fs/cgroup"), "/proc/self/cgroup")
    assert cpus._CGROUP_ROOT == Path("/sys/fs/cgroup")
    # No /proc/self/cgroup at all (no cgroups): none.
    assert cpus.cgroup_cpu_quota(tmp_path, str(tmp_path / "absent")) is None


def test_a_malformed_cpu_max_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "cg/a").mkdir(parents=True)
    (tmp_path / "cg/a/cpu.max").write_text("lots\n")
    (tmp_path / "cgroup").write_text("0::/a\n")
    with pytest.raises(OSError, match="cpu.max"):
        cpus.cgroup_cpu_quota(tmp_path / "cg", str(tmp_path / "cgroup"))


# --- process_mask(), usable_cpus() ---------------------------------------------------------


def test_the_process_mask_is_the_processes_whatever_the_calling_threads(two_cpus: tuple) -> None:
    # After pin_thread({b}, ...) the process may still run on both CPUs.
    a, b = two_cpus
    whole = cpus.process_mask()
    assert {a, b} <= whole
    seen = {}

    def pinned() -> None:
        threads.pin_thread({b}, whole)
        seen["thread"] = frozenset(os.sched_getaffinity(0))
        seen["mask"] = cpus.process_mask()
        seen["usable"] = cpus.usable_cpus()

    t = threading.Thread(target=pinned)
    t.start()
    t.join()
    assert seen["thread"] == frozenset({b})
    assert seen["mask"] == whole
    quota = cpus.cgroup_cpu_quota()
    assert seen["usable"] == cpus.usable_cpus() == (len(whole) if quota is None else max(1, min(len(whole), int(quota))))


def test_the_process_mask_is_every_cpu_where_affinity_is_unknown() -> None:
    out = python("import os; del os.sched_getaffinity; import cpuplan; print(sorted(cpuplan.process_mask()) == list(range(os.cpu_count())))")
    assert (out.returncode, out.stdout.strip()) == (0, "True"), out.stderr


def test_a_process_moved_wider_is_seen(two_cpus: tuple) -> None:
    a, b = two_cpus
    code = f"import os; os.sched_setaffinity(0, {{{a}}}); import cpuplan; m = cpuplan.process_mask(); os.sched_setaffinity(0, {{{a}, {b}}}); print(sorted(m), sorted(cpuplan.process_mask()))"
    out = python(code)
    assert out.stdout.strip() == f"[{a}] [{a}, {b}]", out.stderr


@pytest.mark.parametrize("quota,usable", [(0.5, 1), (1.9, 1), (None, None), (1000.0, None)])
def test_usable_cpus_is_the_mask_capped_by_the_quota_rounded_down_at_least_1(monkeypatch: pytest.MonkeyPatch, quota: object, usable: object) -> None:
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda: quota)
    assert cpus.usable_cpus() == (len(cpus.process_mask()) if usable is None else usable)


# --- smt_siblings(cpu), host_gpus(like, root=_PCI_DEVICES) ----------------------------------


def test_smt_siblings_are_the_hosts_cpu_included() -> None:
    for cpu in sorted(cpus.process_mask()):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        assert cpus.smt_siblings(cpu) == cpus.parse_cpu_list(path.read_text())
        assert cpu in cpus.smt_siblings(cpu)


def test_host_gpus_root_is_the_pci_devices_directory(pci: Path) -> None:
    # The seed's root is the PCI devices directory itself, and it finds the GPUs there.
    gpus = cpus.host_gpus(A, pci)
    assert [g.address for g in gpus] == [A, B, C, "0000:5d:00.0", "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert gpus[0] == HostGpu(A, "0", cpus.parse_cpu_list("0-55,112-167"))
    assert gpus[7].node == "1" and isinstance(gpus[7].local, frozenset)
    assert cpus.host_gpus("00000000:18:00.0", root=str(pci)) == gpus
    assert cpus._PCI_DEVICES == Path("/sys/bus/pci/devices")


def test_host_gpus_is_empty_without_sysfs(pci: Path) -> None:
    assert cpus.host_gpus(A, Path("/nonexistent")) == []
    assert cpus.host_gpus("0000:77:00.0", pci) == []
    assert cpus.host_gpus("not-an-address", pci) == []


# --- deployment_plan(setting, addresses, *, mask, usable, pci_root, siblings) --------------


def test_auto_places_by_rank_and_the_api_server_from_the_top(pci: Path, sib) -> None:  # type: ignore[no-untyped-def]
    # pci_root= and siblings= as the seed names them.
    p = cpus.deployment_plan("auto", [A, "00000000:2A:00.0", None], mask=cpus.parse_cpu_list("0-55,112-167"), usable=16, pci_root=pci, siblings=sib)
    assert type(p) is CpuPlan
    assert p.workers[0] == StepCpus(frozenset({0, 112}), "gpu 0000:18:00.0 rank 0 of 4 on node 0: core 0 from the bottom")
    assert p.workers[1] is not None and p.workers[1].cpus == frozenset({1, 113})
    assert p.workers[2] is None
    # The API server's result is one CPU of the top core: the seed's int.
    assert p.result == 55
    assert p.pinned == frozenset({0, 1, 55, 112, 113})
    assert (p.left, p.preprocess_threads, p.png_threads, p.encode_workers, p.copy_workers) == (11, 2, 2, 5, 2)
    assert p.why.startswith("step_thread_core auto: 2 of 3 workers pinned by GPU rank on node 0")


def test_siblings_default_to_smt_siblings_the_hosts(pci: Path) -> None:
    mask = cpus.parse_cpu_list("0-55,112-167")
    p = cpus.deployment_plan("auto", [A], mask=mask, usable=16, pci_root=pci)
    q = cpus.deployment_plan("auto", [A], mask=mask, usable=16, pci_root=pci, siblings=lambda c: cpus.smt_siblings(c) if c < 2 else frozenset({c}))
    assert p == q
    assert p.workers[0] is not None and p.workers[0].cpus == cpus.smt_siblings(0) & mask


def test_off_pins_nothing(pci: Path) -> None:
    p = cpus.deployment_plan("off", [A, None], mask={0, 1, 2, 3}, usable=4, pci_root=pci)
    assert p == CpuPlan(frozenset({0, 1, 2, 3}), 4, (None, None), None, "step_thread_core off")


def test_a_cpu_number_is_the_first_workers_the_next_take_the_cores_above_the_api_server_the_last() -> None:
    pairs = lambda c: frozenset({c, c ^ 1})  # noqa: E731 - cores 0-1, 2-3, ...
    p = cpus.deployment_plan(3, [None, None], mask=range(16), usable=16, siblings=pairs)
    assert [w.cpus for w in p.workers if w] == [frozenset({2, 3}), frozenset({4, 5})]
    assert p.result == 14 and p.pinned == frozenset({2, 3, 4, 5, 14}) and p.left == 11
    flat = cpus.deployment_plan("3", [None, None], mask=range(16), usable=16, siblings=lambda c: frozenset({c}))
    assert flat.pinned == frozenset({3, 4, 15}) and flat.left == 13 and flat.result == 15
    assert flat.workers[1] is not None and flat.workers[1].why == "core 1 above cpu 3's core"


@pytest.mark.parametrize(
    "setting,needle",
    [(300, "cpu 300 is not in the mask 0-15"), ("14", "too near the top of the mask"), ("fast", '"fast" is not off, auto or a cpu number')],
)
def test_a_number_the_mask_cannot_honour_raises_cpu_plan_error(setting: object, needle: str) -> None:
    with pytest.raises(CpuPlanError, match=needle) as e:
        cpus.deployment_plan(setting, [None, None], mask=range(16), usable=16, siblings=lambda c: frozenset({c}))  # type: ignore[arg-type]
    assert isinstance(e.value, ValueError)


def test_auto_pins_nothing_and_says_why_when_the_mask_is_too_small(pci: Path, sib) -> None:  # type: ignore[no-untyped-def]
    p = cpus.deployment_plan("auto", [A], mask={0, 1, 2}, usable=3, pci_root=pci, siblings=sib)
    assert p.workers == (None,) and p.result is None and p.pinned == frozenset() and p.left == 3
    assert "fewer than 2 per GPU" in p.why and p.why.endswith("nothing pinned")


def test_at_least_one_cpu_of_the_mask_stays_unpinned() -> None:
    for n in range(1, 9):
        for setting in range(n):
            try:
                p = cpus.deployment_plan(setting, [None], mask=range(n), usable=n, siblings=lambda c: frozenset({c}))
            except CpuPlanError:
                continue
            assert p.pinned < frozenset(range(n)), (n, setting)


def test_mask_and_usable_default_to_this_process() -> None:
    p = cpus.deployment_plan("off", [None])
    assert p.mask == cpus.process_mask() and p.usable == cpus.usable_cpus()


def test_an_error_in_siblings_is_raised() -> None:
    def boom(cpu: int) -> frozenset:
        raise KeyError(f"no siblings for {cpu}")

    with pytest.raises(KeyError, match="no siblings for"):
        cpus.deployment_plan(3, [None], mask=range(8), usable=8, siblings=boom)


def test_deployment_plan_takes_no_root_keyword() -> None:
    with pytest.raises(TypeError):
        cpus.deployment_plan("auto", [A], root="/")  # type: ignore[call-arg]


# --- device_addresses(devices), devices_plan(setting, devices) -----------------------------


def test_device_addresses_are_pci_addresses_and_none_for_a_cpu_worker() -> None:
    # This machine reports no GPU: cuda:N is None; a PCI address is itself, canonical.
    assert cpus.device_addresses(["cpu", "00000000:2A:00.0", "mps"]) == [None, B, None]
    if not Path("/proc/driver/nvidia/gpus").exists():
        assert cpus.device_addresses(["cuda:1"]) == [None]


def test_devices_plan_is_deployment_plan_of_the_device_addresses() -> None:
    assert cpus.devices_plan("auto", ["cpu", "cpu"]) == cpus.deployment_plan("auto", [None, None])
    assert cpus.devices_plan("off", ["cuda:0", "cpu"]) == cpus.deployment_plan("off", cpus.device_addresses(["cuda:0", "cpu"]))


# --- CpuPlan -------------------------------------------------------------------------------


def test_cpu_plan_takes_the_seeds_five_fields_and_an_int_result() -> None:
    # CpuPlan(mask, 8, workers, 7, 'manual'), as the seed builds one.
    workers = (StepCpus(frozenset({0, 4}), "w0"), None)
    p = CpuPlan(frozenset(range(8)), 8, workers, 7, "manual")
    assert (p.result, p.why) == (7, "manual")
    assert p.pinned == frozenset({0, 4, 7}) and p.left == 5
    assert [f.name for f in dataclasses.fields(p)] == ["mask", "usable", "workers", "result", "why"]
    assert CpuPlan(frozenset({0}), 1) == CpuPlan(frozenset({0}), 1, (), None, "step_thread_core off")


def test_cpu_plan_is_a_plain_dataclass_that_can_be_changed() -> None:
    # As the seed's: not frozen, no extra fields.
    p = CpuPlan(frozenset(range(16)), 16)
    p.usable = 9
    p.workers = (StepCpus(frozenset({1}), "w"),)
    p.result = 15
    assert p.pinned == frozenset({1, 15}) and p.left == 7
    with pytest.raises(TypeError):
        hash(p)
    with pytest.raises(TypeError):
        CpuPlan(frozenset({0}), 1, (), None, "why", "auto")  # type: ignore[call-arg]


@pytest.mark.parametrize("usable,pinned,pools", [(4, 0, (4, 1, 1, 4, 1)), (40, 3, (37, 4, 4, 9, 4)), (8, 3, (5, 1, 1, 5, 1)), (2, 5, (1, 1, 1, 1, 1)), (23, 2, (21, 4, 4, 5, 4))])
def test_pool_sizes_come_from_the_cpus_left(usable: int, pinned: int, pools: tuple) -> None:
    workers = tuple(StepCpus(frozenset({i}), "w") for i in range(pinned - 1)) if pinned else ()
    p = CpuPlan(frozenset(range(64)), usable, workers, 63 if pinned else None)
    assert len(p.pinned) == pinned
    assert (p.left, p.preprocess_threads, p.png_threads, p.encode_workers, p.copy_workers) == pools
    # preprocess_threads: a quarter of the CPUs left, at most 4; encode_workers x png_threads within them.
    assert p.preprocess_threads == max(1, min(4, p.left // 4))
    assert p.encode_workers * p.png_threads <= max(p.left, 1)


# --- install(new), plan() ------------------------------------------------------------------


def _nothing_pinned(p: CpuPlan) -> bool:
    """Whether p is plan()'s nothing pinned: the process mask and usable CPUs, no workers, why "no plan..."."""
    return (p.mask, p.usable, p.workers, p.result) == (cpus.process_mask(), cpus.usable_cpus(), (), None) and p.why.startswith("no plan")


def test_plan_is_the_one_install_set_else_nothing_pinned() -> None:
    assert _nothing_pinned(cpus.plan())
    mine = CpuPlan(frozenset({0, 1}), 2, (StepCpus(frozenset({1}), "mine"),), 0, "installed")
    cpus.install(mine)
    assert cpus.plan() is mine
    cpus.install(None)
    assert _nothing_pinned(cpus.plan())
    with pytest.raises(TypeError):
        cpus.install("auto")  # type: ignore[arg-type]


def test_install_none_is_nothing_pinned_even_beside_a_hook_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # plan() reads no hook file, as the seed's; hook_plan() is the one explicit call.
    import cpuplan

    path = tmp_path / "plan.json"
    path.write_text(_hook_plan_text())
    monkeypatch.setenv("CPUPLAN_PLAN", str(path))
    for k, v in {"CPUPLAN_MASK": "0", "CPUPLAN_USABLE": "1"}.items():
        monkeypatch.setenv(k, v)
    assert cpuplan.hook_plan() is not None
    cpus.install(cpuplan.hook_plan())
    assert cpus.plan().workers[0] is not None
    cpus.install(None)
    p = cpus.plan()
    assert (p.workers, p.result) == ((), None)
    assert p.why == f"no plan installed: install(cpuplan.hook_plan()) installs the one in {path}"


def _hook_plan_text() -> str:
    """A plan.json as the planner writes it, one worker on cpu 1."""
    return (
        '{"version": 1, "setting": "1", "mask": "0-1", "usable": 2, "devices": [null], '
        '"workers": [{"device": null, "cpus": "1", "why": "w"}], "result": null, "pinned": "1", "left": 1, '
        '"pools": {"preprocess_threads": 1, "png_threads": 1, "encode_workers": 1, "copy_workers": 1}, "why": "hook"}'
    )


# --- claim_gpus(addresses) -----------------------------------------------------------------


def child(code: str, locks: Path) -> subprocess.Popen:
    """A python child with its GPU lock directory at locks, running code, then waiting for a line on stdin."""
    full = f"import sys, cpuplan.cpus as c; c._GPU_LOCK_DIR = {str(locks)!r}\n{code}\nprint('done', flush=True); sys.stdin.readline()"
    return subprocess.Popen([sys.executable, "-c", full], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def held_by_other(path: Path) -> bool:
    """Whether another process holds the flock on path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.fixture
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's _GPU_LOCK_DIR."""
    d = tmp_path / "gpu-locks"
    monkeypatch.setattr(cpus, "_GPU_LOCK_DIR", d)
    return d


def test_a_lock_on_each_gpu_for_the_life_of_the_process(locks: Path) -> None:
    assert cpus.claim_gpus([A, None, "00000000:2A:00.0"]) is None
    assert sorted(p.name for p in locks.iterdir()) == [f"{A}.lock", f"{B}.lock"]
    assert cpus.claim_gpus([A]) is None  # again from this process: still held
    other = child(f"print(repr(c.claim_gpus([{B!r}])))", locks)
    assert other.stdout is not None
    why = eval(other.stdout.readline())  # noqa: S307 - our own child's repr
    other.communicate("\n")
    assert isinstance(why, str) and B in why and str(locks) in why


def test_one_that_cant_be_had_holds_none_of_them(locks: Path) -> None:
    assert cpus.claim_gpus([A]) is None
    other = child(f"print(repr(c.claim_gpus([{C!r}, {A!r}])))", locks)
    assert other.stdout is not None
    why = eval(other.stdout.readline())  # noqa: S307
    assert isinstance(why, str) and A in why
    assert other.stdout.readline() == "done\n"
    assert not held_by_other(locks / f"{C}.lock")  # the child, still running, let C go
    other.communicate("\n")


def test_a_dead_server_leaves_nothing_to_clean_up_and_the_file_is_never_unlinked(locks: Path) -> None:
    other = child(f"assert c.claim_gpus([{C!r}]) is None", locks)
    assert other.stdout is not None and other.stdout.readline() == "done\n"
    inode = (locks / f"{C}.lock").stat().st_ino
    assert held_by_other(locks / f"{C}.lock")
    other.communicate("\n")
    assert not held_by_other(locks / f"{C}.lock")
    assert cpus.claim_gpus([C]) is None
    assert (locks / f"{C}.lock").stat().st_ino == inode


def test_any_address_names_a_lock_inside_the_directory(locks: Path) -> None:
    # As the seed: no ValueError for a non-PCI address, no claims_dir= or wait=.
    assert cpus.claim_gpus(["MIG-GPU-1/2/0", "../x"]) is None
    assert sorted(p.name for p in locks.iterdir()) == ["..%2Fx.lock", "MIG-GPU-1%2F2%2F0.lock"]
    assert cpus.claim_gpus([None]) is None and cpus.claim_gpus([]) is None
    with pytest.raises(TypeError):
        cpus.claim_gpus([A], claims_dir=locks)  # type: ignore[call-arg]


def test_a_lock_directory_that_cant_be_made_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(cpus, "_GPU_LOCK_DIR", tmp_path / "file" / "locks")
    why = cpus.claim_gpus([A])
    assert why is not None and str(tmp_path / "file" / "locks") in why


# --- importing ------------------------------------------------------------------------------


def test_importing_changes_no_environment_variable_and_reads_no_plan() -> None:
    # As with the seed, CUDA_DEVICE_ORDER stays unset.
    code = (
        "import os, warnings; warnings.simplefilter('error'); before = dict(os.environ)\n"
        "import cpuplan, cpuplan.cpus, cpuplan.threads, cpuplan.host\n"
        "print(dict(os.environ) == before, 'CUDA_DEVICE_ORDER' in os.environ, cpuplan.plan().why)"
    )
    out = python(code, env={"CPUPLAN_PLAN": "/proc/self/status", "CPUPLAN_MASK": "0", "CPUPLAN_USABLE": "1"})
    no_plan = "no plan installed: install(cpuplan.hook_plan()) installs the one in /proc/self/status"
    assert (out.returncode, out.stdout, out.stderr) == (0, f"True False {no_plan}\n", "")
    out = python("import os, cpuplan; print(cpuplan.use_pci_bus_order(), os.environ['CUDA_DEVICE_ORDER'])")
    assert out.stdout == "PCI_BUS_ID PCI_BUS_ID\n", out.stderr
    out = python("import cpuplan; print(cpuplan.use_pci_bus_order())", env={"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert out.stdout == "FASTEST_FIRST\n", out.stderr


def test_importing_needs_no_writable_temporary_directory() -> None:
    # A container with a read-only rootfs and no /tmp: the import touches no file.
    code = (
        "import tempfile\n"
        "def none(): raise FileNotFoundError('no usable temporary directory')\n"
        "tempfile.tempdir = None; tempfile._get_default_tempdir = none\n"
        "import cpuplan; print(cpuplan.cpus._GPU_LOCK_DIR)"
    )
    out = python(code)
    assert (out.returncode, out.stdout) == (0, "/tmp/cpuplan-gpu-locks\n"), out.stderr


def test_the_seeds_modules_are_importable_as_the_seeds_were() -> None:
    out = python("from cpuplan import cpus, threads; from cpuplan.cpus import CpuPlan, deployment_plan; from cpuplan.threads import Thread; print('ok')")
    assert out.stdout == "ok\n", out.stderr

