#!/usr/bin/env bash
# benches/container-start.sh [RUNS]   (default 50; as root, with runc, busybox-static, jq, python3)
#
# What the hook costs at container start. Real runc starts a busybox-static container whose
# workload is `true`, RUNS times each, interleaved (the order rotates every round):
#   (a) no hook
#   (b) /bin/true registered at createRuntime and poststop   (what any hook costs runc)
#   (c) cpuplan-hook registered at createRuntime and poststop, topology_root = examples/host
#       (224 CPUs, 8 GPUs), the container given GPU 0 (NVIDIA_VISIBLE_DEVICES=0), a 1-CPU
#       quota, step_thread_core auto: it reads the inputs, narrows the cpuset, claims the GPU,
#       plans, writes plan.env/plan.json, and poststop releases the claim.
# All three containers have the same config.json apart from the hooks.
# It prints each one's median wall time of `runc run`, the ratios c/a and c/b, then the hook's
# own cost: the static binary run alone (spawn to exit, from python's posix_spawn + wait4) on a
# prepared state and bundle (a container made by `runc create`, so it has a pid, a cgroup and a
# /run tmpfs), with its peak RSS from wait4's rusage, next to /bin/true measured the same way.
#
# Environment: HOOK=path uses that hook binary instead of building the static release one.
# Everything it starts (containers, cgroups, temp dir) is removed on exit, also on failure.
set -euo pipefail

RUNS=${1:-50}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "container-start.sh: RUNS must be a positive integer, got '$RUNS'" >&2; exit 2; }
REPO=$(cd "$(dirname "$0")/.." && pwd)

[ "$(id -u)" = 0 ] || { echo "container-start.sh: run as root (runc needs it)" >&2; exit 2; }
for p in runc:runc busybox:busybox-static jq:jq python3:python3; do
  command -v "${p%%:*}" >/dev/null || { echo "container-start.sh: ${p%%:*} is missing: apt-get install -y ${p#*:}" >&2; exit 2; }
done
BUSYBOX=$(command -v busybox)
if command -v dpkg >/dev/null && ! dpkg -s busybox-static >/dev/null 2>&1; then
  echo "container-start.sh: busybox must be the static one (it is copied into the rootfs): apt-get install -y busybox-static" >&2; exit 2
fi

if [ -z "${HOOK:-}" ]; then
  echo "== building the static release hook" >&2
  (cd "$REPO" && RUSTFLAGS='-C target-feature=+crt-static' \
     cargo build -q --release --target x86_64-unknown-linux-gnu -p cpuplan-hook)
  HOOK=$REPO/target/x86_64-unknown-linux-gnu/release/cpuplan-hook
fi
HOOK=$(readlink -f "$HOOK")
[ -x "$HOOK" ] || { echo "container-start.sh: hook $HOOK is not executable" >&2; exit 2; }
TRUE_BIN=$(readlink -f "$(command -v true)")

T=$(mktemp -d /tmp/cpuplan-bench.XXXXXX)
TAG=cpuplan-bench-$$
RUNC=(runc --root "$T/state")
cleanup() {
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
cp "$BUSYBOX" "$R/bin/busybox"
for a in sh true cat; do ln -s busybox "$R/bin/$a"; done

cat >"$T/hook.json" <<EOF
{"step_thread_core": "auto", "topology_root": "$REPO/examples/host",
 "claims_dir": "$T/claims", "log": "$T/hook.log", "claim_wait_ms": 2000}
EOF

# One bundle per variant: runc spec, patched identically, then the hooks.
mkbundle() { # NAME HOOKS_JSON
  local B=$T/$1
  mkdir -p "$B"
  (cd "$B" && runc spec)
  jq --arg root "$R" --argjson hooks "$2" '
    .process.terminal = false
    | .process.args = ["/bin/true"]
    | .process.env += ["NVIDIA_VISIBLE_DEVICES=0"]
    | .root = {"path": $root, "readonly": false}
    | .mounts += [{"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid","nodev","mode=755"]}]
    | .linux.resources.cpu = {"quota": 100000, "period": 100000}
    | .hooks = $hooks
  ' "$B/config.json" >"$B/config.json.new"
  mv "$B/config.json.new" "$B/config.json"
}
hooks_for() { # BINARY ARGS...   -> hooks JSON with the binary at createRuntime and poststop
  local bin=$1; shift
  jq -n --arg bin "$bin" --args '
    def h(s): {"path": $bin, "args": ([$bin] + $ARGS.positional + [s]),
               "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "timeout": 30};
    {"createRuntime": [h("createRuntime")], "poststop": [h("poststop")]}' "$@"
}
mkbundle a '{}'
mkbundle b "$(hooks_for "$TRUE_BIN")"
mkbundle c "$(hooks_for "$HOOK" --config "$T/hook.json" hook)"

n=0
run_one() { # VARIANT -> appends the wall time in µs to $T/times.VARIANT
  local v=$1 id t0 t1 rc=0
  n=$((n + 1))
  id=$TAG-$v-$n
  jq --arg cg "/$TAG/$id" '.linux.cgroupsPath = $cg' "$T/$v/config.json" >"$T/$v/config.json.new"
  mv "$T/$v/config.json.new" "$T/$v/config.json"
  t0=$EPOCHREALTIME
  "${RUNC[@]}" run --bundle "$T/$v" "$id" </dev/null >"$T/out" 2>&1 || rc=$?
  t1=$EPOCHREALTIME
  if [ $rc -ne 0 ]; then
    echo "container-start.sh: runc run ($v) failed with $rc:" >&2; cat "$T/out" >&2
    [ -f "$T/hook.log" ] && tail -5 "$T/hook.log" >&2
    exit 1
  fi
  echo $(( (${t1/./} - ${t0/./}) )) >>"$T/times.$v"
}

echo "== warm-up (3 runs each, not counted)" >&2
for _ in 1 2 3; do for v in a b c; do run_one $v; done; done
rm -f "$T"/times.*
# The hook ran for real: it wrote a plan and released its claim at poststop.
grep -q "setting auto" "$T/hook.log" || { echo "container-start.sh: the hook logged no plan:" >&2; cat "$T/hook.log" >&2; exit 1; }
grep -q "released 1 GPU claim" "$T/hook.log" || { echo "container-start.sh: the hook released no claim:" >&2; cat "$T/hook.log" >&2; exit 1; }

echo "== $RUNS interleaved runs of each" >&2
orders=("a b c" "b c a" "c a b")
for ((i = 0; i < RUNS; i++)); do
  for v in ${orders[i % 3]}; do run_one "$v"; done
done

# The hook alone on a prepared state and bundle: a created (not started) container.
mkbundle p '{}'
jq --arg cg "/$TAG/prepared" '.linux.cgroupsPath = $cg' "$T/p/config.json" >"$T/p/config.json.new"
mv "$T/p/config.json.new" "$T/p/config.json"
"${RUNC[@]}" create --bundle "$T/p" "$TAG-prepared" </dev/null >/dev/null
"${RUNC[@]}" state "$TAG-prepared" | jq -c '{ociVersion, id, status, pid, bundle, annotations: (.annotations // {})}' >"$T/state.json"

python3 - "$T" "$RUNS" "$HOOK" "$TRUE_BIN" <<'PY'
import os, statistics, sys, time

T, runs, hook, true_bin = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def times(v):
    with open(f"{T}/times.{v}") as f:
        return [int(l) / 1000.0 for l in f]

med = {v: statistics.median(times(v)) for v in "abc"}

def spawn(argv, stdin_path):
    """Wall ms from posix_spawn to wait4, and the child's peak RSS in KiB."""
    fd = os.open(stdin_path, os.O_RDONLY)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        t0 = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                             file_actions=[(os.POSIX_SPAWN_DUP2, fd, 0),
                                           (os.POSIX_SPAWN_DUP2, null, 1)])
        _, status, ru = os.wait4(pid, 0)
        t1 = time.perf_counter()
    finally:
        os.close(fd)
        os.close(null)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"container-start.sh: {argv} exited with {os.waitstatus_to_exitcode(status)}")
    return (t1 - t0) * 1000.0, ru.ru_maxrss

state = f"{T}/state.json"
cfg = f"{T}/hook.json"
n = max(runs, 50)
create, post, tru, rss = [], [], [], []
for _ in range(n):
    ms, kib = spawn([hook, "--config", cfg, "hook", "createRuntime"], state)
    create.append(ms); rss.append(kib)
    ms, kib = spawn([hook, "--config", cfg, "hook", "poststop"], state)
    post.append(ms); rss.append(kib)
    tru.append(spawn([true_bin], state)[0])
with open(f"{T}/hook.log") as f:
    log = f.read()
prepared = [l for l in log.splitlines() if "-prepared: pid" in l]
if len(prepared) < n or "setting auto" not in prepared[-1]:
    sys.exit("container-start.sh: the hook did not plan the prepared container:\n" + log[-2000:])

c_hook = statistics.median(create)
peak = max(rss) / 1024.0
print(f"container start, median of {runs} interleaved `runc run` (workload `true`):")
print(f"  (a) no hook                      {med['a']:8.2f} ms")
print(f"  (b) /bin/true as both hooks      {med['b']:8.2f} ms")
print(f"  (c) cpuplan-hook as both hooks   {med['c']:8.2f} ms")
print(f"  c/a = {med['c'] / med['a']:.3f}   c/b = {med['c'] / med['b']:.3f}   (target c/b <= 1.05)")
print(f"the hook alone, median of {n} spawns on a created container (spawn to exit):")
print(f"  createRuntime {c_hook:.3f} ms   poststop {statistics.median(post):.3f} ms   "
      f"/bin/true {statistics.median(tru):.3f} ms   (target <= 2 ms)")
print(f"  peak RSS {peak:.2f} MiB (max ru_maxrss over {2 * n} runs; target <= 4 MiB)")
print(f"  log line: {prepared[-1].split(': ', 1)[-1][:160]}")
missed = []
if med['c'] / med['b'] > 1.05: missed.append("c/b")
if c_hook > 2.0: missed.append("hook time")
if peak > 4.0: missed.append("peak RSS")
print("targets: " + ("all met" if not missed else "MISSED: " + ", ".join(missed)))
PY
