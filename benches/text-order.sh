#!/usr/bin/env bash
# benches/text-order.sh HOOK [RUNS]   (as root, with runc, busybox-static, jq, perf, binutils)
#
# Writes scripts/text-order.txt: the functions a static release hook runs at createRuntime and
# poststop, hottest first, as `nm -C` names them (no hashes, so the list survives a version
# change), each with its size (which tells the instances of a generic function apart).
# scripts/build-static.sh links the functions it lists at the start of the hook's text, so that
# a container start takes a few read faults of code instead of one in nearly every fault-around
# window of it (22 read faults of text per createRuntime unordered, 10 ordered).
#
# How: `perf record` of user-space samples over RUNS createRuntime spawns (default 1500) on a
# prepared runc container (benches/common.sh), then RUNS poststop spawns once it is stopped,
# and every page fault of 300 more of each; each sampled address is named by the symbol table
# of HOOK. Rerun it after a change that
# moves the start path's work into other functions (a new dependency, a rewritten reader);
# a stale list only links fewer of the functions together.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
. "$REPO/benches/common.sh"
bench_needs runc jq busybox perf nm
HOOK=$(readlink -f "${1:?usage: text-order.sh HOOK [RUNS]}")
RUNS=${2:-1500}
bench_init cpuplan-order
prepare_bundle
build_spawner
prepare_container
comm=$(basename "$HOOK" | cut -c1-15)
"$HOOK" --config "$T/hook.json" hook createRuntime <"$T/state.json" 2>/dev/null
perf record -q -e cpu-clock:u -F max -o "$T/c.data" -- \
  "$T/spawn" "$RUNS" "$T/state.json" "$HOOK" --config "$T/hook.json" hook createRuntime >/dev/null 2>&1
# Every page fault of a few hundred more: where code faults, the function it was fetched for (a
# function run too briefly to be sampled above still faults its page in once per start).
perf record -q -e page-faults:u -c 1 -o "$T/f.data" -- \
  "$T/spawn" 300 "$T/state.json" "$HOOK" --config "$T/hook.json" hook createRuntime >/dev/null 2>&1
stop_container
perf record -q -e cpu-clock:u -F max -o "$T/p.data" -- \
  "$T/spawn" "$RUNS" "$T/stopped.json" "$HOOK" --config "$T/hook.json" hook poststop >/dev/null 2>&1
perf record -q -e page-faults:u -c 1 -o "$T/g.data" -- \
  "$T/spawn" 300 "$T/stopped.json" "$HOOK" --config "$T/hook.json" hook poststop >/dev/null 2>&1
for d in c p f g; do
  perf script -i "$T/$d.data" --no-demangle -F comm,ip,sym 2>/dev/null |
    awk -v c="$comm" '$1 == c && NF >= 3 { print $3 }'
done | sort | uniq -c | sort -k1,1nr -k2 | awk '{ print $2 }' >"$T/hot.mangled"
# Mangled -> nm -C name and size, by pairing the two listings of the same symbol table. The size
# tells apart the instances of a generic function, which share a name (`RawVec<T,A>::grow_one`).
paste -d '\t' <(nm --defined-only -p -S -t d "$HOOK" | cut -d' ' -f2,4-) \
  <(nm --defined-only -p -C "$HOOK" | cut -d' ' -f3-) >"$T/names"
{
  echo "# The functions a static release cpuplan-hook runs at createRuntime and poststop, hottest"
  echo "# first: each nm -C name and its size in bytes. Written by benches/text-order.sh; read by"
  echo "# scripts/build-static.sh."
  awk -F'\t' 'NR == FNR { split($1, f, " "); size[f[2]] = f[1]; name[f[2]] = $2; next }
    ($1 in name) && !seen[$1]++ { print name[$1] "\t" size[$1] + 0 }' "$T/names" "$T/hot.mangled"
} >"$REPO/scripts/text-order.txt"
echo "text-order.sh: $(grep -vc '^#' "$REPO/scripts/text-order.txt") functions -> scripts/text-order.txt"
