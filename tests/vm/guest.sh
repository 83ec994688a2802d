#!/bin/bash
# guest.sh: every check of tests/vm_systemd.rs, run once inside the cgroup2-vm guest (a Debian 12
# node on cgroup v2 with systemd as PID 1: tests/vm/cgroup2-vm.sh), from the host's share as cwd.
#
# The share holds the static binaries (./cpuplan-hook, ./cpuplan-nri, ./cpuplan), a one-GPU topology (./topo: 2 CPUs, GPU
# 0000:3b:00.0 local to CPU 1, as tests/fixtures/e2e-host), the CRI client (./vm-cri, the
# `vm-cri` example: the guest has no crictl) and two OCI image-layout tars built from busybox
# (./pause.tar, the sandbox image the recipe's containerd config names, and ./busybox.tar). Each
# container asks for /dev/nvidia0 (char 195:0, made here; nothing opens it), cpus 0-1 (the CRI
# ones no cpuset: the node's 0-1) and a quota of 0.5 CPU (its own, or its pod slice's): the
# hook, precreate or the NRI plugin narrows it to CPU 1. Every container
# is probed from inside (its CPUs, its cgroup's cpu.max, plan.env's CPUPLAN_MASK) at start,
# after `systemctl daemon-reload`, after `systemctl set-property --runtime <scope>
# CPUQuota=70%` and after the restart of an unrelated unit.
#
# Runtimes: runc and crun (systemd and cgroupfs drivers; runc's cgroupfs driver also given a
# systemd-form path from inside a service, whose unit must be left alone), podman --cgroup-manager=systemd with
# the createRuntime hook and with `install --with-precreate`, and containerd 1.7 driven through
# CRI as kubelet drives it (a host-network pod whose cgroup parent is a kubelet-style pod slice
# with its own CPUQuota): first with the NRI plugin (then kubelet's CPU-manager update and an
# in-place resize through UpdateContainerResources), then the same plugin under the Debian
# package's unit (./cpuplan-nri.service, started by systemd), then, the plugin gone, with the hook
# registered by `install --containerd` (and the same CPU-manager update, which the hook does
# not see).
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
# The claims directories: the hook takes one only below directories that are root's and
# writable by root alone, which no directory under /tmp is.
CL=/run/cpuplan-vm/claims
mkdir -p $W $CL
# The hook (the runtime's stages), the NRI plugin and the operator's command (install, claims),
# side by side: install copies the cpuplan-hook beside cpuplan.
cp $S/cpuplan-hook $S/cpuplan-nri $S/cpuplan $W/
HOOK=$W/cpuplan-hook
NRI=$W/cpuplan-nri
CPUPLAN=$W/cpuplan
cp -r $S/topo $W/topo
cp $S/vm-cri $W/vm-cri
CRI=$W/vm-cri
# Progress, with the guest's uptime, to stderr (the run's own stderr on the host).
# (No command substitution in PS4 or in the result lines: under TCG every fork costs 0.1-1 s.)
PS4='+ ${EPOCHREALTIME} '
set -x
ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
# json VAR STRING: VAR = STRING as a JSON string (control characters but newline and tab dropped)
json() {
  local s=${2//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//[$'\001'-$'\010'$'\013'-$'\037'$'\177']/}
  printf -v "$1" '"%s"' "$s"
}
result() { local c d; json c "$1"; json d "$3"; printf '{"check":%s,"ok":%s,"detail":%s}\n' "$c" "$2" "$d" >> "$R"; }
check() { # NAME WANT GOT [CONTEXT]: ok when GOT is WANT
  if [ "$3" = "$2" ]; then result "$1" true "$3"; else result "$1" false "want '$2', got '$3' ${4:-}"; fi
}
fact() { local k v; json k "$1"; json v "$2"; printf '{"fact":%s,"value":%s}\n' "$k" "$v" >> "$R"; }

fact boot_ms "$(($(systemctl show -P ActiveEnterTimestampMonotonic multi-user.target) / 1000))"
fact versions "$(uname -r); $(systemctl --version | head -1); $(runc --version | head -1); $(crun --version | head -1); containerd $(containerd --version | cut -d' ' -f3); $(podman --version)"
t_start=$(ms)

# hook_config NAME: the hook's config for one container: the fake topology, a claims directory
# of its own (every container asks for the same GPU), one debug log (it says what the systemd
# call took).
hook_config() {
  jq -n --arg s "$S" --arg w "$W" --arg cl "$CL" --arg n "$1" \
    '{topology_root: "\($w)/topo", claims_dir: "\($cl)/\($n)", log: "\($w)/hook.log", log_level: "debug"}' \
    > "$W/hook-$1.json"
}
[ -e /dev/nvidia0 ] || mknod -m 666 /dev/nvidia0 c 195 0

# One busybox rootfs for all (the plan files go to each container's own /run tmpfs).
RF=$W/rootfs
mkdir -p $RF/bin $RF/proc $RF/sys $RF/dev $RF/run $RF/tmp $RF/etc
cp /bin/busybox $RF/bin/
for a in sh cat sed grep echo sleep ls env tr; do ln -sf busybox $RF/bin/$a; done
(cd $W && runc spec && mv config.json base.json)

PROBE='echo "cpus=$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status) max=$(cat /sys/fs/cgroup/cpu.max) mask=$(sed -n "s/^CPUPLAN_MASK=//p" /run/cpuplan/plan.env)"'
WANT="cpus=1 max=50000 100000 mask='1'"
# A CRI container's probe, after `d=DIR` (its plan directory: /dev/cpuplan for NRI,
# /run/cpuplan for the hook): also the plan's generation and the quota it was made with
# (plan.json's inputs.quota, the tightest of the container's and its pod's).
CRI_PROBE=$(cat <<'EOF'
echo "cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status) max=$(cat /sys/fs/cgroup/cpu.max)" \
  "mask=$(sed -n 's/^CPUPLAN_MASK=//p' $d/plan.env) gen=$(sed -n 's/^CPUPLAN_GENERATION=//p' $d/plan.env)" \
  "quota=$(awk '/"inputs"/ {i = 1} i && /"quota":/ {gsub(/[ ",]/, ""); sub(/quota:/, ""); print; exit}' $d/plan.json)"
EOF
)

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

# probe NAME WHEN: the container's view, and the unit's AllowedCPUs as systemd keeps it.
# WANT_OF[NAME] overrides $WANT, ALLOWED_OF[NAME] the AllowedCPUs 1; SCOPE_MAX[NAME] is what it sees after set-property when its
# processes are in the scope itself (runc's layout: the scope's cpu.max is its own).
declare -A WANT_OF PROBE_OF SCOPE_MAX ALLOWED_OF
probe() {
  local name=$1 when=$2 want=${WANT_OF[$1]:-$WANT} got
  got=$(${EXEC[$name]} sh -c "${PROBE_OF[$name]:-$PROBE}" probe 2>&1)
  # runc's container sees its scope's cpu.max, which set-property changed; crun's and podman's
  # their own child's, which systemd leaves alone.
  case $when in set-property | restart-other)
    [ -n "${SCOPE_MAX[$name]:-}" ] && want=${SCOPE_MAX[$name]} ;;
  esac
  check "$name: $when: cpus, quota and plan.env" "$want" "$got"
  if [ -n "${UNIT[$name]:-}" ]; then
    check "$name: $when: AllowedCPUs" "${ALLOWED_OF[$name]-1}" "$(systemctl show -P AllowedCPUs "${UNIT[$name]}")"
  fi
}
SCOPE_MAX[runc-systemd]="cpus=1 max=70000 100000 mask='1'"
# probe_all WHEN NAME...: probe each NAME at once (the containers answer independently, and
# under TCG an exec costs 1-5 s); waits for these probes only (the NRI plugin runs in the
# background too).
probe_all() {
  local when=$1 n pids=()
  shift
  for n in "$@"; do probe "$n" "$when" & pids+=($!); done
  wait "${pids[@]}"
}

start runc-systemd runc systemd
start crun-systemd crun systemd
start runc-cgroupfs runc cgroupfs
start crun-cgroupfs crun cgroupfs
# The systemd driver with the system bus out of reach: the fallback, not a blocked start.
start runc-nobus runc systemd DBUS_SYSTEM_BUS_ADDRESS=unix:path=/tmp/cpuplan-vm/no-bus

# in_service: runc's cgroupfs driver given the systemd form from inside a service, as containerd
# with `SystemdCgroup = false` passes kubelet's slice:prefix:name to it. runc takes the string as
# a path below its own cgroup's parent: the service's process first moves into a child of the
# service (as a shim below containerd.service), so the container's cgroup is
# cpuplan-svc.service/system.slice:cpuplan:svc-ctr. The spec names cpuplan-svc-ctr.scope, which
# is not where the container is: the hook narrows the container's own cgroup file and calls no
# one, and the service's AllowedCPUs and its other process's CPUs stay as they were. Its own log
# and claims directory, so the other containers' counts stay theirs.
in_service() {
  local n=svc-ctr u=cpuplan-svc.service before rc pid main
  bundle "$n" "system.slice:cpuplan:$n"
  jq --arg log "$W/hook-svc.log" '.log = $log' "$W/hook-$n.json" > "$W/hook-$n.json.new" &&
    mv "$W/hook-$n.json.new" "$W/hook-$n.json"
  printf '%s\n' 'cg=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)' \
    'mkdir -p $cg/runner && echo $$ > $cg/runner/cgroup.procs' \
    "runc run -d -b $W/b-$n $n </dev/null >$W/$n.out 2>&1; echo \$? > $W/svc.rc" \
    'exec sleep 3600' > $W/svc.sh
  systemd-run --unit $u -p Delegate=yes --quiet bash $W/svc.sh
  before=$(systemctl show -P AllowedCPUs $u)
  for _ in $(seq 1 1200); do [ -s $W/svc.rc ] && break; sleep 0.1; done
  rc=$(cat $W/svc.rc 2>&1)
  check "$n: starts" 0 "$rc" "$(cat $W/$n.out) $(tail -3 $W/hook-svc.log 2>&1)"
  if [ "$rc" = 0 ]; then
    pid=$(runc state $n | jq .pid)
    check "$n: its cgroup is below the service" "/system.slice/$u/system.slice:cpuplan:$n" \
      "$(cut -d: -f3- /proc/$pid/cgroup)"
    check "$n: start: cpus, quota and plan.env" "$WANT" "$(runc exec $n sh -c "$PROBE" 2>&1)"
    check "$n: the refusal is logged" 1 \
      "$(grep -c "container $n: AllowedCPUs not set on cpuplan-$n.scope" $W/hook-svc.log)" \
      "$(cat $W/hook-svc.log)"
    check "$n: the service's AllowedCPUs unchanged" "'$before'" "'$(systemctl show -P AllowedCPUs $u)'"
    main=$(systemctl show -P MainPID $u)
    check "$n: the service's other process keeps its CPUs" 0-1 \
      "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/$main/status 2>&1)"
    runc delete -f $n >/dev/null 2>&1
  fi
  systemctl stop $u
  check "$n: poststop released its claim" "0 1" \
    "$(find $CL/$n -type f -name '*.json' 2>/dev/null | wc -l) $(grep -c 'stopped, released 1 GPU claim' $W/hook-svc.log)"
}
in_service

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

# podman registered as docs/engines.md says, `install --with-precreate`: precreate puts the
# plan's variables into the spec's environment and narrows its cpus before podman makes the
# scope (so systemd holds the narrowed CPUs from the start); the createRuntime hook writes
# plan.env into crun's `container` child and takes the claim.
hook_config podman-pre
out=$("$CPUPLAN" --config "$W/hook-podman-pre.json" install --with-precreate --hooks-dir $W/hooks-pre.d --prefix $W/prefix 2>&1); rc=$?
check "podman-pre: install --with-precreate" "0: cpuplan-precreate.json cpuplan.json" "$rc: $(ls $W/hooks-pre.d 2>&1 | sort | xargs)" "$out"
t0=$(ms)
pre=$(podman --cgroup-manager=systemd --hooks-dir $W/hooks-pre.d run -d --network none --cpu-quota 50000 --cpu-period 100000 \
  --cpuset-cpus 0-1 --device /dev/nvidia0 --tmpfs /run --rootfs $RF sleep 3600 2>&1); rc=$?
t1=$(ms)
check "podman-pre: starts" 0 "$rc" "$pre $(tail -3 $W/hook.log)"
fact "podman-pre: start_ms" "$((t1 - t0))"
if [ $rc = 0 ]; then
  EXEC[podman-pre]="podman exec $pre"
  UNIT[podman-pre]="libpod-$pre.scope"
  pid=$(podman inspect --format '{{.State.Pid}}' "$pre")
  fact "podman-pre: cgroup" "$(cut -d: -f3 /proc/$pid/cgroup)"
  names+=(podman-pre)
  # crun made the container's cgroup with precreate's narrowed cpus, so the createRuntime hook
  # has nothing to narrow and calls no one: the scope has no AllowedCPUs, and systemd, which
  # then manages no cpuset for it, never writes one over crun's.
  ALLOWED_OF[podman-pre]=
  # precreate's edit, in the spec podman gave crun: the narrowed cpus and the plan's annotation
  spec=$(podman inspect --format '{{.OCIConfigPath}}' "$pre")
  check "podman-pre: precreate narrowed the spec's cpus" "1 true" \
    "$(jq -r '"\(.linux.resources.cpu.cpus) \(.annotations | has("cpuplan.plan"))"' "$spec" 2>&1)"
  # its variables in the workload's environment (its init's: `podman exec` gets podman's own
  # copy of the config, which precreate did not edit), the same as plan.env's (which precreate
  # cannot write: the createRuntime hook does)
  got=$(podman exec "$pre" sh -c 'e() { tr "\0" "\n" < /proc/1/environ | sed -n "s/^$1=//p"; }
    echo "OMP_NUM_THREADS=$(e OMP_NUM_THREADS) GOMAXPROCS=$(e GOMAXPROCS)"
    env -i sh -c ". /run/cpuplan/plan.env && echo OMP_NUM_THREADS=\$OMP_NUM_THREADS GOMAXPROCS=\$GOMAXPROCS"' 2>&1)
  planned=$(echo "$got" | sed -n 2p)
  case $planned in OMP_NUM_THREADS=[0-9]*\ GOMAXPROCS=[0-9]*) ;; *) planned="plan.env's variables ($got)";; esac
  check "podman-pre: env from precreate is plan.env's" "$planned" "$(echo "$got" | sed -n 1p)"
fi

# containerd 1.7 through CRI: the guest's own containerd (SystemdCgroup = true, NRI on), its
# sandbox image the one the recipe's config names, both images imported from files.
for t in pause busybox; do
  out=$(ctr -n k8s.io images import $S/$t.tar 2>&1); rc=$?
  check "containerd: ctr images import $t.tar" 0 "$rc" "$out"
done
fact "containerd: CRI" "$($CRI version 2>&1)"
declare -A POD CID

# cri_start NAME UID: a pod as kubelet runs it (host network; cgroup parent the pod's slice
# kubepods-burstable-pod<UID>.slice, given CPUQuota=50% as kubelet gives a pod its limit) with
# one container asking for 1 CPU and the GPU, no cpuset (kubelet's CPU manager sets the shared
# pool at its first reconcile, below): the pod's 0.5 CPU is the tighter quota.
cri_start() {
  local name=$1 uid=$2 slice=kubepods-burstable-pod$2.slice t0 t1 out rc
  t0=$(ms)
  POD[$name]=$($CRI run-pod --name "$name" --uid "$uid" --cgroup-parent $slice 2>&1); rc=$?
  check "$name: RunPodSandbox" 0 "$rc" "${POD[$name]}"
  out=$(systemctl set-property --runtime $slice CPUQuota=50% 2>&1)
  check "$name: pod slice CPUQuota=50%" "50000 100000" \
    "$(cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/$slice/cpu.max 2>&1)" "$out"
  t1=$(ms)
  CID[$name]=$($CRI create --pod "${POD[$name]}" --name "$name" --uid "$uid" --cgroup-parent $slice \
    --image localhost/cpuplan-busybox:1 --quota 100000 --period 100000 --device /dev/nvidia0 \
    -- sleep 3600 2>&1) && out=$($CRI start "${CID[$name]}" 2>&1); rc=$?
  check "$name: starts" 0 "$rc" "${CID[$name]} $out $(journalctl -u containerd --no-pager -n 5 2>&1)"
  fact "$name: run_pod_ms" "$((t1 - t0))"
  fact "$name: start_ms" "$(($(ms) - t1))"
  EXEC[$name]="$CRI exec ${CID[$name]} --"
  UNIT[$name]="cri-containerd-${CID[$name]}.scope"
  fact "$name: cgroup" "$(systemctl show -P ControlGroup "${UNIT[$name]}")"
  WANT_OF[$name]="cpus=1 max=100000 100000 mask='1' gen='1' quota=0.5"
  SCOPE_MAX[$name]="cpus=1 max=70000 100000 mask='1' gen='1' quota=0.5"
}

# (a) The NRI plugin, an external plugin on containerd's NRI socket. Its command line, here only.
nri_plugin() { exec "$NRI" --config "$W/nri.json"; }
jq -n --arg w "$W" --arg cl "$CL" '{topology_root: "\($w)/topo", claims_dir: "\($cl)/nri", nri_dir: "\($w)/nri",
  log: "\($w)/nri.log", log_level: "debug"}' > $W/nri.json
nri_plugin > $W/nri.out 2>&1 &
NRI_PID=$!
for _ in $(seq 1 600); do grep -qs 'nri: synchronized with' $W/nri.log && break; sleep 0.1; done
check "nri: the plugin synchronized with containerd" 1 "$(grep -c 'nri: synchronized with' $W/nri.log 2>&1)" \
  "$(tail -5 $W/nri.out $W/nri.log 2>&1)"
cri_start nri-cri 3f2a9c1e5b7d4a60b8e2c4d6f1a3b5c7
PROBE_OF[nri-cri]="d=/dev/cpuplan
$CRI_PROBE"
names+=(nri-cri)
check "nri-cri: CPUPLAN_PLAN" /dev/cpuplan/plan.json "$(${EXEC[nri-cri]} sh -c 'echo $CPUPLAN_PLAN' 2>&1)"

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
with_unit=() but_nobus=()
for n in "${names[@]}"; do
  [ -n "${UNIT[$n]:-}" ] && with_unit+=("$n")
  [ "$n" = runc-nobus ] || but_nobus+=("$n")
done
probe_all start "${names[@]}"

systemctl daemon-reload
probe_all daemon-reload "${but_nobus[@]}"
# Without the property, systemd's re-apply undoes the file's narrowing: what the call prevents.
got=$(${EXEC[runc-nobus]} sh -c 'sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status' 2>&1)
check "runc-nobus: daemon-reload: the file alone is undone" 0-1 "$got"

for n in "${names[@]}"; do
  [ -n "${UNIT[$n]:-}" ] || continue
  out=$(systemctl set-property --runtime "${UNIT[$n]}" CPUQuota=70% 2>&1)
  check "$n: set-property CPUQuota=70%" "70000 100000" "$(cat /sys/fs/cgroup/$(systemctl show -P ControlGroup "${UNIT[$n]}")/cpu.max)" "$out"
done
probe_all set-property "${with_unit[@]}"

# The restart of an unrelated unit of the same slice.
systemd-run --unit cpuplan-other --quiet sleep 600
systemctl restart cpuplan-other
probe_all restart-other "${with_unit[@]}"

# cri_update NAME WHEN WANT ALLOWED CRI-UPDATE-ARGS...: UpdateContainerResources as kubelet sends
# it, then the container's view and its scope's AllowedCPUs.
cri_update() {
  local name=$1 when=$2 want=$3 allowed=$4 out
  shift 4
  out=$($CRI update "${CID[$name]}" "$@" 2>&1)
  check "$name: $when: UpdateContainerResources $*" 0 "$?" "$out"
  WANT_OF[$name]=$want
  probe_allowed "$name" "$when" "$allowed"
}
# probe_allowed NAME WHEN ALLOWED: probe with AllowedCPUs ALLOWED instead of 1
probe_allowed() {
  local u=${UNIT[$1]}
  UNIT[$1]=
  probe "$1" "$2"
  UNIT[$1]=$u
  check "$1: $2: AllowedCPUs" "$3" "$(systemctl show -P AllowedCPUs "$u")"
}

# The NRI route under kubelet's updates. Its CPU manager (static policy) sets the shared pool,
# cpuset only: the plugin narrows it again (generation 2), containerd's runc sets the scope's
# AllowedCPUs to the narrowed set, and the spec's quota (1 CPU) is applied with it. Then an
# in-place resize to 1.5 CPUs (the pod slice first, as kubelet does): planned again over the
# pod's quota (generation 3), still narrowed; and a daemon-reload keeps all of it.
if [ -n "${CID[nri-cri]:-}" ]; then
  cri_update nri-cri cpu-manager "cpus=1 max=100000 100000 mask='1' gen='2' quota=0.5" 1 --cpuset 0-1
  slice=kubepods-burstable-pod3f2a9c1e5b7d4a60b8e2c4d6f1a3b5c7.slice
  out=$(systemctl set-property --runtime $slice CPUQuota=150% 2>&1)
  check "nri-cri: resize: pod slice CPUQuota=150%" "150000 100000" \
    "$(cat /sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/$slice/cpu.max 2>&1)" "$out"
  cri_update nri-cri resize "cpus=1 max=150000 100000 mask='1' gen='3' quota=1.5" 1 --quota 150000 --period 100000
  systemctl daemon-reload
  probe nri-cri resize-reload
  out=$($CRI rm-pod "${POD[nri-cri]}" 2>&1)
  check "nri-cri: pod removed, its claim released" "0 0" "$? $(find $CL/nri -type f -name '*.json' 2>/dev/null | wc -l)" "$out"
fi
kill $NRI_PID
wait $NRI_PID
check "nri: the plugin stopped" gone "$(kill -0 $NRI_PID 2>/dev/null && echo running || echo gone)"

# (a') The Debian package's unit for the plugin (debian/cpuplan-nri.service as shipped, its
# sandbox included; ./cpuplan-nri.service on the share), the binary where it names it and the
# node's default config but for the fake topology (in /var/lib: the unit's /tmp is private).
# systemd starts it; it registers, plans a CRI container (the plan at /dev/cpuplan), logs to the
# journal only (the hook's default log untouched), releases the claim, and stops.
nri_unit() {
  local out log_before
  install -m 755 "$NRI" /usr/bin/cpuplan-nri
  install -m 644 "$S/cpuplan-nri.service" /etc/systemd/system/cpuplan-nri.service
  mkdir -p /etc/cpuplan /var/lib/cpuplan-vm
  cp -r "$W/topo" /var/lib/cpuplan-vm/topo
  jq -n '{topology_root: "/var/lib/cpuplan-vm/topo"}' > /etc/cpuplan/hook.json
  log_before=$(stat -c %s /var/log/cpuplan-hook.log 2>&1)
  systemctl daemon-reload
  out=$(systemctl start cpuplan-nri 2>&1)
  check "nri-unit: systemctl start" 0 "$?" "$out"
  for _ in $(seq 1 100); do /usr/bin/cpuplan-nri --probe ready >/dev/null 2>&1 && break; sleep 0.3; done
  check "nri-unit: registered (its probe)" 0 "$(/usr/bin/cpuplan-nri --probe ready >/dev/null 2>&1; echo $?)" \
    "$(systemctl status cpuplan-nri --no-pager 2>&1 | tail -8)"
  check "nri-unit: its lines in the journal" 1 \
    "$(journalctl -u cpuplan-nri --no-pager -q -o cat | grep -c 'nri: synchronized with')" \
    "$(journalctl -u cpuplan-nri --no-pager -q -o cat | tail -5)"
  # Its sandbox, seen from inside its mount namespace: the file system read-only, /run/cpuplan
  # (nri_dir, claims_dir) writable.
  local pid
  pid=$(systemctl show -P MainPID cpuplan-nri)
  check "nri-unit: read-only but /run/cpuplan, in its namespace" "/etc:ro /run:ro /run/cpuplan:rw" \
    "$(nsenter -t "$pid" -m sh -c 'for d in /etc /run /run/cpuplan; do
      if touch $d/.unit-probe 2>/dev/null; then rm $d/.unit-probe; echo $d:rw; else echo $d:ro; fi
    done' 2>&1 | tr '\n' ' ' | sed 's/ $//')" \
    "$(grep -E ' /run(/cpuplan)? ' /proc/$pid/mountinfo 2>&1)"
  fact "nri-unit: capabilities" "$(grep -E '^Cap(Eff|Bnd)' /proc/$pid/status | tr '\n' ' ')"
  cri_start nri-unit 5e0b7a3c9d1f4e2a8b6c0d4f2a9e7c15
  PROBE_OF[nri-unit]="d=/dev/cpuplan
$CRI_PROBE"
  probe nri-unit start
  fact "nri-unit: systemd-analyze security" "$(systemd-analyze security cpuplan-nri --no-pager 2>&1 | tail -1)"
  out=$($CRI rm-pod "${POD[nri-unit]}" 2>&1)
  check "nri-unit: pod removed, its claim released" "0 0" \
    "$? $(find /run/cpuplan/claims -type f -name '*.json' 2>/dev/null | wc -l)" "$out"
  check "nri-unit: the hook's log untouched" "$log_before" "$(stat -c %s /var/log/cpuplan-hook.log 2>&1)"
  out=$(systemctl stop cpuplan-nri 2>&1)
  check "nri-unit: stopped" inactive "$(systemctl is-active cpuplan-nri)" "$out"
}
nri_unit

# (b) The hook route: the plugin gone, the hook registered by `install --containerd` (a base
# runtime spec with the hooks and a drop-in containerd's config imports), containerd restarted.
hook_config cri-hook
out=$("$CPUPLAN" --config "$W/hook-cri-hook.json" install --containerd --hooks-dir $W/hooks-cri.d --prefix $W/prefix 2>&1); rc=$?
check "cri-hook: install --containerd" 0 "$rc" "$out"
t0=$(ms)
systemctl restart containerd
for _ in $(seq 1 600); do $CRI version >/dev/null 2>&1 && break; sleep 0.1; done
fact "cri-hook: containerd restart_ms" "$(($(ms) - t0))"
cri_start cri-hook 8d4b2f6a1c3e4b7d9f0a2c4e6b8d1f3a
if [ -n "${CID[cri-hook]:-}" ]; then
  PROBE_OF[cri-hook]="d=/run/cpuplan
$CRI_PROBE"
  probe cri-hook start
  systemctl daemon-reload
  probe cri-hook daemon-reload
  out=$(systemctl set-property --runtime "${UNIT[cri-hook]}" CPUQuota=70% 2>&1)
  check "cri-hook: set-property CPUQuota=70%" "70000 100000" "$(cat /sys/fs/cgroup/$(systemctl show -P ControlGroup "${UNIT[cri-hook]}")/cpu.max)" "$out"
  probe cri-hook set-property
  fact "cri-hook: dbus_ms" "$(sed -n "s/.*container ${CID[cri-hook]}: set AllowedCPUs=.* through systemd in \([0-9]*\) ms.*/\1/p" $W/hook.log)"
  # kubelet's CPU-manager update: the hook runs only at create, so containerd's runc applies
  # kubelet's set as it is (the scope's AllowedCPUs too) and the plan files keep the first plan
  # (stale); `cpuplan claims` says so. A daemon-reload keeps kubelet's set.
  cri_update cri-hook cpu-manager "cpus=0-1 max=100000 100000 mask='1' gen='1' quota=0.5" 0-1 --cpuset 0-1
  out=$("$CPUPLAN" --config "$W/hook-cri-hook.json" claims 2>&1)
  check "cri-hook: cpu-manager: claims says the plan is stale" 1 "$(echo "$out" | grep -c 'plan stale: cpuset 0-1 (plan 1)')" "$out"
  systemctl daemon-reload
  probe_allowed cri-hook cpu-manager-reload 0-1
  out=$($CRI rm-pod "${POD[cri-hook]}" 2>&1)
  check "cri-hook: pod removed" 0 "$?" "$out"
fi

# poststop: the claims go.
for n in runc-systemd crun-systemd runc-cgroupfs crun-cgroupfs runc-nobus; do
  rt=${n%%-*}; $rt delete -f "$n" >/dev/null 2>&1
done
[ -n "${pod:-}" ] && podman rm -f -t 0 "$pod" >/dev/null 2>&1
[ -n "${pre:-}" ] && podman rm -f -t 0 "$pre" >/dev/null 2>&1
check "poststop: every claim released" "0 of 8" "$(find $CL -type f -name '*.json' 2>/dev/null | wc -l) of $(grep -c 'stopped, released 1 GPU claim' $W/hook.log)"

fact checks_ms "$(($(ms) - t_start))"
cp $W/hook.log "$S/hook.log"
cp $W/nri.log "$S/nri.log" 2>/dev/null
echo "guest: $(grep -c '"ok":false' "$R") failed of $(grep -c '"check"' "$R") checks"
