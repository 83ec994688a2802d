#!/usr/bin/env bash
# deb.sh [--debug] [OUT_DIR]
#
# Builds the Debian package `cpuplan` (amd64) with cargo-deb and prints its path:
#   1. scripts/stage.sh builds the static cpuplan-hook, cpuplan-nri, cpuplan and cpuplan-exec and the shim's C
#      libraries into target/deb-stage/ (the asset paths of [package.metadata.deb] in
#      Cargo.toml, relative to the repository),
#   2. cargo deb --no-build writes the .deb into OUT_DIR (default: $CARGO_TARGET_DIR/debian).
# Release builds unless --debug (the tests use --debug: the same code, built faster).
# Needs cargo-deb (cargo install cargo-deb --version 3.8.0 --locked) and readelf (binutils).
# Honours CARGO_TARGET_DIR and CARGO.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
target=${CARGO_TARGET_DIR:-target}
out=${1:-$target/debian}
"$cargo" deb --version >/dev/null 2>&1 || {
  echo "deb.sh: cargo-deb is not installed: cargo install cargo-deb --version 3.8.0 --locked" >&2
  exit 1
}

stage_flags=()
[ "$profile" = debug ] && stage_flags+=(--debug)
# The asset paths of [package.metadata.deb] (relative to the repository).
scripts/stage.sh "${stage_flags[@]}" target/deb-stage

mkdir -p "$out"
# The debug build is compressed fast. cargo-deb warns that the static binaries have no
# dependencies ("No $auto deps"): true, they have none.
deb_flags=(--no-build -p cpuplan-hook --output "$out")
[ "$profile" = debug ] && deb_flags+=(--fast)
"$cargo" deb "${deb_flags[@]}" | tail -n 1
