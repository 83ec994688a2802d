#!/usr/bin/env bash
# benches/io-floor.sh [HOOK] [RUNS]   (default: the static release build, 40; as root, with
#                                      runc, busybox-static, jq, gcc; cgroup v1's cpu controller)
#
# How much of the hook's time is its own and how much is what this machine charges for any
# process that makes the same calls. Each round makes a fresh prepared container
# (benches/common.sh: topology_root examples/host, GPU 0, a 1-CPU quota, step_thread_core auto)
# for each of two programs, in an order that alternates every round, and times (spawn to exit,
# the small C posix_spawn + wait4) its createRuntime and, once its init is killed, its poststop:
#   hook      cpuplan-hook itself;
#   io-floor  benches/io-floor.c, a static C program making the hook's own system calls in its
#             order, with its flags, paths and sizes (as benches/hook-strace.sh shows them), and
#             nothing else: no parsing, planning, formatting or allocation. It has its own
#             claims directory and log, so neither program sees the other's claim.
# Each round also times, on the same container: an exec of a static binary that only exits
# (three instructions, no C library: the exec floor), io-floor's own start (`none`),
# `cpuplan-hook --version` (the hook's start without a stage) and /bin/true.
# It prints the medians, then: the I/O cost (io-floor's stage less its `none`), the hook's
# start (--version less the exec floor), and what is left of the hook's stage: its user-space
# work and the page faults that work takes. A machine that is slow at that moment shows in the
# floors of the same run, not just in the hook.
# The syscall counts of one round of each (strace -c), where strace is installed, show that
# io-floor still makes what the hook makes: change io-floor.c when the hook's calls change.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
HOOK=${1:-}
RUNS=${2:-40}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "io-floor.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 2; }
. "$REPO/benches/common.sh"
bench_needs runc:runc busybox:busybox-static jq:jq cc:gcc nsenter:util-linux
[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] || {
  echo "io-floor.sh: io-floor.c reads cgroup v1's cpu controller (/sys/fs/cgroup/cpu), which this host does not mount" >&2
  exit 2
}
bench_hook
bench_init cpuplan-iofloor
# The hook as a file just written, as io-floor is (a file written hours before faults in more
# of its text: docs/performance.md).
cp "$HOOK" "$T/hook"
HOOK=$T/hook
cc -O2 -static -o "$T/io-floor" "$REPO/benches/io-floor.c"
printf '.globl _start\n_start:\n  mov $60, %%eax\n  xor %%edi, %%edi\n  syscall\n' >"$T/exit.S"
cc -nostdlib -static -o "$T/exit" "$T/exit.S"
prepare_bundle
build_spawner
mkdir -m 700 "$T/inv"
jq --arg d "$T/inv/hook" '. + {inventory_dir: $d}' "$T/hook.json" >"$T/hook.inv.json"
mkdir "$T/iof-claims"
mount -t tmpfs -o mode=700 tmpfs "$T/iof-claims"
cleanup_iof() { mountpoint -q "$T/iof-claims" && umount "$T/iof-claims"; cleanup; }
trap cleanup_iof EXIT

export IOF_CONFIG=$T/hook.inv.json IOF_LOG=$T/iof.log IOF_TOPO=$REPO/examples/host \
  IOF_INVENTORY_DIR=$T/inv/hook IOF_BUNDLE_CONFIG=$T/prepared/config.json IOF_ROOTFS=$R \
  IOF_CG=/sys/fs/cgroup/cpu/$TAG/prepared IOF_CLAIMS=$T/iof-claims IOF_GPU=0000:18:00.0

round() { # PROGRAM -> appends to $T/<program>.create and .poststop
  local p=$1
  prepare_container
  export IOF_PID
  IOF_PID=$(jq .pid "$T/state.json")
  if [ "$p" = hook ]; then
    "$T/spawn" 1 "$T/state.json" "$HOOK" --config "$T/hook.inv.json" hook createRuntime >>"$T/hook.create"
  else
    "$T/spawn" 1 "$T/state.json" "$T/io-floor" create >>"$T/iof.create" || { "$T/io-floor" create <"$T/state.json"; exit 1; }
  fi
  if [ -n "${FLOORS:-}" ]; then
    "$T/spawn" 1 "$T/state.json" "$T/exit" >>"$T/exit.t"
    "$T/spawn" 1 "$T/state.json" "$T/io-floor" none >>"$T/iof.none"
    "$T/spawn" 1 "$T/state.json" "$HOOK" --version >>"$T/hook.version"
    "$T/spawn" 1 "$T/state.json" "$TRUE_BIN" >>"$T/true.t"
  fi
  stop_container
  if [ "$p" = hook ]; then
    "$T/spawn" 1 "$T/stopped.json" "$HOOK" --config "$T/hook.inv.json" hook poststop >>"$T/hook.poststop"
  else
    "$T/spawn" 1 "$T/stopped.json" "$T/io-floor" poststop >>"$T/iof.poststop" || { "$T/io-floor" poststop <"$T/stopped.json"; exit 1; }
  fi
  "${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
}

echo "== warm-up: two rounds of each (the hook writes its inventory), not counted" >&2
round hook
export IOF_INVENTORY
IOF_INVENTORY=$(ls "$T"/inv/hook/host-* 2>/dev/null | head -1)
[ -n "$IOF_INVENTORY" ] || { echo "io-floor.sh: the hook wrote no inventory under $T/inv/hook" >&2; exit 1; }
round iof; round hook; round iof
rm -f "$T"/*.create "$T"/*.poststop
grep -q "released 1 GPU claim" "$T/hook.log" || { echo "io-floor.sh: the hook released no claim:" >&2; tail -5 "$T/hook.log" >&2; exit 1; }

if command -v strace >/dev/null; then
  echo "== system calls of one round of each (strace -c): createRuntime, poststop" >&2
  for p in hook iof; do
    prepare_container
    IOF_PID=$(jq .pid "$T/state.json")
    if [ $p = hook ]; then
      c=$(strace -c -o "$T/sc" "$HOOK" --config "$T/hook.inv.json" hook createRuntime <"$T/state.json" 2>/dev/null; tail -1 "$T/sc" | awk '{print $4, (NF >= 6 ? $5 : 0)}')
      stop_container
      s=$(strace -c -o "$T/sc" "$HOOK" --config "$T/hook.inv.json" hook poststop <"$T/stopped.json" 2>/dev/null; tail -1 "$T/sc" | awk '{print $4, (NF >= 6 ? $5 : 0)}')
    else
      c=$(strace -c -o "$T/sc" "$T/io-floor" create <"$T/state.json" 2>/dev/null; tail -1 "$T/sc" | awk '{print $4, (NF >= 6 ? $5 : 0)}')
      stop_container
      s=$(strace -c -o "$T/sc" "$T/io-floor" poststop <"$T/stopped.json" 2>/dev/null; tail -1 "$T/sc" | awk '{print $4, (NF >= 6 ? $5 : 0)}')
    fi
    "${RUNC[@]}" delete -f "$TAG-prepared" >/dev/null
    echo "$p ${c:-?} ${s:-?}" >>"$T/counts"
  done
fi

echo "== $RUNS rounds, each: a fresh container for each program, then the floors" >&2
for ((i = 0; i < RUNS; i++)); do
  if ((i % 2)); then round iof; FLOORS=1 round hook; else round hook; FLOORS=1 round iof; fi
done

m() { cut -d' ' -f1 "$T/$1" | median; }
awk -v hc="$(m hook.create)" -v hp="$(m hook.poststop)" -v ic="$(m iof.create)" -v ip="$(m iof.poststop)" \
    -v ex="$(m exit.t)" -v none="$(m iof.none)" -v ver="$(m hook.version)" -v tr="$(m true.t)" -v runs="$RUNS" 'BEGIN {
  printf "medians of %d rounds, spawn to exit, ms (a fresh container for each stage):\n", runs
  printf "  %-48s %7.3f\n", "exec floor (static, no C library, exits)", ex
  printf "  %-48s %7.3f\n", "io-floor none (its own start)", none
  printf "  %-48s %7.3f\n", "cpuplan-hook --version (the hook'\''s start)", ver
  printf "  %-48s %7.3f\n", "/bin/true", tr
  printf "  %-48s %7.3f   %-20s %7.3f\n", "io-floor create", ic, "io-floor poststop", ip
  printf "  %-48s %7.3f   %-20s %7.3f\n", "cpuplan-hook createRuntime", hc, "poststop", hp
  printf "derived, ms:\n"
  printf "  %-48s %7.3f   %-20s %7.3f\n", "the calls alone (io-floor stage - none)", ic - none, "poststop", ip - none
  printf "  %-48s %7.3f\n", "the hook'\''s start (--version - exec floor)", ver - ex
  printf "  %-48s %7.3f   %-20s %7.3f\n", "left: the hook'\''s own work (stage - calls - --version)", hc - (ic - none) - ver, "poststop", hp - (ip - none) - ver
  printf "  %-48s %7.3f   %-20s %7.3f\n", "createRuntime / /bin/true", hc / tr, "poststop / true", hp / tr
}'
if [ -f "$T/counts" ]; then
  echo "system calls (strace -c of one round: calls, errors), createRuntime then poststop:"
  while read -r p c1 e1 c2 e2; do printf "  %-10s %s (%s failed)   %s (%s failed)\n" "$p" "$c1" "$e1" "$c2" "$e2"; done <"$T/counts"
fi
