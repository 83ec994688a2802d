#!/usr/bin/env bash
# build-static.sh [--debug] [CARGO_BUILD_ARGS...]
#
# Builds the binaries (cpuplan-hook, cpuplan-nri, cpuplan and the in-container launcher
# cpuplan-exec) linked statically against musl (x86_64-unknown-linux-musl, whose standard library
# rustup adds: `rustup target add x86_64-unknown-linux-musl`): no dynamic loader runs, so an
# LD_PRELOAD or LD_LIBRARY_PATH that reaches their environment loads nothing. It runs `cargo
# build-static` (the alias in .cargo/config.toml, which a person can run as well), release
# unless --debug, then checks that no binary asks for a dynamic loader (no ELF PT_INTERP, with
# readelf) and prints the paths. A RUSTFLAGS in the environment would replace the alias's
# rustflags: crt-static is then added to it. The shim's C libraries are a separate, normal
# build: `cargo build -p cpuplan-shim-capi --release`.
# Honours CARGO_TARGET_DIR and CARGO (the cargo to run).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
flags=()
[ "$profile" = release ] && flags+=(--release)
command -v readelf >/dev/null || { echo "build-static.sh: readelf (binutils) is needed to check the result" >&2; exit 1; }
if [ -n "${RUSTFLAGS:-}" ]; then
  export RUSTFLAGS="$RUSTFLAGS -C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs"
fi
triple=x86_64-unknown-linux-musl
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx $triple; then
  echo "build-static.sh: no Rust standard library for $triple: rustup target add $triple" >&2
  exit 1
fi
out=${CARGO_TARGET_DIR:-target}/$triple/$profile
# One run at a time per target directory (test binaries each run this script).
mkdir -p "$out"
exec 9>"$out/.build-static.lock"
flock 9
"${CARGO:-cargo}" build-static "${flags[@]}" "$@"
for bin in cpuplan-hook cpuplan-nri cpuplan cpuplan-exec; do
  [ -x "$out/$bin" ] || { echo "build-static.sh: $out/$bin was not built" >&2; exit 1; }
  if readelf -lW "$out/$bin" | grep -q 'Requesting program interpreter'; then
    echo "build-static.sh: $out/$bin is dynamically linked (it has a PT_INTERP)" >&2
    exit 1
  fi
  if ! readelf -dW "$out/$bin" | grep -q '(RELR)'; then
    echo "build-static.sh: $out/$bin has no packed relocations (DT_RELR): was it linked with -z pack-relative-relocs?" >&2
    exit 1
  fi
  echo "$out/$bin"
done
