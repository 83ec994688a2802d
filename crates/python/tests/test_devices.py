"""Finding "my worker": cuda:N and PCI addresses to PCI addresses, and to the plan's workers."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import python

import cpuplan
from cpuplan import Worker

HOST = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]


@pytest.fixture
def host(repo: Path) -> Path:
    """The example host: 8 NVIDIA GPUs in /proc/driver/nvidia/gpus and sysfs."""
    return repo / "examples/host"


def uuid_of(host: Path, address: str) -> str:
    """The GPU- UUID in a fixture GPU's information file."""
    text = (host / f"proc/driver/nvidia/gpus/{address}/information").read_text()
    return next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("GPU UUID"))


def test_cuda_n_is_the_nth_gpu_in_pci_order(host: Path) -> None:
    assert cpuplan.visible_gpus(root=host) == HOST
    got = cpuplan.host.device_addresses(["cuda:0", "cpu", "cuda:1", "cuda:7", "cuda:8", "cuda", 3, "mps"], root=host)
    assert got == [HOST[0], None, HOST[1], HOST[7], None, HOST[0], HOST[3], None]


def test_pci_addresses_in_any_spelling(host: Path) -> None:
    got = cpuplan.host.device_addresses(["00000000:2A:00.0", "0000:2a:00.0", "2a:00.0", "0000:2a:00.9"], root=host)
    assert got == ["0000:2a:00.0", "0000:2a:00.0", "0000:2a:00.0", None]


def test_cuda_visible_devices_narrows_and_orders(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,2")
    assert cpuplan.visible_gpus(root=host) == [HOST[5], HOST[2]]
    assert cpuplan.host.device_addresses(["cuda:0", "cuda:1", "cuda:2"], root=host) == [HOST[5], HOST[2], None]
    # A UUID prefix; the list stops at the first entry that names no GPU, as CUDA's does.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{uuid_of(host, HOST[6])[:12]},1,9,0")
    assert cpuplan.visible_gpus(root=host) == [HOST[6], HOST[1]]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert cpuplan.visible_gpus(root=host) == []
    assert cpuplan.host.device_addresses(["cuda:0"], root=host) == [None]


def test_nvidia_visible_devices_narrows_the_hosts_list(host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", f"6,{uuid_of(host, HOST[1])},0000:9A:00.0")
    assert cpuplan.visible_gpus(root=host) == [HOST[1], HOST[4], HOST[6]]
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "all")
    assert cpuplan.visible_gpus(root=host) == HOST
    for none in ["none", "void", ""]:
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", none)
        assert cpuplan.visible_gpus(root=host) == []
    # CUDA_VISIBLE_DEVICES applies on top.
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "4,5,6")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert cpuplan.host.device_addresses(["cuda:0"], root=host) == [HOST[6]]


def test_a_containers_narrowed_proc_is_taken_as_is(host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The NVIDIA runtime shows a container only its GPUs in /proc/driver/nvidia/gpus, while
    # NVIDIA_VISIBLE_DEVICES still holds the host's indices.
    root = tmp_path / "container"
    for a in (HOST[6], HOST[7]):
        shutil.copytree(host / f"proc/driver/nvidia/gpus/{a}", root / f"proc/driver/nvidia/gpus/{a}")
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "6,7")
    assert cpuplan.visible_gpus(root=root) == [HOST[6], HOST[7]]


def test_sysfs_when_there_is_no_proc_listing(repo: Path, tmp_path: Path) -> None:
    kvm = repo / "tests/fixtures/topologies/ghw-kvm-xeon-e5-2695v4-tesla-p100"
    assert not (kvm / "proc/driver/nvidia").exists()
    assert cpuplan.host.device_addresses(["cuda:0", "cuda:1"], root=kvm) == ["0000:06:00.0", None]
    # No GPU known at all: every cuda:N is None, a PCI address is still itself.
    assert cpuplan.visible_gpus(root=tmp_path) is None
    assert cpuplan.host.device_addresses(["cuda:0", "0000:18:00.0"], root=tmp_path) == [None, "0000:18:00.0"]


def test_the_hooks_plan_names_the_containers_gpus(host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, two_cpus: tuple) -> None:
    a, b = two_cpus
    # The container's GPUs 0000:5d:00.0 and 0000:ab:00.0, though the host lists 8.
    for k, v in {
        "CPUPLAN_MASK": f"{a},{b}",
        "CPUPLAN_USABLE": "2",
        "CPUPLAN_WORKERS": f";{b}",
        "CPUPLAN_DEVICES": f"{HOST[3]};{HOST[5]}",
        "CPUPLAN_WHY": "the hook's",
    }.items():
        monkeypatch.setenv(k, v)
    hook = cpuplan.hook_plan()
    assert cpuplan.visible_gpus(root=host) == HOST  # nothing installed: the host's
    assert cpuplan.visible_gpus(plan=hook, root=host) == [HOST[3], HOST[5]]
    assert cpuplan.host.device_addresses(["cuda:1", "cuda:0", "cuda:2"], root=host, plan=hook) == [HOST[5], HOST[3], None]
    cpuplan.install(hook)  # the installed plan is find_worker's and visible_gpus' default
    assert cpuplan.visible_gpus(root=host) == [HOST[3], HOST[5]]
    assert cpuplan.find_worker("cuda:1", root=host) == Worker(1, HOST[5], frozenset({b}), "worker 1 of CPUPLAN_WORKERS in the environment")
    assert cpuplan.find_worker(0, root=host) == Worker(0, HOST[3], None, "the hook's")
    assert cpuplan.find_worker("00000000:AB:00.0", root=host) == cpuplan.find_worker("cuda:1", root=host)
    assert cpuplan.find_worker(HOST[0], root=host) is None
    assert cpuplan.find_worker("cpu", root=host) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert cpuplan.find_worker("cuda:0", root=host) == Worker(1, HOST[5], frozenset({b}), "worker 1 of CPUPLAN_WORKERS in the environment")


def test_devices_plan_is_deployment_plan_of_the_addresses(host: Path) -> None:
    mask = cpuplan.parse_cpu_list("0-223")
    p = cpuplan.host.devices_plan("auto", ["cuda:4", "cuda:7", "cpu"], mask=mask, usable=32, root=host)
    q = cpuplan.host.deployment_plan("auto", [HOST[4], HOST[7], None], mask=mask, usable=32, root=host)
    assert p == q
    assert p.workers[0] is not None and p.workers[0].cpus == frozenset({56, 168})
    assert cpuplan.find_worker("cuda:7", plan=p, root=host) == Worker(1, HOST[7], frozenset({59, 171}), p.workers[1].why)  # type: ignore[union-attr]


def test_a_plan_without_devices_takes_cuda_n_as_worker_n() -> None:
    p = cpuplan.CpuPlan(range(8), 8, (None, cpuplan.StepCpus(frozenset({3}), "w1")), None, "made by hand")
    assert cpuplan.find_worker("cuda:1", plan=p) == Worker(1, None, frozenset({3}), "w1")
    assert cpuplan.find_worker(0, plan=p) == Worker(0, None, None, "made by hand")
    assert cpuplan.find_worker("cuda:2", plan=p) is None
    assert cpuplan.find_worker("0000:18:00.0", plan=p) is None


def test_import_leaves_cuda_device_order_alone_and_device_addresses_warn_on_another_order(host: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    assert python("import os, cpuplan; print(os.environ.get('CUDA_DEVICE_ORDER'))").stdout == "None\n"
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    assert cpuplan.host.device_addresses(["cuda:0"], root=host) == [HOST[0]]
    assert "CUDA_DEVICE_ORDER is FASTEST_FIRST" in caplog.text
