"""cpuplan.host.claim_gpus, the hook's claims: held for the life of the process, all or none, and seen by the hook's `claims` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import python, run_hook

import cpuplan

A, B = "0000:2a:00.0", "0000:3a:00.0"


def claim_in_child(claims: Path, addresses: list) -> str:
    """What claim_gpus returns in another process (which then exits), printed as JSON."""
    out = python(f"import cpuplan, json; print(json.dumps(cpuplan.host.claim_gpus({addresses!r}, claims_dir={str(claims)!r})))")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def claim_files(claims: Path) -> list:
    """The claim files in the directory, sorted."""
    return sorted(p.name for p in claims.glob("*.json"))


def test_a_claim_holds_for_the_life_of_the_process(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    assert cpuplan.host.claim_gpus([A, None, "00000000:3A:00.0"], claims_dir=claims) is None
    assert claim_files(claims) == [f"{A}.json", f"{B}.json"]
    holder = json.loads((claims / f"{A}.json").read_text())
    assert holder["container"] == f"pid-{os.getpid()}" and holder["pid"] == os.getpid()
    # Claiming again from this process keeps them; another live process can't have them.
    assert cpuplan.host.claim_gpus([A], claims_dir=claims) is None
    why = claim_in_child(claims, [B])
    assert why == f"gpu {B} is held by pid-{os.getpid()} (pid {os.getpid()}) in {claims}"


def test_all_or_none(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    assert cpuplan.host.claim_gpus([A], claims_dir=claims) is None
    why = claim_in_child(claims, [B, A])
    assert why is not None and A in why
    assert claim_files(claims) == [f"{A}.json"]  # B was not taken either


def test_a_dead_processes_claims_are_taken_over(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    assert claim_in_child(claims, [A]) is None  # the child exits: its claim is stale
    assert claim_files(claims) == [f"{A}.json"]
    assert cpuplan.host.claim_gpus([A], claims_dir=claims) is None
    assert json.loads((claims / f"{A}.json").read_text())["pid"] == os.getpid()


def in_new_pid_namespace(code: str) -> subprocess.Popen:
    """Python running code as pid 1 of a pid namespace of its own (unshare, as root), its stdout a pipe."""
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_pid_1_of_two_pid_namespaces_are_two_claimers(tmp_path: Path) -> None:
    # A container's server is often pid 1 of its own namespace: the same id "pid-1" in two
    # containers is two processes, and its scope (its pid namespace) tells them apart.
    claims = tmp_path / "claims"
    claim = f"import cpuplan, json, sys; print(json.dumps([__import__('os').getpid(), cpuplan.host.claim_gpus([{A!r}], claims_dir={str(claims)!r})]), flush=True)"
    first = in_new_pid_namespace(claim + "; sys.stdin.read()")
    try:
        assert first.stdout is not None
        assert json.loads(first.stdout.readline()) == [1, None]
        holder = json.loads((claims / f"{A}.json").read_text())
        assert holder["container"] == "pid-1" and holder["scope"].startswith("python:pidns:"), holder
        second = in_new_pid_namespace(claim)
        out, _ = second.communicate(timeout=30)
        pid, why = json.loads(out)
        assert pid == 1 and why is not None and "held by pid-1" in why, out
        assert json.loads((claims / f"{A}.json").read_text()) == holder, "the first one's claim stays"
    finally:
        first.communicate(input="", timeout=30)
    assert first.returncode == 0


def test_the_claims_dir_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cpuplan.host.DEFAULT_CLAIMS_DIR == "/run/cpuplan/claims"
    monkeypatch.setenv(cpuplan.host.CLAIMS_DIR_VAR, str(tmp_path / "env-claims"))
    assert cpuplan.host.claim_gpus([B]) is None
    assert claim_files(tmp_path / "env-claims") == [f"{B}.json"]


def test_nothing_to_claim_and_bad_addresses(tmp_path: Path) -> None:
    claims = tmp_path / "claims"
    assert cpuplan.host.claim_gpus([None, None], claims_dir=claims) is None
    assert not claims.exists()
    with pytest.raises(ValueError, match="not a PCI address"):
        cpuplan.host.claim_gpus(["../../etc/passwd"], claims_dir=claims)
    with pytest.raises(ValueError):
        cpuplan.host.claim_gpus([A], claims_dir=claims, wait=-1)


def test_a_claims_dir_that_cannot_be_made_says_why(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    why = cpuplan.host.claim_gpus([A], claims_dir=blocker / "claims")
    assert why is not None and str(blocker / "claims") in why


def test_the_hooks_claims_command_sees_the_claim(tmp_path: Path, hook_bin: str) -> None:
    claims = tmp_path / "claims"
    assert cpuplan.host.claim_gpus([A], claims_dir=claims) is None
    config = tmp_path / "hook.json"
    config.write_text(json.dumps({"claims_dir": str(claims), "inventory_dir": str(tmp_path / "inventory"), "log": str(tmp_path / "hook.log")}))
    out = run_hook(hook_bin, "--config", str(config), "claims", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [(c["address"], c["holder"]["pid"], c["live"]) for c in listed] == [(A, os.getpid(), True)]
