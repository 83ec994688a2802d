#!/usr/bin/env bash
# stage.sh [--debug] DIR
#
# Builds what the Debian package and the release tarball ship, and copies it into DIR:
#   cpuplan-hook, cpuplan-nri, cpuplan, cpuplan-exec   static (scripts/build-static.sh, no PT_INTERP)
#   libcpuplan_shim.so, .a       the shim's C libraries, a normal build (-p cpuplan-shim-capi)
# Release builds unless --debug (the tests' builds: the same code, debug info stripped so the
# archives stay small). Honours CARGO_TARGET_DIR and CARGO.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
dir=${1:?usage: stage.sh [--debug] DIR}
target=${CARGO_TARGET_DIR:-target}

static_flags=()
lib_flags=()
[ "$profile" = debug ] && static_flags+=(--debug)
[ "$profile" = release ] && lib_flags+=(--release)
mapfile -t bins < <(scripts/build-static.sh "${static_flags[@]}")
[ ${#bins[@]} -eq 4 ] || { echo "stage.sh: scripts/build-static.sh failed" >&2; exit 1; }
"$cargo" build -p cpuplan-shim-capi "${lib_flags[@]}"

rm -rf "$dir"
mkdir -p "$dir"
cp "${bins[@]}" "$target/$profile/libcpuplan_shim.so" "$target/$profile/libcpuplan_shim.a" "$dir/"
if [ "$profile" = debug ]; then
  strip --strip-debug "$dir"/*
fi
