#!/usr/bin/env bash
# benches/hook-strace.sh HOOK [HOOK2]   (as root, with runc, busybox-static, jq, strace)
#
# What a hook build asks of the kernel at each stage: `strace -c` and `strace` (every call) of
# one createRuntime and one poststop on a prepared container (benches/common.sh: a created runc
# container, its init killed before poststop as runc runs it, so poststop releases the claim;
# topology_root examples/host, GPU 0, a 1-CPU quota, step_thread_core auto), after two warm-up
# rounds (so a host inventory, where the build keeps one, is already written). With two builds
# it prints both, one after the other.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/common.sh"
bench_needs runc jq busybox nsenter strace
bench_init cpuplan-strace
# Each build gets its own inventory directory (a build without one ignores the key).
prepare_bundle
for hook in "$@"; do
  hook=$(readlink -f "$hook")
  echo "=== $hook"
  # createRuntime on a created container; poststop on it once its init is killed (as runc
  # runs poststop), so that it releases the claim the createRuntime took.
  for trace in "strace -c" "strace"; do
    for _ in 1 2; do
      prepare_container
      "$hook" --config "$T/hook.json" hook createRuntime <"$T/state.json"
      stop_container
      "$hook" --config "$T/hook.json" hook poststop <"$T/stopped.json"
      "${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
    done
    prepare_container
    $trace -o "$T/c.txt" "$hook" --config "$T/hook.json" hook createRuntime <"$T/state.json"
    stop_container
    $trace -o "$T/p.txt" "$hook" --config "$T/hook.json" hook poststop <"$T/stopped.json"
    "${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
    for stage in createRuntime poststop; do
      f=$T/c.txt; [ $stage = poststop ] && f=$T/p.txt
      echo "--- $stage: $trace"
      grep -v '^+++\|^---' "$f" | cut -c1-160 | sed -n '1,200p'
    done
  done
done
grep -c "released 1 GPU claim" "$T/hook.log" | sed 's/^/poststops that released a claim: /'
