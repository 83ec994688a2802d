#!/usr/bin/env bash
# The gain bench (benches/gain/gain.py): numpy and onnxruntime in runc containers under a CPU
# quota, with the pool sized to the host and sized by cpuplan's plan, interleaved. As root,
# from a clean clone: builds the hook and the wheel, makes the bench's venv (numpy,
# onnxruntime, onnx, matplotlib, threadpoolctl from PyPI, and the wheel), then runs.
#
#   benches/gain/run.sh [--quota 0.5] [--host-cpus N] [--seconds 6] [--passes 2]
#                       [--workloads numpy,onnx] [--png PATH] [--json PATH]
#                       [--processes N [--sim-left L]]
#
# --processes N: N workload processes per container started as torchrun starts them, in three
# variants (the launcher's default, container-wide left, per-process shares); the pass the docs
# report: --quota 2 --processes 2, --quota 2 --processes 4, --quota 2 --processes 4 --sim-left 8.
#
# Needs runc and busybox-static (.ci/run installs them), python3 with venv, and PyPI. The venv
# is kept under the target directory and mounted at /venv in the containers, so the checkout
# may be anywhere (benches/gain/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-$PWD/target}
work=$target/gain
python=${PYTHON:-python3}
[ "$(id -u)" -eq 0 ] || { echo "benches/gain/run.sh runs containers: run it as root" >&2; exit 1; }
for tool in runc busybox; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: apt-get install -y runc busybox-static" >&2; exit 1; }
done
mkdir -p "$work"

echo "== cargo build --bin cpuplan-hook"
cargo build -q --bin cpuplan-hook --target-dir "$target"

# shellcheck source=scripts/python-tools.sh
. scripts/python-tools.sh
python_tools "$python" "$target/python/tools"
echo "== the cpuplan wheel"
rm -rf "$work/wheels"
PATH=$target/python/tools/bin:$PATH CARGO_TARGET_DIR=$target "$target/python/tools/bin/maturin" build -q \
    -m crates/python/Cargo.toml --zig --compatibility manylinux2014 --out "$work/wheels"

if ! "$work/venv/bin/python" -c 'import numpy, onnxruntime, onnx, matplotlib, threadpoolctl' >/dev/null 2>&1; then
    echo "== the bench's venv: numpy, onnxruntime, onnx, matplotlib, threadpoolctl"
    rm -rf "$work/venv"
    "$python" -m venv "$work/venv"
    "$work/venv/bin/pip" install -q "numpy>=2,<3" "onnxruntime>=1.17,<2" "onnx>=1.16,<2" "matplotlib>=3.7,<4" "threadpoolctl>=3,<4"
fi
"$work/venv/bin/pip" install -q --force-reinstall --no-deps "$work"/wheels/cpuplan-*.whl
exec "$work/venv/bin/python" benches/gain/gain.py --hook "$target/debug/cpuplan-hook" --venv "$work/venv" "$@"
