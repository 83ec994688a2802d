#!/usr/bin/env bash
# Builds the Python package cpuplan: the abi3 manylinux2014 wheel (glibc 2.17) with maturin and
# zig, its tag confirmed by auditwheel, and the sdist (the crate's version, no maturin warning).
# Builds only; scripts/python-test.sh tests the wheel.
#
#   scripts/python-wheel.sh
#
# Prints the wheel's path as its last line: $CARGO_TARGET_DIR/python/wheels/cpuplan-<version>-
# cp39-abi3-manylinux_2_17_x86_64.whl, installable with `pip install`.
#
# PYTHON         the interpreter for the tools' venv (default: python3)
# CARGO_TARGET_DIR  where cargo and maturin build (default: target/); the wheel is built in the
#                workspace's `wheel` profile.
# PIP_*          pip's own settings (index, cache) apply.
#
# maturin, ziglang (zig as maturin's linker, for glibc 2.17) and auditwheel come from PyPI,
# installed once into $CARGO_TARGET_DIR/python/tools and kept.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/python
python=${PYTHON:-python3}
mkdir -p "$work"
start=$(date +%s)

tools=$work/tools
# shellcheck source=scripts/python-tools.sh
. scripts/python-tools.sh
python_tools "$python" "$tools" >&2

echo "== maturin build --zig --compatibility manylinux2014 (profile wheel)" >&2
rm -rf "$work/wheels"
log=$work/maturin-build.log
if ! PATH=$tools/bin:$PATH CARGO_TARGET_DIR=$target "$tools/bin/maturin" build -m crates/python/Cargo.toml \
    --zig --compatibility manylinux2014 --out "$work/wheels" >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
fi
grep -v "^ *Compiling " "$log" >&2 || true
if maturin_warnings "$log" >/dev/null; then
    echo "maturin warned (above): fix crates/python/pyproject.toml or Cargo.toml" >&2
    exit 1
fi
wheels=("$work"/wheels/cpuplan-*-abi3-*.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "expected one abi3 wheel in $work/wheels, found: ${wheels[*]}" >&2
    exit 1
fi
echo "== auditwheel show ${wheels[0]##*/}" >&2
check_manylinux2014 "$tools" "${wheels[0]}" x86_64 >&2

echo "== the sdist" >&2
check_sdist "$tools" "$work/sdist" >&2
echo "== built in $(($(date +%s) - start)) s" >&2
echo "${wheels[0]}"
