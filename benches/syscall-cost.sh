#!/usr/bin/env bash
# benches/syscall-cost.sh [N]   (default 2000; needs gcc; no root needed)
#
# What one file operation of the kinds the hook makes at every container start costs on this
# machine, each the mean of N in a row, next to a bare syscall (getpid) as the baseline of the
# same run: an open, two reads and a close of a sysfs, a procfs, a cgroupfs and a regular file,
# an open that fails, a stat and a listing of a sysfs directory, and a readlink of a namespace
# link. The hook's own time at createRuntime is about these times the ~40 path operations it
# makes (docs/performance.md), on top of what an exec of any static binary costs.
set -euo pipefail
N=${1:-2000}
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "syscall-cost.sh: N must be a positive integer, got '$N'" >&2; exit 2; }
command -v cc >/dev/null || { echo "syscall-cost.sh: cc is missing: apt-get install -y gcc" >&2; exit 2; }
T=$(mktemp -d /tmp/syscall-cost.XXXXXX)
trap 'rm -rf "$T"' EXIT
echo 100000 >"$T/regular"
cquota=$(ls /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cgroup.controllers 2>/dev/null | head -1 || true)
cat >"$T/cost.c" <<'C'
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int n;
static double base;
static void report(const char *what, double us) { printf("  %-52s %7.2f us  %6.1fx getpid\n", what, us, us / base); }
static void file(const char *label, const char *path) {
  char buf[4096]; char what[128];
  double t = now();
  for (int i = 0; i < n; i++) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) { if (read(fd, buf, sizeof buf) < 0) exit(1); if (read(fd, buf, sizeof buf) < 0) exit(1); close(fd); }
  }
  snprintf(what, sizeof what, "open, 2 reads, close: %s", label);
  report(what, (now() - t) / n);
}
int main(int argc, char **argv) {
  n = atoi(argv[1]);
  double t = now();
  for (int i = 0; i < n; i++) syscall(SYS_getpid);
  base = (now() - t) / n;
  report("getpid (a bare syscall)", base);
  file("sysfs cpu/online", "/sys/devices/system/cpu/online");
  file("procfs /proc/self/status", "/proc/self/status");
  file("procfs /proc/1/stat", "/proc/1/stat");
  file("cgroupfs quota file", argv[2]);
  file("regular file", argv[3]);
  file("a missing file (the open fails)", "/sys/fs/cgroup/no-such-cgroup/cpu.max");
  struct stat st; char l[256], buf[32768];
  t = now(); for (int i = 0; i < n; i++) stat("/sys/bus/pci/devices", &st);
  report("stat of /sys/bus/pci/devices", (now() - t) / n);
  t = now();
  for (int i = 0; i < n; i++) {
    int fd = open("/sys/bus/pci/devices", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (syscall(SYS_getdents64, fd, buf, sizeof buf) > 0) {}
    close(fd);
  }
  report("open, list, close of /sys/bus/pci/devices", (now() - t) / n);
  t = now(); for (int i = 0; i < n; i++) if (readlink("/proc/self/ns/mnt", l, sizeof l) < 0) exit(1);
  report("readlink /proc/self/ns/mnt", (now() - t) / n);
  return 0;
}
C
cc -O2 -o "$T/cost" "$T/cost.c"
echo "file operations, mean of $N each (load $(cut -d' ' -f1 /proc/loadavg)):"
"$T/cost" "$N" "${cquota:-/proc/self/status}" "$T/regular"
