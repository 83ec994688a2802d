#!/usr/bin/env bash
# examples/oversubscription/run.sh   (as root, with runc, busybox-static and jq)
#
# Why the plan matters, with figures:
# 1. A fork-join workload in a real runc container with a 1-CPU quota (quota 100000 per
#    period 100000) on this host: the pool sized to the host's CPUs versus sized by the
#    plan.env the cpuplan hook wrote (RAYON_NUM_THREADS = left). The container runs
#    `. /run/cpuplan/plan.env; oversubscription` and prints the median time per step of each.
# 2. The hand-off benchmark (A wakes B, B wakes A) on the host: both threads on one core,
#    on two different cores, and unpinned; the median round trip of each.
# Extra arguments go to the fork-join program (e.g. --rounds 2).
# Everything it starts (the container, its cgroup, the temp dir) is removed on exit.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)

[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (runc needs it)" >&2; exit 2; }
for p in runc:runc busybox:busybox-static jq:jq; do
  command -v "${p%%:*}" >/dev/null || { echo "run.sh: ${p%%:*} is missing: apt-get install -y ${p#*:}" >&2; exit 2; }
done
if command -v dpkg >/dev/null && ! dpkg -s busybox-static >/dev/null 2>&1; then
  echo "run.sh: busybox must be the static one (it is copied into the rootfs): apt-get install -y busybox-static" >&2; exit 2
fi

echo "== building the static release hook and examples" >&2
TARGET=x86_64-unknown-linux-gnu
(cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' cargo build -q --release --target $TARGET \
   -p cpuplan-hook --example oversubscription --example handoff)
OUT=$REPO/target/$TARGET/release
HOOK=$OUT/cpuplan-hook

T=$(mktemp -d /tmp/cpuplan-oversub.XXXXXX)
ID=cpuplan-oversub-$$
cleanup() {
  runc --root "$T/state" delete -f "$ID" >/dev/null 2>&1 || true
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do [ -d "$h$ID" ] && rmdir "$h$ID" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

B=$T/bundle R=$B/rootfs
mkdir -p "$R"/{bin,proc,sys,dev,run,tmp,etc}
cp "$(command -v busybox)" "$R/bin/busybox"
for a in sh cat grep sed; do ln -s busybox "$R/bin/$a"; done
cp "$OUT/examples/oversubscription" "$R/bin/oversubscription"

cat >"$T/hook.json" <<EOF
{"claims_dir": "$T/claims", "log": "$T/hook.log"}
EOF
(cd "$B" && runc spec)
CMD='echo "container: Cpus_allowed_list $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"
set -a; . /run/cpuplan/plan.env || exit 1; set +a
echo "plan.env: CPUPLAN_MASK=$CPUPLAN_MASK CPUPLAN_USABLE=$CPUPLAN_USABLE CPUPLAN_LEFT=$CPUPLAN_LEFT RAYON_NUM_THREADS=$RAYON_NUM_THREADS"
exec /bin/oversubscription "$@"'
extra=$(if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi | jq -R . | jq -s .)
jq --arg hook "$HOOK" --arg cfg "$T/hook.json" --arg cmd "$CMD" --arg id "$ID" --argjson extra "$extra" '
  def h(s): {"path": $hook, "args": [$hook, "--config", $cfg, "hook", s],
             "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": 30};
  .process.terminal = false
  | .process.args = (["/bin/sh", "-c", $cmd, "sh"] + $extra)
  | .root.readonly = false
  | .mounts += [{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid","nodev","mode=755"]}]
  | .linux.cgroupsPath = ("/" + $id)
  | .linux.resources.cpu = {"quota": 100000, "period": 100000}
  | .hooks = {"createRuntime": [h("createRuntime")], "poststop": [h("poststop")]}
' "$B/config.json" >"$B/config.json.new"
mv "$B/config.json.new" "$B/config.json"

echo "== 1. fork-join in a runc container with a 1-CPU quota on this $(nproc)-CPU host"
rc=0
runc --root "$T/state" run --bundle "$B" "$ID" </dev/null || rc=$?
if [ $rc -ne 0 ]; then
  echo "run.sh: the container failed ($rc); hook log:" >&2; cat "$T/hook.log" >&2 2>/dev/null || true
  exit 1
fi

echo "== 2. hand-off on the host"
"$OUT/examples/handoff" --round-trips 10000
