# benches/common.sh: what the benchmarks that run the hook on real runc share (sourced).
#
# bench_needs TOOL[:PACKAGE]...: root and the tools, or one line and status 2.
# bench_hook: $HOOK (or the static release build) checked, and $TRUE_BIN.
# bench_init PREFIX: a temp dir $T (removed on exit, with every container and cgroup made),
# runc's state in it ($RUNC), a busybox rootfs $R shared by every container, a claims tmpfs
# $CLAIMS (under /run) and the hook config $T/hook.json (topology_root examples/host, step_thread_core auto, a log file).
# mkbundle NAME HOOKS_JSON: a bundle $T/NAME, the same config.json for every variant but its
# hooks. build_spawner: $T/spawn N STDIN PATH ARGS... (posix_spawn + wait4, each run's wall ms
# and ru_maxrss). median: of the numbers on stdin.

# bench_needs TOOL[:PACKAGE]...: the calling script stops (status 2, one line naming it) unless
# it runs as root (runc needs it) and every TOOL is on PATH (PACKAGE: what to apt-get install).
bench_needs() {
  local me p
  me=$(basename "$0")
  [ "$(id -u)" = 0 ] || { echo "$me: run as root (runc needs it)" >&2; exit 2; }
  for p in "$@"; do
    command -v "${p%%:*}" >/dev/null && continue
    if [ "$p" = "${p%%:*}" ]; then
      echo "$me: $p is missing" >&2
    else
      echo "$me: ${p%%:*} is missing: apt-get install -y ${p#*:}" >&2
    fi
    exit 2
  done
}

# bench_hook: HOOK (the caller's, or else the static release build scripts/build-static.sh
# makes, as shipped) made absolute and checked; TRUE_BIN, the real path of `true`.
bench_hook() {
  if [ -z "${HOOK:-}" ]; then
    echo "== building the static release hook (scripts/build-static.sh, as shipped)" >&2
    "$REPO/scripts/build-static.sh" -q >/dev/null
    HOOK=${CARGO_TARGET_DIR:-$REPO/target}/x86_64-unknown-linux-musl/release/cpuplan-hook
  fi
  HOOK=$(readlink -f "$HOOK")
  [ -x "$HOOK" ] || { echo "$(basename "$0"): hook $HOOK is not executable" >&2; exit 2; }
  TRUE_BIN=$(readlink -f "$(type -P true)")
}

bench_init() { # PREFIX
T=$(mktemp -d "/tmp/$1.XXXXXX")
TAG=$1-$$
RUNC=(runc --root "$T/state")
cleanup() {
  if [ -n "${CLAIMS:-}" ]; then
    mountpoint -q "$CLAIMS" 2>/dev/null && umount "$CLAIMS"
    rm -rf "${CLAIMS%/claims}"
  fi
  for id in $("${RUNC[@]}" list -q 2>/dev/null); do "${RUNC[@]}" delete -f "$id" >/dev/null 2>&1 || true; done
  for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$h$TAG" ] && find "$h$TAG" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The rootfs, shared by every container (the workload writes nothing; /run is a tmpfs).
R=$T/rootfs
mkdir -p "$R"/{bin,proc,sys,dev,run,tmp,etc}
cp "$(command -v busybox)" "$R/bin/busybox"
for a in sh true cat; do ln -s busybox "$R/bin/$a"; done

# The claims directory on a tmpfs, as the default /run/cpuplan/claims is on a host with
# systemd (this VM's /run is on disk, where each claim's fsync costs milliseconds); under
# /run, not $T: the hook refuses a claims directory with a directory above it that another
# user may write (/tmp's mode 1777), and would plan nothing.
CLAIMS=$(mktemp -d "/run/$1-claims.XXXXXX")/claims
mkdir "$CLAIMS"
mount -t tmpfs -o mode=700 tmpfs "$CLAIMS"
cat >"$T/hook.json" <<EOF
{"step_thread_core": "auto", "topology_root": "$REPO/examples/host",
 "claims_dir": "$CLAIMS", "log": "$T/hook.log", "claim_wait_ms": 2000}
EOF

}

mkbundle() { # NAME HOOKS_JSON
  local B=$T/$1
  mkdir -p "$B"
  (cd "$B" && runc spec)
  jq --arg root "$R" --argjson hooks "$2" '
    .process.terminal = false
    | .process.args = ["/bin/true"]
    | .process.env += ["NVIDIA_VISIBLE_DEVICES=0"]
    | .linux.devices += [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0, "fileMode": 438, "uid": 0, "gid": 0}]
    | .root = {"path": $root, "readonly": false}
    | .mounts += [{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid","nodev","mode=755"]}]
    | .linux.resources.cpu = {"quota": 100000, "period": 100000}
    | .hooks = $hooks
  ' "$B/config.json" >"$B/config.json.new"
  mv "$B/config.json.new" "$B/config.json"
}
# The prepared container the hook runs on alone: a created (not started) container. `runc
# create` has already pivoted into the rootfs, so the prepared bundle (the same config.json,
# in another directory) names a rootfs, $R, that also exists under /proc/<pid>/root after
# the pivot (on the host: $R$R), with a tmpfs on its run/ in the container's mount
# namespace, as runc mounts /run: the hook takes every step it takes at createRuntime.
# prepare_bundle: the bundle $T/p and $T/prepared. prepare_container: creates it,
# -> $T/state.json. stop_container: kills its init and waits for it, -> $T/stopped.json (the
# state runc gives poststop); the caller deletes it (`"${RUNC[@]}" delete -f "$TAG-prepared"`).
prepare_bundle() {
  mkbundle p '{}'
  jq --arg cg "/$TAG/prepared" '.linux.cgroupsPath = $cg' "$T/p/config.json" >"$T/p/config.json.new"
  mv "$T/p/config.json.new" "$T/p/config.json"
  mkdir -p "$T/prepared" "$R$R/run"
  cp "$T/p/config.json" "$T/prepared/config.json"
}
prepare_container() {
  "${RUNC[@]}" create --bundle "$T/p" "$TAG-prepared" </dev/null >/dev/null
  "${RUNC[@]}" state "$TAG-prepared" \
    | jq -c --arg b "$T/prepared" '{ociVersion, id, status, pid, bundle: $b, annotations: (.annotations // {})}' >"$T/state.json"
  nsenter -t "$(jq .pid "$T/state.json")" -m /bin/busybox mount -t tmpfs -o mode=755 tmpfs "$R/run"
}
stop_container() {
  local pid
  pid=$(jq .pid "$T/state.json")
  "${RUNC[@]}" kill "$TAG-prepared" KILL
  while [ -e "/proc/$pid" ] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null; do sleep 0.001; done
  jq -c '.status = "stopped"' "$T/state.json" >"$T/stopped.json"
}

build_spawner() {
# A small spawner: posix_spawn, wait4; prints each run's wall ms and ru_maxrss (KiB). Its own
# RSS is about 1 MiB, and ru_maxrss counts the larger of the spawner's at exec and the child's.
cat >"$T/spawn.c" <<'EOF'
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
extern char **environ;
int main(int argc, char **argv) {
  if (argc < 4) { fprintf(stderr, "usage: spawn N STDIN_FILE PATH ARGS...\n"); return 2; }
  for (int i = 0, n = atoi(argv[1]); i < n; i++) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, argv[2], O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    struct timespec t0, t1;
    struct rusage ru;
    pid_t pid;
    int st;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (posix_spawn(&pid, argv[3], &fa, NULL, argv + 3, environ) != 0) { perror(argv[3]); return 1; }
    if (wait4(pid, &st, 0, &ru) < 0) { perror("wait4"); return 1; }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    posix_spawn_file_actions_destroy(&fa);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "%s: wait status %d\n", argv[3], st); return 1; }
    printf("%.4f %ld\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6, ru.ru_maxrss);
  }
  return 0;
}
EOF
cc -O2 -o "$T/spawn" "$T/spawn.c"
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
