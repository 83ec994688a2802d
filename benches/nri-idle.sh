#!/usr/bin/env bash
# benches/nri-idle.sh [SECONDS]   (as root, with containerd 1.7 or later on PATH)
#
# What the NRI daemon costs while nothing starts: a private containerd (root, state and
# sockets in a temp dir, CRI and NRI on, no pod) and `cpuplan-nri` registered with it (the
# static release build, or NRI=path), its rank placement watching the kernel's process events
# as it does on a node. After it has synchronized and settled for 3 s, the daemon's CPU time
# (utime + stime of /proc/PID/stat) and that of its rank watcher thread (`cpuplan-ranks`) over
# SECONDS (default 30), with the processes the host forked meanwhile (/proc/stat `processes`:
# the watcher gets an event for each fork, exec and exit on the host), its VmRSS and the load.
# Bounded: every wait has a limit; both daemons are stopped by their pid and the temp dir removed
# on exit.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-30}
me=$(basename "$0")
[ "$(id -u)" = 0 ] || { echo "$me: run as root" >&2; exit 2; }
command -v containerd >/dev/null || { echo "$me: containerd is missing: apt-get install -y containerd" >&2; exit 2; }
NRI=${NRI:-${CARGO_TARGET_DIR:-$REPO/target}/x86_64-unknown-linux-musl/release/cpuplan-nri}
[ -x "$NRI" ] || { echo "$me: $NRI is missing: scripts/build-static.sh (or NRI=path)" >&2; exit 2; }

# Under /run: the claims directory and every directory above it must be root's alone.
T=$(mktemp -d /run/cpuplan-nri-idle.XXXXXX)
CPID='' PPID_NRI=''
cleanup() {
  [ -n "$PPID_NRI" ] && kill "$PPID_NRI" 2>/dev/null && wait "$PPID_NRI" 2>/dev/null
  [ -n "$CPID" ] && kill "$CPID" 2>/dev/null && wait "$CPID" 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
mkdir -p "$T/run/nri" "$T/claims" "$T/plans" "$T/opt/nri/plugins" "$T/etc/nri/conf.d"
cat >"$T/config.toml" <<EOF
version = 2
root = "$T/root"
state = "$T/state"
[grpc]
  address = "$T/containerd.sock"
[ttrpc]
  address = "$T/containerd.sock.ttrpc"
[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$T/cni/bin"
      conf_dir = "$T/cni/net.d"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "native"
  [plugins."io.containerd.internal.v1.opt"]
    path = "$T/opt"
  [plugins."io.containerd.nri.v1.nri"]
    disable = false
    socket_path = "$T/run/nri/nri.sock"
    plugin_path = "$T/opt/nri/plugins"
    plugin_config_path = "$T/etc/nri/conf.d"
EOF
cat >"$T/hook.json" <<EOF
{"topology_root": "$REPO/examples/host", "step_thread_core": "auto",
 "claims_dir": "$T/claims", "nri_dir": "$T/plans", "log": "$T/nri.log"}
EOF
chmod 0700 "$T/claims"
containerd --config "$T/config.toml" >"$T/containerd.log" 2>&1 &
CPID=$!
for _ in $(seq 200); do [ -S "$T/run/nri/nri.sock" ] && break; sleep 0.1; done
[ -S "$T/run/nri/nri.sock" ] || { echo "$me: containerd did not open NRI's socket:" >&2; tail -n 5 "$T/containerd.log" >&2; exit 1; }
"$NRI" --config "$T/hook.json" --socket "$T/run/nri/nri.sock" --log "$T/nri.log" --state "$T/state.nri" \
  </dev/null >/dev/null 2>"$T/nri.stderr" &
PPID_NRI=$!
for _ in $(seq 200); do grep -q synchronized "$T/nri.log" 2>/dev/null && break; sleep 0.1; done
grep -q synchronized "$T/nri.log" || { echo "$me: the plugin did not synchronize:" >&2; tail -n 5 "$T/nri.log" "$T/nri.stderr" >&2; exit 1; }
sleep 3
grep -q 'watching the kernel' "$T/nri.log" || { echo "$me: the rank watcher is not running:" >&2; grep 'rank placement' "$T/nri.log" >&2; exit 1; }
watcher=$(grep -lx cpuplan-ranks /proc/"$PPID_NRI"/task/*/comm | head -1 | cut -d/ -f5)
ticks() { awk '{sub(/.*\) /, ""); print $12 + $13}' "$1"; }
forks() { awk '$1 == "processes" {print $2}' /proc/stat; }
hz=$(getconf CLK_TCK)
p0=$(ticks /proc/"$PPID_NRI"/stat); w0=$(ticks /proc/"$PPID_NRI"/task/"$watcher"/stat); f0=$(forks); s0=$(date +%s.%N)
sleep "$SECS"
p1=$(ticks /proc/"$PPID_NRI"/stat); w1=$(ticks /proc/"$PPID_NRI"/task/"$watcher"/stat); f1=$(forks); s1=$(date +%s.%N)
awk -v p=$((p1 - p0)) -v w=$((w1 - w0)) -v hz="$hz" -v s0="$s0" -v s1="$s1" -v f=$((f1 - f0)) \
  'BEGIN { s = s1 - s0; printf "idle %.1f s: cpuplan-nri %.2f s of CPU (%.3f %%), its rank watcher %.2f s (%.3f %%); the host forked %d processes (%.0f/s)\n", s, p / hz, 100 * p / hz / s, w / hz, 100 * w / hz / s, f, f / s }'
echo "VmRSS $(awk '/VmRSS/ {print $2, $3}' /proc/"$PPID_NRI"/status), load $(cut -d' ' -f1-3 /proc/loadavg), $NRI"
