#!/usr/bin/env bash
# Tests a built wheel of the Python package cpuplan: installs WHEEL with pytest into a fresh venv
# and runs crates/python/tests on the installed package (never the source tree).
#
#   scripts/python-test.sh WHEEL [PYTEST ARGS...]
#
# PYTHON         the interpreter for the venv (default: python3)
# CPUPLAN_BIN    the cpuplan binary the CLI comparisons use, and CPUPLAN_HOOK the cpuplan-hook
#                a runc container runs (default: both built here with cargo, debug profile)
# CARGO_TARGET_DIR  the venv and pytest's temporary directories go to $CARGO_TARGET_DIR/python.
#
# The runc test needs root, runc and busybox-static; every hook it runs is given private
# claims, inventory and log paths (nothing under /run/cpuplan or /var/log). Exits with pytest's
# status.
set -euo pipefail
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: scripts/python-test.sh WHEEL [PYTEST ARGS...]" >&2; exit 2; }
wheel=$(realpath "$1")
shift
cd "$(dirname "$0")/.."
repo=$PWD
target=${CARGO_TARGET_DIR:-$repo/target}
work=$target/python
python=${PYTHON:-python3}
mkdir -p "$work"
start=$(date +%s)

echo "== fresh venv with ${wheel##*/} and pytest"
rm -rf "$work/venv"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$wheel" pytest

if [ -z "${CPUPLAN_BIN:-}" ] || [ -z "${CPUPLAN_HOOK:-}" ]; then
    echo "== cargo build --bin cpuplan --bin cpuplan-hook"
    cargo build --bin cpuplan --bin cpuplan-hook --target-dir "$target"
    CPUPLAN_BIN=${CPUPLAN_BIN:-$target/debug/cpuplan}
    CPUPLAN_HOOK=${CPUPLAN_HOOK:-$target/debug/cpuplan-hook}
fi
export CPUPLAN_BIN CPUPLAN_HOOK CPUPLAN_REPO=$repo CPUPLAN_VENV=$work/venv

# Run from outside the source tree, so `import cpuplan` finds the installed wheel only.
cd "$work"
set +e
# tmp_path's directories go under the work dir (made afresh each run), not /tmp/pytest-of-<user>.
rm -rf "$work/pytest-tmp"
"$work/venv/bin/python" -m pytest -p no:cacheprovider --basetemp "$work/pytest-tmp" -W error -rfEs \
    "$repo/crates/python/tests" "$@"
status=$?
echo "== python-test.sh took $(($(date +%s) - start)) s"
exit $status
