#!/usr/bin/env bash
# cgroup2-vm.sh - a throwaway Debian 12 node with a real cgroup v2 hierarchy and systemd as PID 1, under QEMU,
# for end-to-end tests of cgroup code (runc/crun/containerd/podman with the systemd cgroup driver) on a machine
# whose own cgroups are hybrid v1 and must not be touched. tests/vm_systemd.rs builds the image with it under
# $CARGO_TARGET_DIR/vm/img-<hash of this file> (a changed recipe is a new image) and runs tests/vm/guest.sh in it. Nothing here mounts, changes or restarts anything of
# the host: mmdebstrap runs in its own mount namespace (--mode=unshare), QEMU is an ordinary process.
#
#   cgroup2-vm.sh deps            apt-get install qemu-system-x86 + mmdebstrap on the host (no-op when present)
#   cgroup2-vm.sh build           make $VM_DIR/{rootfs.img,vmlinuz,initrd.img} (Debian bookworm, see PACKAGES)
#   cgroup2-vm.sh run CMD...      boot, run CMD as root in the guest, power off; CMD's stdout, stderr and exit
#                                 status come back as this command's own. CMD is joined with spaces and run by
#                                 bash (like ssh); `run -` reads the guest script from stdin.
#   cgroup2-vm.sh selftest        the checks: cgroup2fs, cpu+cpuset controllers, systemd-run --scope with
#                                 CPUQuota/AllowedCPUs, runc and crun --systemd-cgroup (cgroupsPath
#                                 system.slice:cpuplan:test, quota 50000, cpus 0: cpu.max "50000 100000" inside),
#                                 ctr run --runc-systemd-cgroup, podman --cgroup-manager=systemd when installed
#   cgroup2-vm.sh shell           interactive boot (serial console on this terminal, root autologin; Ctrl-A X
#                                 quits; `mount -t 9p -o trans=virtio,version=9p2000.L cgroup2vm_host /mnt/host`)
#
# Guest: Debian 12, kernel 6.1 (linux-image-amd64, booted with -kernel/-initrd, small MODULES=list initrd),
# systemd 252 on the unified cgroup v2 hierarchy (controllers: cpuset cpu io memory hugetlb pids rdma misc),
# runc 1.1.5, crun 1.8.1, containerd 1.7.24 from trixie (enabled at boot; config.toml with SystemdCgroup = true,
# sandbox_image localhost/cpuplan-pause:1, to be imported from a file, NRI on; VM_CONTAINERD=bookworm: Debian 12's 1.6.20, no NRI), podman 4.3, dbus, busybox-static, jq. 2 vCPUs, 2 GiB RAM, no network. Image: raw ext4, 1.3 GB sparse, ~700 MB used.
# The root disk is booted with snapshot=on: every run starts from the pristine image and its writes are dropped.
# CMD runs after multi-user.target from a oneshot unit (cgroup2-vm-run.service, so in system.slice), with cwd
# /mnt/host = the host directory $VM_SHARE (default: the current directory; 9p, read-write, files written by the
# guest are root's), so a test passes a freshly built binary in (the guest's glibc is the host's: bookworm) and
# writes results back. CMD's stdin is /dev/null. Then the guest powers off (poweroff-force).
# Exit status of `run`: CMD's; 124 if $VM_TIMEOUT expired (QEMU is killed); 125 if the guest never reported
# (console tail printed to stderr). The console log is always kept as $VM_DIR/last-console.log.
#
# Environment: VM_DIR (default /tmp/cgroup2-vm; everything is created under it), VM_SHARE (default $PWD),
#   VM_QEMU_EXTRA (more QEMU arguments, split on spaces; e.g. NUMA nodes, one without CPUs as on Grace Hopper:
#   VM_CPUS=4 VM_MEM=1536 VM_QEMU_EXTRA="-object memory-backend-ram,id=m0,size=512M -object memory-backend-ram,id=m1,size=512M
#   -object memory-backend-ram,id=m2,size=512M -numa node,nodeid=0,cpus=0-1,memdev=m0 -numa node,nodeid=1,cpus=2-3,memdev=m1
#   -numa node,nodeid=2,memdev=m2 -numa dist,src=0,dst=1,val=20 -numa dist,src=0,dst=2,val=40 -numa dist,src=1,dst=2,val=80"),
#   VM_SHARE_RO=1 (share read-only), VM_TIMEOUT (seconds for one run, default 600), VM_CPUS (2), VM_MEM (MiB,
#   2048), VM_ACCEL (tcg | kvm; default tcg, see KVM below), VM_APPEND (more kernel cmdline), VM_DEBUG=1 (verbose
#   console), VM_KEEP=1 (keep the per-run directory $VM_DIR/run.*). Build only: VM_EXTRA_PACKAGES (comma-separated
#   Debian packages), VM_CONTAINERD=trixie (the default: containerd 1.7.24 from trixie, pinned so nothing else
#   leaves bookworm, NRI enabled: /var/run/nri/nri.sock; VM_TRIXIE_MIRROR overrides the mirror, which is
#   otherwise taken from the apt sources file), VM_APT_SOURCES (apt sources file for the guest; default the host's
#   /etc/apt/sources.list.d/debian.sources, else mmdebstrap's default).
# Needs: root, x86_64, ~1.5 GB free under VM_DIR, qemu-system-x86 + mmdebstrap + e2fsprogs >= 1.43 (`deps`),
#   Debian's package mirror (build only). Runs may go in parallel (each has its own run dir and disk overlay).
#
# Measured on the 2-core Debian 12 Firecracker VM this was written on, TCG (2 vCPUs on 2 busy host cores,
# load average 1-5 from other jobs):
#   deps (qemu-system-x86 + mmdebstrap) ......  19 s
#   build ....................................  110 s cold package cache, 52-57 s warm (trixie / +podman: ~55 s)
#   run true (boot -> multi-user -> CMD -> power off) ... 24-32 s at load 1-2, 37 s at load ~3
#       (kernel ~3 s, initrd ~5 s, multi-user.target at 15-30 s of guest uptime)
#   runc --systemd-cgroup run, busybox, in the guest .... 0.75-1.7 s;  crun 0.38-0.85 s;  ctr run 2.8-5.7 s;
#       podman run 2.4-3.0 s
#   selftest (one boot, all checks) ..........  41-51 s (50-65 s with podman)
# Observed: runc puts the container in /system.slice/cpuplan-test.scope itself; crun (and podman, which uses
# crun) in a "container" child: /system.slice/cpuplan-test.scope/container, /machine.slice/libpod-<id>.scope/
# container; in every case the container's own cgroup has cpu.max "50000 100000" and cpuset 0. ctr's default
# spec has no cgroup namespace and no /sys/fs/cgroup mount. runc warns "skipping device /dev/char/10:200 for
# systemd" (harmless). Debian 12's containerd 1.6 has no NRI plugin API: use VM_CONTAINERD=trixie for NRI.
# KVM: /dev/kvm here is PVM; a stock kernel does not run on it. `-accel kvm -cpu host`: QEMU aborts ("failed to
#   set MSR 0x10a"); `-cpu qemu64`: "Probing EDD ... ok" from the real-mode setup, then silence until killed
#   (60 s). Hence TCG (-accel tcg,thread=multi -cpu max); VM_ACCEL=kvm is for hosts with a real KVM (untested).
set -euo pipefail

VM_DIR=${VM_DIR:-/tmp/cgroup2-vm}
VM_TIMEOUT=${VM_TIMEOUT:-600}
VM_CPUS=${VM_CPUS:-2}
VM_MEM=${VM_MEM:-2048}
VM_ACCEL=${VM_ACCEL:-tcg}
SELF=$(readlink -f "$0")
PACKAGES=systemd,systemd-sysv,udev,dbus,kmod,procps,linux-image-amd64,initramfs-tools,zstd,runc,crun,containerd,podman,busybox-static,jq

die() { echo "cgroup2-vm: $*" >&2; exit 2; }
log() { echo "cgroup2-vm: $*" >&2; }
need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

cmd_deps() {
  need_root
  local need=()
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
  command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
  if [ ${#need[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null; }
  fi
}

# ---------------------------------------------------------------- build
cmd_build() {
  need_root
  cmd_deps
  mkdir -p "$VM_DIR"
  local root="$VM_DIR/rootfs.dir" pkgs="$PACKAGES" sources=()
  [ -n "${VM_EXTRA_PACKAGES:-}" ] && pkgs="$pkgs,$VM_EXTRA_PACKAGES"
  if [ -n "${VM_APT_SOURCES:-}" ]; then sources=("$VM_APT_SOURCES")
  elif [ -f /etc/apt/sources.list.d/debian.sources ]; then sources=(/etc/apt/sources.list.d/debian.sources)
  fi
  local pin=()
  if [ "${VM_CONTAINERD:-trixie}" = trixie ]; then
    # containerd 1.7 (NRI) from trixie on the bookworm guest, pinned low so nothing else moves to trixie
    local mirror=${VM_TRIXIE_MIRROR:-}
    if [ -z "$mirror" ] && [ ${#sources[@]} -gt 0 ]; then
      mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}
                    $1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) {print $i; exit}}' "${sources[0]}")
    fi
    [ -n "$mirror" ] || die "VM_CONTAINERD=trixie: no mirror found in ${sources[0]:-(none)}; set VM_TRIXIE_MIRROR"
    sources+=("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main")
    pin=(--setup-hook='mkdir -p "$1/etc/apt/preferences.d" && printf "%s\n" "Package: *" "Pin: release n=trixie" \
      "Pin-Priority: 100" "" "Package: containerd" "Pin: release n=trixie" "Pin-Priority: 990" \
      > "$1/etc/apt/preferences.d/trixie-containerd"')
  fi
  rm -rf "$root" "$VM_DIR/rootfs.img.tmp"
  local t0=$SECONDS
  # --mode=unshare as root: a private mount namespace, so no mount of the host is touched.
  # The essential hook runs before the kernel is installed: a small initrd with only what is needed to mount
  # a virtio ext4 root (udev loads the rest, e.g. 9p, from the root filesystem).
  mmdebstrap --mode=unshare --variant=minbase --include="$pkgs" "${pin[@]}" \
    --aptopt='Acquire::Check-Valid-Until "false"' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d" &&
      printf "MODULES=list\nCOMPRESS=zstd\n" > "$1/etc/initramfs-tools/conf.d/cgroup2-vm" &&
      printf "%s\n" virtio_pci virtio_blk ext4 crc32c_generic > "$1/usr/share/initramfs-tools/modules.d/cgroup2-vm"' \
    bookworm "$root" "${sources[@]}"
  log "mmdebstrap: $((SECONDS - t0)) s"

  # kernel + initrd are booted directly by QEMU (-kernel/-initrd)
  cp "$(ls "$root"/boot/vmlinuz-* | sort -V | tail -1)" "$VM_DIR/vmlinuz.tmp"
  cp "$(ls "$root"/boot/initrd.img-* | sort -V | tail -1)" "$VM_DIR/initrd.img.tmp"
  rm -f "$root"/boot/vmlinuz-* "$root"/boot/initrd.img-* "$root"/vmlinuz* "$root"/initrd.img*
  customize "$root"

  local mb
  mb=$(du -sm "$root" | cut -f1)
  mb=$(( mb * 12 / 10 + 512 ))     # room for test files; the file is sparse
  mkfs.ext4 -q -F -L cgroup2-vm -J size=16 -E root_owner=0:0 -d "$root" "$VM_DIR/rootfs.img.tmp" "${mb}M"
  mv "$VM_DIR/rootfs.img.tmp" "$VM_DIR/rootfs.img"
  mv "$VM_DIR/vmlinuz.tmp" "$VM_DIR/vmlinuz"
  mv "$VM_DIR/initrd.img.tmp" "$VM_DIR/initrd.img"
  rm -rf "$root"
  log "built in $((SECONDS - t0)) s: $(ls -s --block-size=M "$VM_DIR/rootfs.img" | cut -d' ' -f1) used of ${mb}M $VM_DIR/rootfs.img," \
      "kernel $(du -h "$VM_DIR/vmlinuz" | cut -f1), initrd $(du -h "$VM_DIR/initrd.img" | cut -f1)"
}

# write the guest's configuration into the root directory $1
customize() {
  local r=$1
  echo cgroup2-vm > "$r/etc/hostname"
  printf '127.0.0.1\tlocalhost\n127.0.1.1\tcgroup2-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$r/etc/hosts"
  echo '/dev/vda / ext4 rw,relatime 0 0' > "$r/etc/fstab"
  # root without password (console only, the guest has no network)
  sed -i 's/^root:[^:]*:/root::/' "$r/etc/shadow"
  # serial console autologin, for `shell`
  mkdir -p "$r/etc/systemd/system/serial-getty@ttyS0.service.d"
  cat > "$r/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=-/sbin/agetty -o '-p -f -- \\u' --keep-baud --autologin root 115200,57600,38400,9600 - $TERM
EOF
  # nothing periodic in a test VM
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer fstrim.timer \
           logrotate.timer man-db.timer systemd-tmpfiles-clean.timer; do
    ln -sf /dev/null "$r/etc/systemd/system/$u"
  done
  # containerd as on a kubelet node with the systemd cgroup driver
  mkdir -p "$r/etc/containerd"
  # The sandbox image is tests/vm_systemd.rs's pause image, built from busybox and imported by
  # guest.sh (the guest has no network and names no registry).
  cat > "$r/etc/containerd/config.toml" <<'EOF'
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/cpuplan-pause:1"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
EOF
  case $(dpkg-query --admindir="$r/var/lib/dpkg" -W -f '${Version}' containerd) in
    1.[0-6].*) ;;
    *) printf '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n' >> "$r/etc/containerd/config.toml" ;;
  esac
  # the unit that runs the host's command; pulled in by systemd.wants= on the kernel cmdline of `run`
  cat > "$r/etc/systemd/system/cgroup2-vm-run.service" <<'EOF'
[Unit]
Description=cgroup2-vm: run the host's command, then power off
After=multi-user.target
SuccessAction=poweroff-force
FailureAction=poweroff-force

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/cgroup2-vm-run
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console
EOF
  mkdir -p "$r/usr/local/sbin" "$r/mnt/host"
  cat > "$r/usr/local/sbin/cgroup2-vm-run" <<'EOF'
#!/bin/bash
# mounts the host's shares, runs $C/cmd with output to $C/stdout, $C/stderr and its exit status to $C/rc
C=/run/cgroup2-vm
mkdir -p "$C"
o=trans=virtio,version=9p2000.L,msize=524288,cache=none
# udev loads the 9p transport and binds the shares' devices when it gets to them: on a loaded
# host under TCG that can come after multi-user.target, so wait for the control share's tag.
modprobe -q 9pnet_virtio 2>/dev/null || true
for _ in $(seq 1 240); do
  grep -qsx cgroup2vm_ctl /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag && break
  sleep 0.5
done
mount -t 9p -o "$o" cgroup2vm_ctl "$C" || { echo "cgroup2-vm-run: no control share" >&2; exit 1; }
cd /root
if grep -qsx cgroup2vm_host /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag; then
  mount -t 9p -o "$o" cgroup2vm_host /mnt/host && cd /mnt/host
fi
export HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 CGROUP2_VM=1
echo "cgroup2-vm-run: start $(cut -d' ' -f1 /proc/uptime)s after boot"
bash "$C/cmd" </dev/null >"$C/stdout" 2>"$C/stderr"
echo $? > "$C/rc"
echo "cgroup2-vm-run: exit $(cat "$C/rc") at $(cut -d' ' -f1 /proc/uptime)s"
sync
EOF
  chmod 755 "$r/usr/local/sbin/cgroup2-vm-run"
}

# ---------------------------------------------------------------- run
QEMU_PID=
RUN_DIR=
cleanup_run() {
  if [ -n "$QEMU_PID" ] && kill -0 "$QEMU_PID" 2>/dev/null; then kill "$QEMU_PID" 2>/dev/null || true; fi
  if [ -n "$RUN_DIR" ] && [ -z "${VM_KEEP:-}" ]; then rm -rf "$RUN_DIR"; fi
}

# qemu_args MODE(run|shell) -> QEMU array
qemu_args() {
  local mode=$1 accel append share
  case $VM_ACCEL in
    tcg) accel=(-accel tcg,thread=multi -cpu max) ;;
    kvm) accel=(-accel kvm -cpu host) ;;
    *) die "VM_ACCEL must be tcg or kvm" ;;
  esac
  append="console=ttyS0 root=/dev/vda rw panic=-1 systemd.unified_cgroup_hierarchy=1 random.trust_cpu=on"
  if [ -z "${VM_DEBUG:-}" ]; then append="$append quiet loglevel=3 systemd.show_status=false"; fi
  [ "$mode" = run ] && append="$append systemd.wants=cgroup2-vm-run.service systemd.mask=serial-getty@ttyS0.service"
  append="$append ${VM_APPEND:-}"
  share=${VM_SHARE:-$PWD}
  [ -d "$share" ] || die "VM_SHARE $share is not a directory"
  QEMU=(qemu-system-x86_64 -name cgroup2-vm -machine pc "${accel[@]}" -smp "$VM_CPUS" -m "$VM_MEM"
        -nodefaults -no-user-config -display none -no-reboot -nic none
        -kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initrd.img" -append "$append"
        -drive "file=$VM_DIR/rootfs.img,format=raw,if=virtio,snapshot=on,cache=unsafe"
        -device virtio-rng-pci
        -virtfs "local,path=$share,mount_tag=cgroup2vm_host,security_model=none,id=host${VM_SHARE_RO:+,readonly=on}")
  # more QEMU arguments, word-split: e.g. an emulated NUMA topology (see VM_QEMU_EXTRA above)
  if [ -n "${VM_QEMU_EXTRA:-}" ]; then read -r -a extra <<< "$VM_QEMU_EXTRA"; QEMU+=("${extra[@]}"); fi
}

cmd_run() {
  need_root
  [ $# -gt 0 ] || die "usage: $0 run CMD... | run - <script"
  [ -f "$VM_DIR/rootfs.img" ] || die "no image: run '$0 build' first"
  command -v qemu-system-x86_64 >/dev/null || die "no qemu: run '$0 deps' first"
  trap cleanup_run EXIT
  trap 'exit 130' INT TERM
  RUN_DIR=$(mktemp -d "$VM_DIR/run.XXXXXX")
  if [ $# -eq 1 ] && [ "$1" = - ]; then cat > "$RUN_DIR/cmd"; else printf '%s\n' "$*" > "$RUN_DIR/cmd"; fi
  qemu_args run
  QEMU+=(-virtfs "local,path=$RUN_DIR,mount_tag=cgroup2vm_ctl,security_model=none,id=ctl"
         -serial "file:$RUN_DIR/console.log" -monitor none)
  local t0=$SECONDS rc
  # -snapshot's temporary overlay goes to TMPDIR
  TMPDIR=$VM_DIR "${QEMU[@]}" </dev/null >"$RUN_DIR/qemu.log" 2>&1 &
  QEMU_PID=$!
  local deadline=$((SECONDS + VM_TIMEOUT)) timed_out=
  while kill -0 "$QEMU_PID" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then timed_out=1; kill "$QEMU_PID" 2>/dev/null || true; break; fi
    sleep 1
  done
  wait "$QEMU_PID" 2>/dev/null || true
  QEMU_PID=
  cp "$RUN_DIR/console.log" "$VM_DIR/last-console.log" 2>/dev/null || true
  [ -f "$RUN_DIR/stdout" ] && cat "$RUN_DIR/stdout"
  [ -f "$RUN_DIR/stderr" ] && cat "$RUN_DIR/stderr" >&2
  if [ -s "$RUN_DIR/rc" ]; then
    rc=$(cat "$RUN_DIR/rc")
  else
    if [ -n "$timed_out" ]; then rc=124; log "timed out after ${VM_TIMEOUT}s"; else rc=125; fi
    log "guest did not report an exit status; qemu said:"; cat "$RUN_DIR/qemu.log" >&2 || true
    log "console log (tail):"; tail -n 60 "$RUN_DIR/console.log" >&2 || true
  fi
  log "round trip $((SECONDS - t0)) s, exit $rc"
  return "$rc"
}

cmd_shell() {
  need_root
  [ -f "$VM_DIR/rootfs.img" ] || die "no image: run '$0 build' first"
  qemu_args shell
  TMPDIR=$VM_DIR exec "${QEMU[@]}" -serial mon:stdio
}

# ---------------------------------------------------------------- selftest
cmd_selftest() {
  cmd_run - <<'GUEST'
set -u
fails=0
ok()  { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
ms()  { date +%s%3N; }
podv=$(command -v podman >/dev/null && podman --version)
echo "guest: $(uname -r), $(systemctl --version | head -1), $(runc --version | head -1), $(crun --version | head -1)," \
  "containerd $(containerd --version | cut -d' ' -f3)${podv:+, $podv}"
echo "multi-user.target reached $(($(systemctl show -P ActiveEnterTimestampMonotonic multi-user.target) / 1000)) ms after" \
  "boot, this script started at $(cut -d' ' -f1 /proc/uptime) s; nproc $(nproc); $(grep MemTotal /proc/meminfo)"

fs=$(stat -fc %T /sys/fs/cgroup)
[ "$fs" = cgroup2fs ] && ok "stat -fc %T /sys/fs/cgroup: $fs" || bad "/sys/fs/cgroup is $fs"
ctl=$(cat /sys/fs/cgroup/cgroup.controllers)
echo "$ctl" | grep -qw cpu && echo "$ctl" | grep -qw cpuset && ok "cgroup.controllers: $ctl" || bad "cgroup.controllers: $ctl"

out=$(systemd-run --scope -p CPUQuota=50% -p AllowedCPUs=0 sh -c \
  'g=$(cut -d: -f3 /proc/self/cgroup); echo "$g cpu.max=$(cat /sys/fs/cgroup$g/cpu.max) cpuset.cpus=$(cat /sys/fs/cgroup$g/cpuset.cpus)"; sleep 1' 2>&1)
rc=$?
case "$out" in *"cpu.max=50000 100000 cpuset.cpus=0"*) [ $rc = 0 ] && ok "systemd-run --scope -p CPUQuota=50% -p AllowedCPUs=0 sleep 1: $(echo $out)";;
  *) bad "systemd-run --scope: rc=$rc $out";; esac

# a busybox bundle: foreground (B) and detached (D, same rootfs)
B=/tmp/bundle D=/tmp/bundle-d
mkdir -p $B/rootfs/bin $D
cp /bin/busybox $B/rootfs/bin/
for a in sh cat echo sleep ls; do ln -sf busybox $B/rootfs/bin/$a; done
cd $B && runc spec && cd /
PROBE='echo cpu.max=$(cat /sys/fs/cgroup/cpu.max) cpuset=$(cat /sys/fs/cgroup/cpuset.cpus.effective) cgroup=$(cat /proc/self/cgroup)'
jq --arg probe "$PROBE" '.process.terminal = false | .process.args = ["sh", "-c", $probe]
  | .root.path = "/tmp/bundle/rootfs"
  | .linux.resources.cpu = {"quota": 50000, "period": 100000, "cpus": "0"}
  | .linux.cgroupsPath = "system.slice:cpuplan:test"
  | .linux.namespaces |= (map(select(.type != "cgroup")) + [{"type": "cgroup"}])' $B/config.json > $B/c.json
mv $B/c.json $B/config.json
jq '.process.args = ["sleep", "60"]' $B/config.json > $D/config.json
echo "bundle: cgroupsPath $(jq -c .linux.cgroupsPath $B/config.json), resources $(jq -c .linux.resources.cpu $B/config.json)," \
  "namespaces $(jq -c '[.linux.namespaces[].type]' $B/config.json)"

for rt in runc crun; do
  t0=$(ms)
  out=$($rt --systemd-cgroup run -b $B cpuplan-$rt 2>&1); rc=$?
  t1=$(ms)
  case "$out" in *"cpu.max=50000 100000 cpuset=0"*) [ $rc = 0 ] && ok "$rt --systemd-cgroup run (${rt}_ms=$((t1 - t0))): $(echo $out | grep -o 'cpu.max=.*')";;
    *) bad "$rt --systemd-cgroup run: rc=$rc $out";; esac
  $rt delete -f cpuplan-$rt >/dev/null 2>&1
  # detached: where the node sees it
  $rt --systemd-cgroup run -d -b $D cpuplan-$rt-d </dev/null >/dev/null 2>&1
  pid=$($rt state cpuplan-$rt-d | jq .pid)
  cg=$(cut -d: -f3 /proc/$pid/cgroup)
  scope=$(systemctl show -P ControlGroup cpuplan-test.scope)
  case "$cg" in /system.slice/cpuplan-test.scope*) ok "$rt -d: node sees $cg (scope $scope $(systemctl is-active cpuplan-test.scope)):" \
      "cpu.max=$(cat /sys/fs/cgroup$cg/cpu.max) cpuset.cpus.effective=$(cat /sys/fs/cgroup$cg/cpuset.cpus.effective)";;
    *) bad "$rt -d: cgroup $cg, scope $scope";; esac
  $rt delete -f cpuplan-$rt-d
done

# containerd (runc v2 shim with the systemd cgroup driver, as with SystemdCgroup = true). ctr's default spec has
# neither a cgroup namespace nor a /sys/fs/cgroup mount, so cpu.max is read from the node.
if systemctl is-active -q containerd; then
  C="ctr run --rootfs --runc-systemd-cgroup --cgroup system.slice:cpuplan:ctr --cpu-quota 50000 --cpu-period 100000"
  t0=$(ms)
  out=$($C --rm $B/rootfs cpuplan-ctr /bin/cat /proc/self/cgroup 2>&1); rc=$?
  t1=$(ms)
  $C -d $B/rootfs cpuplan-ctr-d /bin/sleep 60 >/dev/null 2>&1
  max=$(cat /sys/fs/cgroup/system.slice/cpuplan-ctr.scope/cpu.max 2>&1)
  ctr task rm -f cpuplan-ctr-d >/dev/null 2>&1; ctr container rm cpuplan-ctr-d >/dev/null 2>&1
  case "$out $max" in "0::/system.slice/cpuplan-ctr.scope 50000 100000") [ $rc = 0 ] &&
      ok "containerd: ctr run --runc-systemd-cgroup (ctr_ms=$((t1 - t0))): $out, node: cpu.max=$max";;
    *) bad "ctr run: rc=$rc $out, node: cpu.max=$max";; esac
  if [ -S /var/run/nri/nri.sock ]; then ok "containerd NRI socket /var/run/nri/nri.sock"; fi
else bad "containerd is $(systemctl is-active containerd)"; fi

if command -v podman >/dev/null; then
  t0=$(ms)
  out=$(podman --cgroup-manager=systemd run --rm --network none --cpu-quota 50000 --cpu-period 100000 --cpuset-cpus 0 \
    --rootfs $B/rootfs sh -c "$PROBE" 2>&1); rc=$?
  t1=$(ms)
  case "$out" in *"cpu.max=50000 100000 cpuset=0"*) [ $rc = 0 ] && ok "podman --cgroup-manager=systemd run (podman_ms=$((t1 - t0))): $(echo $out)";;
    *) bad "podman: rc=$rc $out";; esac
  id=$(podman --cgroup-manager=systemd run -d --network none --cpu-quota 50000 --cpu-period 100000 --rootfs $B/rootfs sleep 60)
  pid=$(podman inspect --format '{{.State.Pid}}' "$id")
  echo "     podman -d: node sees $(cut -d: -f3 /proc/$pid/cgroup)"
  podman rm -f -t 0 "$id" >/dev/null
fi

echo "$fails failed"
[ $fails = 0 ]
GUEST
}

case ${1:-} in
  deps) cmd_deps ;;
  build) cmd_build ;;
  run) shift; cmd_run "$@" ;;
  selftest) cmd_selftest ;;
  shell) cmd_shell ;;
  _customize) customize "$2" ;;
  *) sed -n '2,/^set -euo/p' "$SELF" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
