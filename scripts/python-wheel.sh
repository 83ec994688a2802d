#!/usr/bin/env bash
# The Python package: build the abi3 manylinux2014 wheel (glibc 2.17) with maturin and zig,
# confirm its tag with auditwheel, check that the sdist stops at once without Rust, install
# the wheel into a fresh venv with pytest, and run crates/python/tests on the installed
# package (never the source tree).
#
#   scripts/python-wheel.sh [PYTEST ARGS...]
#
# PYTHON         the interpreter for the venvs (default: python3)
# CPUPLAN_BIN    the cpuplan binary the CLI comparisons use, and CPUPLAN_HOOK the cpuplan-hook
#                a runc container runs (default: both built here with cargo, debug profile)
# CARGO_TARGET_DIR  where cargo and maturin build (default: target/); the wheel is built in
#                its `wheel` profile, the venvs and the wheel go to $CARGO_TARGET_DIR/python.
# PIP_*          pip's own settings (index, cache) apply.
#
# maturin, ziglang (zig as maturin's linker, for glibc 2.17) and auditwheel come from PyPI,
# installed once into $CARGO_TARGET_DIR/python/tools and kept; the test venv is made anew on
# every run. Exits with pytest's status.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$repo/target}
work=$target/python
python=${PYTHON:-python3}
mkdir -p "$work"
start=$(date +%s)

tools=$work/tools
# shellcheck source=scripts/python-tools.sh
. scripts/python-tools.sh
python_tools "$python" "$tools"

echo "== maturin build --zig --compatibility manylinux2014 (profile wheel)"
rm -rf "$work/wheels"
PATH=$tools/bin:$PATH CARGO_TARGET_DIR=$target "$tools/bin/maturin" build -m crates/python/Cargo.toml \
    --zig --compatibility manylinux2014 --out "$work/wheels"
wheels=("$work"/wheels/cpuplan-*-abi3-*.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
    echo "expected one abi3 wheel in $work/wheels, found: ${wheels[*]}" >&2
    exit 1
fi
built=$(date +%s)
echo "== auditwheel show ${wheels[0]##*/}"
check_manylinux2014 "$tools" "${wheels[0]}" x86_64

echo "== the sdist without Rust: stops at once, saying what it needs"
check_sdist_needs_rust "$tools" "$work/sdist"

echo "== fresh venv with ${wheels[0]##*/} and pytest"
rm -rf "$work/venv"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "${wheels[0]}" pytest

if [ -z "${CPUPLAN_BIN:-}" ] || [ -z "${CPUPLAN_HOOK:-}" ]; then
    echo "== cargo build --bin cpuplan --bin cpuplan-hook"
    cargo build --bin cpuplan --bin cpuplan-hook --target-dir "$target"
    CPUPLAN_BIN=${CPUPLAN_BIN:-$target/debug/cpuplan}
    CPUPLAN_HOOK=${CPUPLAN_HOOK:-$target/debug/cpuplan-hook}
fi
export CPUPLAN_BIN CPUPLAN_HOOK CPUPLAN_REPO=$repo CPUPLAN_VENV=$work/venv
echo "== wheel built in $((built - start)) s; pytest"

# Run from outside the source tree, so `import cpuplan` finds the installed wheel only.
cd "$work"
set +e
# tmp_path's directories go under the work dir (made afresh each run), not /tmp/pytest-of-<user>.
rm -rf "$work/pytest-tmp"
"$work/venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$work/pytest-tmp" -W error -rfEs \
    "$repo/crates/python/tests" "$@"
status=$?
echo "== python-wheel.sh took $(($(date +%s) - start)) s"
exit $status
