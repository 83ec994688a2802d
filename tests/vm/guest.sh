#!/bin/bash
# guest.sh: every check of tests/vm_systemd.rs, run once inside the cgroup2-vm guest (a Debian 12
# node on cgroup v2 with systemd as PID 1: tests/vm/cgroup2-vm.sh), from the host's share as cwd.
#
# The share holds the static hook (./cpuplan-hook) and a one-GPU topology (./topo: 2 CPUs, GPU
# 0000:3b:00.0 local to CPU 1, as tests/fixtures/e2e-host). Each container asks for a 0.5-CPU
# quota, cpus 0-1 and /dev/nvidia0 (char 195:0, made here; nothing opens it): the hook narrows it
# to CPU 1. Every container is probed from inside (its CPUs, its cgroup's cpu.max, plan.env's
# CPUPLAN_MASK) at start, after `systemctl daemon-reload`, after `systemctl set-property
# --runtime <scope> CPUQuota=70%` and after the restart of an unrelated unit.
#
# Results go to ./results.jsonl, one JSON object a line: {"check", "ok", "detail"} for a check,
# {"fact", "value"} for a figure (times in ms). The guest is booted from a pristine image every
# time (snapshot=on), so the script starts from the same node on every run.
set -u
S=$PWD
R=$S/results.jsonl
: > "$R"
# On the guest's root filesystem (/run is noexec); the hook copied off the 9p share once.
W=/tmp/cpuplan-vm
mkdir -p $W
cp $S/cpuplan-hook $W/cpuplan-hook
HOOK=$W/cpuplan-hook
cp -r $S/topo $W/topo
# Progress, with the guest's uptime, to stderr (the run's own stderr on the host).
PS4='+ $(cut -d" " -f1 /proc/uptime) '
set -x
ms() { date +%s%3N; }
result() { jq -cn --arg c "$1" --argjson ok "$2" --arg d "$3" '{check: $c, ok: $ok, detail: $d}' >> "$R"; }
check() { # NAME WANT GOT [CONTEXT]: ok when GOT is WANT
  if [ "$3" = "$2" ]; then result "$1" true "$3"; else result "$1" false "want '$2', got '$3' ${4:-}"; fi
}
fact() { jq -cn --arg k "$1" --arg v "$2" '{fact: $k, value: $v}' >> "$R"; }

fact boot_ms "$(($(systemctl show -P ActiveEnterTimestampMonotonic multi-user.target) / 1000))"
fact versions "$(uname -r); $(systemctl --version | head -1); $(runc --version | head -1); $(crun --version | head -1); containerd $(containerd --version | cut -d' ' -f3); $(podman --version)"
t_start=$(ms)

# hook_config NAME: the hook's config for one container: the fake topology, a claims directory
# of its own (every container asks for the same GPU), one debug log (it says what the systemd
# call took).
hook_config() {
  jq -n --arg s "$S" --arg w "$W" --arg n "$1" \
    '{topology_root: "\($w)/topo", claims_dir: "\($w)/claims/\($n)", log: "\($w)/hook.log", log_level: "debug"}' \
    > "$W/hook-$1.json"
}
[ -e /dev/nvidia0 ] || mknod -m 666 /dev/nvidia0 c 195 0

# One busybox rootfs for all (the plan files go to each container's own /run tmpfs).
RF=$W/rootfs
mkdir -p $RF/bin $RF/proc $RF/sys $RF/dev $RF/run $RF/tmp $RF/etc
cp /bin/busybox $RF/bin/
for a in sh cat sed grep echo sleep ls; do ln -sf busybox $RF/bin/$a; done
(cd $W && runc spec && mv config.json base.json)

PROBE='echo "cpus=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) max=$(cat /sys/fs/cgroup/cpu.max) mask=$(sed -n "s/^CPUPLAN_MASK=//p" /run/cpuplan/plan.env)"'
WANT="cpus=1 max=50000 100000 mask='1'"

# bundle NAME CGROUPSPATH [HOOK_ENV...]: a bundle in $W/b-NAME running sleep, the hook at
# createRuntime and poststop
bundle() {
  local name=$1 cgp=$2 b=$W/b-$1
  shift 2
  mkdir -p "$b"
  local env='["PATH=/usr/sbin:/usr/bin:/sbin:/bin"'
  for e in "$@"; do env="$env,\"$e\""; done
  env="$env]"
  hook_config "$name"
  jq --arg rf "$RF" --arg cgp "$cgp" --arg hook "$HOOK" --arg cfg "$W/hook-$name.json" --argjson env "$env" '
    .process.terminal = false | .process.args = ["sleep", "3600"] | .root = {path: $rf, readonly: false}
    | .linux.resources.cpu = {quota: 50000, period: 100000, cpus: "0-1"}
    | .linux.cgroupsPath = $cgp
    | .linux.devices = [{path: "/dev/nvidia0", type: "c", major: 195, minor: 0, fileMode: 438, uid: 0, gid: 0}]
    | .linux.namespaces |= (map(select(.type != "cgroup")) + [{type: "cgroup"}])
    | .mounts += [{destination: "/run", type: "tmpfs", source: "tmpfs", options: ["nosuid", "nodev", "mode=755"]}]
    | .hooks = {createRuntime: [{path: $hook, args: ["cpuplan-hook", "--config", $cfg, "hook", "createRuntime"], env: $env, timeout: 30}],
                poststop: [{path: $hook, args: ["cpuplan-hook", "--config", $cfg, "hook", "poststop"], env: $env, timeout: 30}]}
  ' $W/base.json > "$b/config.json"
}

# Containers: NAME -> how to exec in it, its unit (systemd driver) and its pid's cgroup.
declare -A EXEC UNIT
names=()

# start NAME RUNTIME DRIVER [HOOK_ENV...]
start() {
  local name=$1 rt=$2 drv=$3 cgp flag=
  shift 3
  if [ "$drv" = systemd ]; then cgp="system.slice:cpuplan:$name"; flag=--systemd-cgroup; else cgp="/cpuplan/$name"; fi
  bundle "$name" "$cgp" "$@"
  local t0 t1 out rc
  t0=$(ms)
  # Detached: the container keeps runc's stdout and stderr, so they go to a file, not a pipe.
  $rt $flag run -d -b "$W/b-$name" "$name" </dev/null >"$W/$name.out" 2>&1; rc=$?
  out=$(cat "$W/$name.out")
  t1=$(ms)
  check "$name: starts" 0 "$rc" "$out $(grep "container $name" $W/hook.log | tail -3)"
  fact "$name: start_ms" "$((t1 - t0))"
  EXEC[$name]="$rt exec $name"
  [ "$drv" = systemd ] && UNIT[$name]="cpuplan-$name.scope"
  local pid
  pid=$($rt state "$name" | jq .pid)
  fact "$name: cgroup" "$(cut -d: -f3 /proc/$pid/cgroup 2>&1)"
  names+=("$name")
}

# probe NAME WHEN: the container's view, and the unit's AllowedCPUs as systemd keeps it
probe() {
  local name=$1 when=$2 want=$WANT got
  got=$(${EXEC[$name]} sh -c "$PROBE" 2>&1)
  # runc's container sees its scope's cpu.max, which set-property changed; crun's and podman's
  # their own child's, which systemd leaves alone.
  case $when in set-property | restart-other)
    [ "$name" = runc-systemd ] && want="cpus=1 max=70000 100000 mask='1'" ;;
  esac
  check "$name: $when: cpus, quota and plan.env" "$want" "$got"
  if [ -n "${UNIT[$name]:-}" ]; then
    check "$name: $when: AllowedCPUs" 1 "$(systemctl show -P AllowedCPUs "${UNIT[$name]}")"
  fi
}

start runc-systemd runc systemd
start crun-systemd crun systemd
start runc-cgroupfs runc cgroupfs
start crun-cgroupfs crun cgroupfs
# The systemd driver with the system bus out of reach: the fallback, not a blocked start.
start runc-nobus runc systemd DBUS_SYSTEM_BUS_ADDRESS=unix:path=/tmp/cpuplan-vm/no-bus

# podman with the systemd cgroup manager (crun, /machine.slice/libpod-<id>.scope/container)
mkdir -p $W/hooks.d
hook_config podman-systemd
jq -n --arg hook "$HOOK" --arg cfg "$W/hook-podman-systemd.json" '{version: "1.0.0",
  hook: {path: $hook, args: ["cpuplan-hook", "--config", $cfg, "hook"], env: ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]},
  when: {always: true}, stages: ["createRuntime", "poststop"]}' > $W/hooks.d/cpuplan.json
t0=$(ms)
pod=$(podman --cgroup-manager=systemd --hooks-dir $W/hooks.d run -d --network none --cpu-quota 50000 --cpu-period 100000 \
  --cpuset-cpus 0-1 --device /dev/nvidia0 --tmpfs /run --rootfs $RF sleep 3600 2>&1); rc=$?
t1=$(ms)
check "podman-systemd: starts" 0 "$rc" "$pod $(tail -3 $W/hook.log)"
fact "podman-systemd: start_ms" "$((t1 - t0))"
if [ $rc = 0 ]; then
  EXEC[podman-systemd]="podman exec $pod"
  UNIT[podman-systemd]="libpod-$pod.scope"
  pid=$(podman inspect --format '{{.State.Pid}}' "$pod")
  fact "podman-systemd: cgroup" "$(cut -d: -f3 /proc/$pid/cgroup)"
  names+=(podman-systemd)
fi

# What the systemd call cost, as the hook measured it; and that cgroupfs never calls.
for n in runc-systemd crun-systemd podman-systemd; do
  id=$n; [ $n = podman-systemd ] && id=${pod:-none}
  fact "$n: dbus_ms" "$(sed -n "s/.*container $id: set AllowedCPUs=.* through systemd in \([0-9]*\) ms.*/\1/p" $W/hook.log)"
done
check "cgroupfs: no systemd call" 0 "$(grep -E 'container (runc|crun)-cgroupfs: .*AllowedCPUs' $W/hook.log | wc -l)"
check "runc-nobus: the fallback is logged" 1 "$(grep -c 'container runc-nobus: cpuset 1 written to the cgroup file only' $W/hook.log)"

# The fallback set no AllowedCPUs: the scope keeps the 0-1 runc gave it.
check "runc-nobus: AllowedCPUs untouched" 0-1 "$(systemctl show -P AllowedCPUs cpuplan-runc-nobus.scope)"
UNIT[runc-nobus]=
for n in "${names[@]}"; do probe "$n" start; done

systemctl daemon-reload
for n in "${names[@]}"; do [ "$n" = runc-nobus ] || probe "$n" daemon-reload; done
# Without the property, systemd's re-apply undoes the file's narrowing: what the call prevents.
got=$(${EXEC[runc-nobus]} sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status' 2>&1)
check "runc-nobus: daemon-reload: the file alone is undone" 0-1 "$got"

for n in "${names[@]}"; do
  [ -n "${UNIT[$n]:-}" ] || continue
  out=$(systemctl set-property --runtime "${UNIT[$n]}" CPUQuota=70% 2>&1)
  check "$n: set-property CPUQuota=70%" "70000 100000" "$(cat /sys/fs/cgroup/$(systemctl show -P ControlGroup "${UNIT[$n]}")/cpu.max)" "$out"
done
for n in "${names[@]}"; do [ -n "${UNIT[$n]:-}" ] && probe "$n" set-property; done

# The restart of an unrelated unit of the same slice.
systemd-run --unit cpuplan-other --quiet sleep 600
systemctl restart cpuplan-other
for n in "${names[@]}"; do [ -n "${UNIT[$n]:-}" ] && probe "$n" restart-other; done

# poststop: the claims go.
for n in runc-systemd crun-systemd runc-cgroupfs crun-cgroupfs runc-nobus; do
  rt=${n%%-*}; $rt delete -f "$n" >/dev/null 2>&1
done
[ -n "${pod:-}" ] && podman rm -f -t 0 "$pod" >/dev/null 2>&1
check "poststop: every claim released" "0 of 6" "$(find $W/claims -type f -name '*.json' 2>/dev/null | wc -l) of $(grep -c 'stopped, released 1 GPU claim' $W/hook.log)"

fact checks_ms "$(($(ms) - t_start))"
cp $W/hook.log "$S/hook.log"
echo "guest: $(grep -c '"ok":false' "$R") failed of $(grep -c '"check"' "$R") checks"
