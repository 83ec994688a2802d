"""The PEP 517 backend of cpuplan's source builds: maturin's, after checking for a Rust toolchain.

Built from source (the sdist, or ``pip install crates/python``), cpuplan compiles its Rust
extension and needs cargo and rustc 1.80 or later on PATH. maturin's own backend downloads a
Rust toolchain (about 1 GB) into a temporary directory when cargo is missing; this one stops
at once instead, saying what is needed, unless CPUPLAN_ALLOW_RUST_DOWNLOAD=1 asks for
maturin's download. The wheels on PyPI (abi3, manylinux2014: x86_64, aarch64) need no Rust.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import maturin

#: The oldest rustc that builds cpuplan (the workspace's rust-version).
MIN_RUST = (1, 80)

NEEDS = (
    "cpuplan: building from source needs a Rust toolchain: cargo and rustc {need} or later on PATH ({why}).\n"
    "  Install one (https://rustup.rs, or your distribution's cargo and rustc), or install a\n"
    "  prebuilt wheel instead (pip install --only-binary cpuplan cpuplan; manylinux2014 x86_64\n"
    "  and aarch64). CPUPLAN_ALLOW_RUST_DOWNLOAD=1 lets maturin download a temporary toolchain\n"
    "  (about 1 GB) instead."
)


def _check_rust() -> None:
    """Stop with NEEDS unless cargo and a new enough rustc are on PATH (or the download is allowed)."""
    if os.environ.get("CPUPLAN_ALLOW_RUST_DOWNLOAD") == "1":
        return
    os.environ["MATURIN_NO_INSTALL_RUST"] = "1"
    need = ".".join(map(str, MIN_RUST))
    why = None
    if shutil.which("cargo") is None:
        why = "no cargo"
    elif shutil.which("rustc") is None:
        why = "no rustc"
    else:
        out = subprocess.run(["rustc", "--version"], capture_output=True, text=True)
        m = re.match(r"rustc (\d+)\.(\d+)", out.stdout)
        if m is None:
            why = f"rustc --version said {out.stdout.strip() or out.stderr.strip()!r}"
        elif (int(m.group(1)), int(m.group(2))) < MIN_RUST:
            why = f"rustc is {m.group(1)}.{m.group(2)}"
    if why is not None:
        print(NEEDS.format(need=need, why=why), file=sys.stderr)
        raise SystemExit(1)


def get_requires_for_build_wheel(config_settings=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found."""
    _check_rust()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_sdist(config_settings=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found (making the sdist reads the Cargo workspace)."""
    _check_rust()
    return maturin.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found."""
    _check_rust()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found."""
    _check_rust()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found."""
    _check_rust()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory, config_settings=None):  # type: ignore[no-untyped-def]
    """maturin's, once a Rust toolchain is found."""
    _check_rust()
    return maturin.build_sdist(sdist_directory, config_settings)
