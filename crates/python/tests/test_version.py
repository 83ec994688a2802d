"""cpuplan.__version__: the package's version, from one source (crates/python/Cargo.toml)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import cpuplan


def crate_version(repo: Path) -> str:
    """The version of crates/python/Cargo.toml's [package] table."""
    text = (repo / "crates/python/Cargo.toml").read_text()
    package = text.split("[package]", 1)[1].split("\n[", 1)[0]
    m = re.search(r'^version = "([^"]+)"$', package, re.M)
    assert m, package
    return m.group(1)


def test_version_is_the_crates_and_the_installed_distributions(repo: Path) -> None:
    version = crate_version(repo)
    assert isinstance(cpuplan.__version__, str)
    assert cpuplan.__version__ == version
    # What pip installed (the wheel's METADATA, which maturin wrote from the same crate).
    assert importlib.metadata.version("cpuplan") == version
    assert cpuplan._cpuplan.__version__ is cpuplan.__version__


def test_pyproject_takes_its_version_from_the_crate(repo: Path) -> None:
    text = (repo / "crates/python/pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dynamic = \["version"\]$', project, re.M), project
    assert not re.search(r"^version\s*=", project, re.M), "a second version in pyproject.toml"
    assert re.search(r'^build-backend = "maturin"$', text, re.M), "maturin is the PEP 517 backend"
