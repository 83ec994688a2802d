#!/usr/bin/env bash
# A release of the Python package cpuplan: the abi3 manylinux2014 wheels for x86_64 and aarch64
# (maturin with zig as the linker, glibc 2.17) and the sdist, checked, then uploaded to PyPI
# with twine when asked.
#
#   scripts/publish.sh [--upload] [--repository NAME]
#
# Without --upload it builds and checks only: dist/python/ then holds the three files, each
# wheel's tag confirmed by auditwheel, the sdist carrying the crate's version, and all of
# them passing `twine check`. With --upload, `twine upload` sends them (credentials as twine
# reads them: TWINE_USERNAME=__token__ and TWINE_PASSWORD=<a PyPI API token>, or ~/.pypirc;
# --repository testpypi for a trial run). Releasing is described in docs/python.md.
#
# PYTHON the interpreter for the tools venv (default: python3). The aarch64 wheel needs the
# rust-std of aarch64-unknown-linux-gnu (`rustup target add aarch64-unknown-linux-gnu`).
set -euo pipefail
cd "$(dirname "$0")/.."
upload=false
repository=()
while [ $# -gt 0 ]; do
    case $1 in
    --upload) upload=true ;;
    --repository) repository=(--repository "$2"); shift ;;
    *) echo "usage: scripts/publish.sh [--upload] [--repository NAME]" >&2; exit 2 ;;
    esac
    shift
done
target=${CARGO_TARGET_DIR:-$PWD/target}
tools=$target/python/tools
out=$PWD/dist/python
# shellcheck source=scripts/python-tools.sh
. scripts/python-tools.sh
publish_tools "${PYTHON:-python3}" "$tools"

rm -rf "$out" && mkdir -p "$out"
for triple in x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu; do
    if ! rustc --print target-libdir --target "$triple" >/dev/null 2>&1 ||
        [ ! -d "$(rustc --print target-libdir --target "$triple")" ]; then
        echo "no Rust standard library for $triple: rustup target add $triple" >&2
        exit 1
    fi
    echo "== maturin build --zig --compatibility manylinux2014 --target $triple"
    PATH=$tools/bin:$PATH CARGO_TARGET_DIR=$target "$tools/bin/maturin" build -m crates/python/Cargo.toml \
        --zig --compatibility manylinux2014 --target "$triple" --out "$out"
    wheel=$(echo "$out"/cpuplan-*-abi3-*"${triple%%-*}".whl)
    check_manylinux2014 "$tools" "$wheel" "${triple%%-*}"
done

echo "== the sdist"
check_sdist "$tools" "$target/python/sdist"
cp "$target"/python/sdist/cpuplan-*.tar.gz "$out/"

echo "== twine check"
"$tools/bin/twine" check --strict "$out"/*
ls -l "$out"
if $upload; then
    echo "== twine upload ${repository[*]}"
    "$tools/bin/twine" upload "${repository[@]}" "$out"/*
else
    echo "built and checked; upload with: scripts/publish.sh --upload (twine reads TWINE_USERNAME/TWINE_PASSWORD)"
fi
