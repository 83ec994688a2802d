#!/usr/bin/env bash
# build-static.sh [--debug] [CARGO_BUILD_ARGS...]
#
# Builds the hook (cpuplan-hook), the NRI plugin (cpuplan-nri), the operator's command (cpuplan)
# and the in-container launcher (cpuplan-exec) linked statically
# against musl (x86_64-unknown-linux-musl, whose standard library rustup adds: `rustup target add
# x86_64-unknown-linux-musl`): no dynamic loader runs, so an LD_PRELOAD or LD_LIBRARY_PATH that
# reaches their environment loads nothing. It runs `cargo build-static` (the alias in
# .cargo/config.toml, which a person can run as well), release unless --debug, then checks
# that neither binary asks for a dynamic loader (no ELF PT_INTERP, with readelf) and prints the
# two paths. A RUSTFLAGS in the environment would replace the alias's rustflags: crt-static is
# then added to it. The hook's text is ordered by scripts/text-order.txt (below), which a
# plain `cargo build-static` does not do. The shim's C libraries are a separate, normal build:
# `cargo build -p cpuplan-shim-capi --release`.
# Honours CARGO_TARGET_DIR and CARGO (the cargo to run).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
flags=()
[ "$profile" = release ] && flags+=(--release)
for t in readelf nm; do
  command -v $t >/dev/null || { echo "build-static.sh: $t (binutils) is needed to order and check the result" >&2; exit 1; }
done
if [ -n "${RUSTFLAGS:-}" ]; then
  export RUSTFLAGS="$RUSTFLAGS -C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs"
fi
triple=x86_64-unknown-linux-musl
if command -v rustup >/dev/null && ! rustup target list --installed 2>/dev/null | grep -qx $triple; then
  echo "build-static.sh: no Rust standard library for $triple: rustup target add $triple" >&2
  exit 1
fi
out=${CARGO_TARGET_DIR:-target}/$triple/$profile
# The text order (docs/performance.md): the functions scripts/text-order.txt lists, by the
# names this build gave them, in a symbol-ordering file the hook is linked with (build.rs). It
# is made from the binary itself, so the first build links without one and the hook is linked
# again with it; a later build that names the same functions links once. Only LLD takes the
# file (build.rs links the hook with the toolchain's rust-lld on musl); with another the text
# stays as linked.
order=$out/cpuplan-hook.order
text_order() { # BIN: BIN's functions that scripts/text-order.txt lists, by name and size, in its order
  # A name listed with a size that no function of BIN has (the function changed) still takes
  # its instances where there are at most 3 (a generic function's many are told apart by size).
  paste -d '\t' <(nm --defined-only -p -S -t d "$1" | cut -d' ' -f2-) \
    <(nm --defined-only -p -C "$1" | cut -d' ' -f3-) |
    awk -F'\t' 'NR == FNR { if ($0 ~ /^#/ || NF < 2) next; k = $1 SUBSEP ($2 + 0)
        if (!(k in at)) at[k] = ++n; if (!($1 in first)) first[$1] = n; next }
      { split($1, f, " "); if (f[2] !~ /^[tTwW]$/) next; k = $2 SUBSEP (f[1] + 0)
        if (k in at) { print at[k] "\t" f[3]; hit[$2] = 1 }
        else if ($2 in first) { c = ++count[$2]; cand[$2, c] = f[3] } }
      END { for (nm in count) if (!(nm in hit) && count[nm] <= 3)
              for (i = 1; i <= count[nm]; i++) print first[nm] "\t" cand[nm, i] }' \
      scripts/text-order.txt - | sort -s -n -k1,1 | cut -f2- | awk '!seen[$0]++'
}
use_order() { CPUPLAN_TEXT_ORDER=$(cd "$(dirname "$order")" && pwd)/$(basename "$order"); export CPUPLAN_TEXT_ORDER; }
# One run at a time per target directory (test binaries each run this script): the order file
# and the relink are this script's.
mkdir -p "$out"
exec 9>"$out/.build-static.lock"
flock 9
if [ -s "$order" ]; then use_order; fi
"${CARGO:-cargo}" build-static "${flags[@]}" "$@"
if readelf -p .comment "$out/cpuplan-hook" 2>/dev/null | grep -q 'Linker: LLD'; then
  text_order "$out/cpuplan-hook" >"$order.$$"
  if ! cmp -s "$order.$$" "$order"; then
    mv "$order.$$" "$order"
    if [ -s "$order" ]; then use_order; else unset CPUPLAN_TEXT_ORDER; fi
    "${CARGO:-cargo}" build-static "${flags[@]}" "$@"
  fi
  rm -f "$order.$$"
else
  echo "build-static.sh: the hook was not linked by LLD: its text is left in link order" >&2
fi
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
