#!/usr/bin/env bash
# deb.sh [--debug] [OUT_DIR]
#
# Builds the Debian package `cpuplan` (amd64) with cargo-deb and prints its path:
#   1. the static cpuplan-hook and cpuplan-exec (scripts/build-static.sh),
#   2. the shim's C libraries, a normal build (cargo build -p cpuplan-shim-capi),
#   3. all four copied into target/deb-stage/ (the asset paths of [package.metadata.deb] in
#      Cargo.toml, relative to the repository),
#   4. cargo deb --no-build, writing the .deb into OUT_DIR (default: $CARGO_TARGET_DIR/debian).
# Release builds unless --debug (the tests use --debug: the same files, built faster).
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

static_flags=()
lib_flags=()
[ "$profile" = debug ] && static_flags+=(--debug)
[ "$profile" = release ] && lib_flags+=(--release)

mapfile -t bins < <(scripts/build-static.sh "${static_flags[@]}")
"$cargo" build -q -p cpuplan-shim-capi "${lib_flags[@]}"

stage=target/deb-stage
rm -rf "$stage"
mkdir -p "$stage"
cp "${bins[@]}" "$stage/"
cp "$target/$profile/libcpuplan_shim.so" "$target/$profile/libcpuplan_shim.a" "$stage/"
# The debug build (tests) loses its debug info: the same code, a package a tenth the size.
[ "$profile" = debug ] && strip --strip-debug "$stage"/*

mkdir -p "$out"
# The debug build is compressed fast. cargo-deb says the static binaries have no dependencies ("No $auto deps"): true.
deb_flags=(--no-build -p cpuplan-hook --output "$out")
[ "$profile" = debug ] && deb_flags+=(--fast)
"$cargo" deb "${deb_flags[@]}" | tail -n 1
