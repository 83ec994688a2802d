#!/usr/bin/env bash
# build-static.sh [--debug] [CARGO_BUILD_ARGS...]
#
# Builds the hook (cpuplan-hook) and the in-container launcher (cpuplan-exec) linked statically
# against glibc (crt-static): no dynamic loader runs, so an LD_PRELOAD or LD_LIBRARY_PATH that
# reaches their environment loads nothing. Release profile unless --debug. Prints the two paths.
# Honours CARGO_TARGET_DIR and CARGO (the cargo to run).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
flags=(--target x86_64-unknown-linux-gnu -p cpuplan-hook -p cpuplan-shim --bins)
[ "$profile" = release ] && flags+=(--release)
RUSTFLAGS='-C target-feature=+crt-static' "${CARGO:-cargo}" build "${flags[@]}" "$@"
out=${CARGO_TARGET_DIR:-target}/x86_64-unknown-linux-gnu/$profile
for bin in cpuplan-hook cpuplan-exec; do
  [ -x "$out/$bin" ] || { echo "build-static.sh: $out/$bin was not built" >&2; exit 1; }
  echo "$out/$bin"
done
