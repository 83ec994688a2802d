#!/usr/bin/env bash
# benches/hook-ab.sh BASE_HOOK NEW_HOOK [RUNS]   (default 100; as root, with runc, busybox-static, jq, gcc)
#
# Two builds of the hook measured against each other in one interleaved run: each runs
# createRuntime (then poststop, untimed: the init still runs, so it keeps the claim) on the same prepared container, a
# created runc container as benches/container-start.sh makes it (benches/common.sh) (topology_root examples/host,
# GPU 0 in linux.devices and NVIDIA_VISIBLE_DEVICES, a 1-CPU quota, step_thread_core auto),
# with two config.json files: the normal one (about 3 KiB) and one padded to just under
# the 16 MiB the hook reads (process.env entries the planner skips). The order rotates every round.
# Then poststop, each build's on a fresh container whose init was killed (as runc runs it),
# releasing the claim that build's createRuntime took.
# It prints, per build and config, the median createRuntime wall time (spawn to exit, from a
# small C posix_spawn + wait4) and the peak RSS (max ru_maxrss), the new/base ratios, and the
# machine's load before and after (other builds share these CPUs: compare ratios, not times).
set -euo pipefail

BASE=$(readlink -f "${1:?usage: benches/hook-ab.sh BASE_HOOK NEW_HOOK [RUNS]}")
NEW=$(readlink -f "${2:?usage: benches/hook-ab.sh BASE_HOOK NEW_HOOK [RUNS]}")
RUNS=${3:-100}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "hook-ab.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/common.sh"
bench_needs runc jq cc busybox nsenter
bench_init cpuplan-ab
# Both builds are copied here first, so that both are files just written: a binary file
# written hours before faults in more text pages than a copy just written (on this VM's
# ext4, 10 per run against 6: 6-7 % of a createRuntime), and a base built long before the new build
# would otherwise carry that difference into the ratio.
cp "$BASE" "$T/hook.base"
cp "$NEW" "$T/hook.new"
BASE=$T/hook.base NEW=$T/hook.new
prepare_bundle
"${RUNC[@]}" create --bundle "$T/p" "$TAG-prepared" </dev/null >/dev/null
mkdir -p "$T/normal" "$T/big" "$R$R/run"
cp "$T/p/config.json" "$T/normal/config.json"
# The 16 MiB one: 1 KiB env entries the planner skips, up to just under the limit.
python3 - "$T/p/config.json" "$T/big/config.json" <<'EOF'
import json, sys
spec = json.load(open(sys.argv[1]))
limit = 16 << 20
base = len(json.dumps(spec))
entry = "PAD_%06d=" + "x" * 1000
n = (limit - base - 4096) // (len(entry % 0) + 4)
spec["process"]["env"] = ["PAD_%06d=" % i + "x" * 1000 for i in range(n)] + spec["process"]["env"]
text = json.dumps(spec)
assert len(text) <= limit, len(text)
open(sys.argv[2], "w").write(text)
EOF
for c in normal big; do
  "${RUNC[@]}" state "$TAG-prepared" \
    | jq -c --arg b "$T/$c" '{ociVersion, id, status, pid, bundle: $b, annotations: (.annotations // {})}' >"$T/state.$c"
done
nsenter -t "$(jq .pid "$T/state.normal")" -m /bin/busybox mount -t tmpfs -o mode=755 tmpfs "$R/run"

build_spawner
# Each build its own inventory directory: two formats would otherwise rewrite each other's file.
for b in base new; do
  jq --arg d "$T/inventory.$b" '. + {inventory_dir: $d}' "$T/hook.json" >"$T/hook.$b.json"
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
run() { # NAME BINARY CONFIG
  "$T/spawn" 1 "$T/state.$3" "$2" --config "$T/hook.$1.json" hook createRuntime >>"$T/t.$1.$3"
  "$T/spawn" 1 "$T/state.$3" "$2" --config "$T/hook.$1.json" hook poststop >/dev/null
}
for c in normal big; do run base "$BASE" $c; run new "$NEW" $c; done # warm-up
rm -f "$T"/t.*
for ((i = 0; i < RUNS; i++)); do
  for c in normal big; do
    if ((i % 2)); then run base "$BASE" $c; run new "$NEW" $c; else run new "$NEW" $c; run base "$BASE" $c; fi
  done
done
# poststop as runc runs it: on a fresh container whose init was killed, releasing the claim
# that build's createRuntime took (benches/common.sh), the order rotating every round.
"${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
post() { # NAME BINARY
  prepare_container
  "$2" --config "$T/hook.$1.json" hook createRuntime <"$T/state.json" 2>/dev/null
  stop_container
  "$T/spawn" 1 "$T/stopped.json" "$2" --config "$T/hook.$1.json" hook poststop >>"$T/p.$1"
  "${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
}
for ((i = 0; i < RUNS; i++)); do
  if ((i % 2)); then post base "$BASE"; post new "$NEW"; else post new "$NEW"; post base "$BASE"; fi
done
released=$(grep -c -- "-prepared: stopped, released 1 GPU claim" "$T/hook.log" || true)
[ "$released" -ge $((2 * RUNS)) ] || { echo "hook-ab.sh: released $released claims of $((2 * RUNS)):" >&2; tail -5 "$T/hook.log" >&2; exit 1; }
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
planned=$(grep -c -- "-prepared: pid .* setting auto" "$T/hook.log" || true)
want=$(( 4 * RUNS + 4 ))
[ "$planned" -ge "$want" ] || { echo "hook-ab.sh: planned $planned times of $want:" >&2; tail -5 "$T/hook.log" >&2; exit 1; }

echo "createRuntime, median of $RUNS interleaved spawns each; peak RSS = max ru_maxrss"
echo "load average before: $load_before   after: $load_after   ($(nproc) CPUs)"
printf '%-8s %-10s %10s %10s %8s\n' config build "time ms" "RSS MiB" "size MB"
for c in normal big; do
  for b in base new; do
    bin=$BASE; [ $b = new ] && bin=$NEW
    t=$(cut -d' ' -f1 "$T/t.$b.$c" | median)
    r=$(cut -d' ' -f2 "$T/t.$b.$c" | sort -n | tail -1)
    printf '%-8s %-10s %10.3f %10.2f %8.2f\n' $c $b "$t" "$(echo "$r / 1024" | bc -l)" "$(echo "$(stat -c %s "$bin") / 1000000" | bc -l)"
    echo "$t $r" >"$T/m.$b.$c"
  done
  read -r tb rb <"$T/m.base.$c"; read -r tn rn <"$T/m.new.$c"
  awk -v c=$c -v tb="$tb" -v tn="$tn" -v rb="$rb" -v rn="$rn" 'BEGIN {
    printf "%-8s new-base: %+.3f ms (x%.3f), %+.2f MiB\n", c, tn - tb, tn / tb, (rn - rb) / 1024 }'
done
pb=$(cut -d' ' -f1 "$T/p.base" | median); pn=$(cut -d' ' -f1 "$T/p.new" | median)
awk -v b="$pb" -v n="$pn" -v runs="$RUNS" 'BEGIN {
  printf "poststop (releasing the claim), median of %d interleaved spawns each: base %.3f ms  new %.3f ms  new-base: %+.3f ms (x%.3f)\n", runs, b, n, n - b, n / b }'
