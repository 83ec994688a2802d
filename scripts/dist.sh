#!/usr/bin/env bash
# dist.sh [--debug] [OUT_DIR]
#
# Builds the release tarball cpuplan-VERSION-x86_64-linux.tar.gz into OUT_DIR (default:
# $CARGO_TARGET_DIR/dist) and prints its path. It holds one directory, cpuplan-VERSION-x86_64-linux/:
#   bin/cpuplan-hook, bin/cpuplan-nri, bin/cpuplan, bin/cpuplan-exec   static (no PT_INTERP;
#                                           scripts/build-static.sh)
#   lib/libcpuplan_shim.so, lib/libcpuplan_shim.a, include/cpuplan.h   the shim's C ABI
#   hooks/                                  the registrations and the default hook config
#   docs/install.md
#   SHA256SUMS                              every other file's SHA-256 (`sha256sum -c SHA256SUMS`)
# and OUT_DIR gets the tarball's own checksum, cpuplan-VERSION-x86_64-linux.tar.gz.sha256.
# The archive is reproducible from the same binaries (sorted names, owner 0, fixed mtime).
# Release builds unless --debug (the tests use --debug). Honours CARGO_TARGET_DIR and CARGO.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --debug ]; then profile=debug; shift; fi
target=${CARGO_TARGET_DIR:-target}
out=${1:-$target/dist}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
name=cpuplan-$version-x86_64-linux
work=$target/dist-work
stage_flags=()
[ "$profile" = debug ] && stage_flags+=(--debug)

scripts/stage.sh "${stage_flags[@]}" "$work/stage"
root=$work/$name
rm -rf "$root"
mkdir -p "$root/bin" "$root/lib" "$root/include" "$root/docs"
install -m 755 "$work/stage/cpuplan-hook" "$work/stage/cpuplan-nri" "$work/stage/cpuplan" \
  "$work/stage/cpuplan-exec" "$root/bin/"
install -m 644 "$work/stage/libcpuplan_shim.so" "$work/stage/libcpuplan_shim.a" "$root/lib/"
install -m 644 include/cpuplan.h "$root/include/"
install -m 644 docs/install.md "$root/docs/"
cp -r hooks "$root/hooks"
chmod -R u=rwX,go=rX "$root/hooks"
(cd "$root" && find . -type f ! -name SHA256SUMS | sed 's#^\./##' | LC_ALL=C sort | xargs sha256sum > SHA256SUMS)

mkdir -p "$out"
tarball=$out/$name.tar.gz
mtime=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - "$name" \
  | gzip -n > "$tarball"
(cd "$out" && sha256sum "$name.tar.gz" > "$name.tar.gz.sha256")
echo "$tarball"
