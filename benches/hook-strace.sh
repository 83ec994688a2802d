#!/usr/bin/env bash
# benches/hook-strace.sh HOOK [HOOK2]   (as root, with runc, busybox-static, jq, strace)
#
# What a hook build asks of the kernel at each stage: `strace -c` and `strace` (every call) of
# one createRuntime and one poststop on the prepared container benches/hook-ab.sh uses (a created
# runc container; topology_root examples/host, GPU 0, a 1-CPU quota, step_thread_core auto), after
# two warm-up runs (so a host inventory, where the build keeps one, is already written). With
# two builds it prints both, one after the other, on the same container.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "hook-strace.sh: run as root (runc needs it)" >&2; exit 2; }
for p in runc jq busybox nsenter strace; do
  command -v "$p" >/dev/null || { echo "hook-strace.sh: $p is missing" >&2; exit 2; }
done
. "$REPO/benches/common.sh"
bench_init cpuplan-strace
# Each build gets its own inventory directory (a build without one ignores the key).
mkbundle p '{}'
jq --arg cg "/$TAG/prepared" '.linux.cgroupsPath = $cg' "$T/p/config.json" >"$T/p/config.json.new"
mv "$T/p/config.json.new" "$T/p/config.json"
"${RUNC[@]}" create --bundle "$T/p" "$TAG-prepared" </dev/null >/dev/null
mkdir -p "$T/prepared" "$R$R/run"
cp "$T/p/config.json" "$T/prepared/config.json"
"${RUNC[@]}" state "$TAG-prepared" \
  | jq -c --arg b "$T/prepared" '{ociVersion, id, status, pid, bundle: $b, annotations: (.annotations // {})}' >"$T/state.json"
nsenter -t "$(jq .pid "$T/state.json")" -m /bin/busybox mount -t tmpfs -o mode=755 tmpfs "$R/run"
for hook in "$@"; do
  hook=$(readlink -f "$hook")
  echo "=== $hook"
  for stage in createRuntime poststop; do
    for _ in 1 2; do "$hook" --config "$T/hook.json" hook $stage <"$T/state.json"; done
    echo "--- $stage: strace -c"
    strace -c -o "$T/c.txt" "$hook" --config "$T/hook.json" hook $stage <"$T/state.json"
    sed -n '1,60p' "$T/c.txt"
    echo "--- $stage: every call"
    strace -o "$T/f.txt" "$hook" --config "$T/hook.json" hook $stage <"$T/state.json"
    grep -v '^+++\|^---' "$T/f.txt" | cut -c1-160
  done
done
