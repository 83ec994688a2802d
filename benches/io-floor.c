/* benches/io-floor.c: the hook's file operations alone, for benches/io-floor.sh.
 *
 * `io-floor create` and `io-floor poststop` make, in the hook's order and with its flags and
 * sizes, the system calls cpuplan-hook makes at createRuntime and poststop on the prepared
 * container of benches/common.sh (as `strace` of the hook shows them: benches/hook-strace.sh),
 * with no parsing, planning or formatting: what the kernel's side of a start costs on this
 * machine. `io-floor none` only exits (the program's own start). Paths come from the
 * environment (io-floor.sh sets them); a call that fails where the hook's succeeds stops the
 * program with status 1 and the call's name, so a drifted path cannot pass for a fast one.
 * Built static (`cc -O2 -static`), so no dynamic loader runs.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char buf[16384];

static void die(const char *what) {
  fprintf(stderr, "io-floor: %s: %s\n", what, strerror(errno));
  exit(1);
}

static const char *env(const char *name) {
  const char *v = getenv(name);
  if (!v) { fprintf(stderr, "io-floor: %s is not set\n", name); exit(2); }
  return v;
}

static void read_stdin(void) {
  while (read(0, buf, 4096) > 0) {}
}

/* open, fstat, read the size, close (the hook config, the bundle, the inventory file). */
static void read_sized(const char *path, int flags) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | flags);
  if (fd < 0) die(path);
  if (fstat(fd, &st) < 0) die("fstat");
  size_t want = (size_t)st.st_size + 1 < sizeof buf ? (size_t)st.st_size + 1 : sizeof buf;
  if (read(fd, buf, want) < 0) die(path);
  close(fd);
}

/* open, one read, close (a record: sysfs, procfs, cgroupfs files). */
static void read_record(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die(path);
  if (read(fd, buf, 4096) < 0) die(path);
  close(fd);
}

/* open, fstat, list to the end, close. */
static void list_dir(const char *path, size_t size) {
  struct stat st;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_DIRECTORY);
  if (fd < 0) die(path);
  if (fstat(fd, &st) < 0) die("fstat");
  while (syscall(SYS_getdents64, fd, buf, size) > 0) {}
  close(fd);
}

static int open_log(void) {
  struct stat st;
  int fd = open(env("IOF_LOG"), O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) die("log");
  if (fstat(fd, &st) < 0) die("fstat");
  return fd;
}

static void log_line(int fd, size_t n) {
  memset(buf, 'x', n);
  buf[n - 1] = '\n';
  if (write(fd, buf, n) < 0) die("write log");
  if (write(2, buf, n) < 0) die("write stderr");
}

static int lock_claims(char *path, size_t size) {
  struct stat st;
  snprintf(path, size, "%s/.lock", env("IOF_CLAIMS"));
  int fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) die("lock");
  if (fstat(fd, &st) < 0) die("fstat");
  if (flock(fd, LOCK_EX | LOCK_NB) < 0) die("flock");
  return fd;
}

static void create(void) {
  char path[4096], tmp[4096];
  const char *topo = env("IOF_TOPO"), *pid = env("IOF_PID"), *cg = env("IOF_CG");
  read_stdin();
  read_sized(env("IOF_CONFIG"), 0);
  int log = open_log();
  /* The inventory's stamp. */
  snprintf(path, sizeof path, "%s/sys/devices/system/cpu/online", topo);
  read_record(path);
  snprintf(path, sizeof path, "%s/sys/bus/pci/devices", topo);
  list_dir(path, 8192);
  snprintf(path, sizeof path, "%s/proc/driver/nvidia/gpus", topo);
  list_dir(path, 8192);
  read_record("/sys/devices/system/cpu/online");
  if (readlink("/proc/self/ns/mnt", buf, 256) < 0) die("readlink ns/mnt");
  /* The inventory file. */
  struct stat st;
  const char *inv = env("IOF_INVENTORY"), *invdir = env("IOF_INVENTORY_DIR");
  (void)geteuid();
  if (lstat(invdir, &st) < 0) die(invdir);
  snprintf(path, sizeof path, "%s/..", invdir);
  if (stat(path, &st) < 0) die(path);
  read_sized(inv, O_NOFOLLOW | O_NOCTTY);
  read_record("/proc/sys/kernel/random/boot_id");
  /* The bundle, the rootfs, the container's /dev. */
  read_sized(env("IOF_BUNDLE_CONFIG"), 0);
  if (stat(env("IOF_ROOTFS"), &st) < 0) die("rootfs");
  snprintf(path, sizeof path, "/proc/%s", pid);
  int proc = open(path, O_RDONLY | O_CLOEXEC | O_PATH | O_DIRECTORY);
  if (proc < 0) die(path);
  if (readlinkat(proc, "ns/mnt", buf, 4096) < 0) die("readlinkat ns/mnt");
  int root = openat(proc, "root", O_RDONLY | O_CLOEXEC | O_PATH | O_DIRECTORY);
  if (root < 0) die("root");
  close(proc);
  struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_PATH | O_DIRECTORY,
                         .resolve = RESOLVE_NO_MAGICLINKS | RESOLVE_IN_ROOT};
  int rootfs = syscall(SYS_openat2, root, env("IOF_ROOTFS") + 1, &how, sizeof how);
  if (rootfs < 0) die("openat2 rootfs");
  close(root);
  int dev = openat(rootfs, "dev", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECTORY);
  if (dev >= 0) close(dev);
  /* The container's cgroup, quota and mask. */
  snprintf(path, sizeof path, "/proc/%s/cgroup", pid);
  read_record(path);
  snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", cg);
  read_record(path);
  snprintf(path, sizeof path, "%s/cpu.cfs_period_us", cg);
  read_record(path);
  snprintf(path, sizeof path, "%s/../cpu.cfs_quota_us", cg);
  read_record(path);
  read_record("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
  cpu_set_t set;
  if (sched_getaffinity(atoi(pid), sizeof set, &set) < 0) die("sched_getaffinity");
  snprintf(path, sizeof path, "/proc/%s/stat", pid);
  read_record(path);
  if (readlink("/proc/self/ns/pid", buf, 256) < 0) die("readlink ns/pid");
  /* The claim. */
  int lock = lock_claims(path, sizeof path);
  snprintf(path, sizeof path, "%s/%s.json", env("IOF_CLAIMS"), env("IOF_GPU"));
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) close(fd);
  snprintf(tmp, sizeof tmp, "%s/.%s.json.tmp", env("IOF_CLAIMS"), env("IOF_GPU"));
  fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) die("claim tmp");
  memset(buf, ' ', 164);
  if (write(fd, buf, 164) < 0) die("write claim");
  if (rename(tmp, path) < 0) die("rename claim");
  close(fd);
  flock(lock, LOCK_UN);
  close(lock);
  /* The plan files. */
  umask(022);
  int run = openat(rootfs, "run", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECTORY);
  if (run < 0) die("run");
  if (mkdirat(run, "cpuplan", 0755) < 0 && errno != EEXIST) die("mkdirat");
  int dir = openat(run, "cpuplan", O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_DIRECTORY);
  if (dir < 0) die("cpuplan dir");
  close(run);
  (void)getpid();
  static const struct { const char *tmp, *name; size_t size; } files[] = {
    {".plan.json.tmp", "plan.json", 789}, {".plan.env.tmp", "plan.env", 757}};
  for (int i = 0; i < 2; i++) {
    fd = openat(dir, files[i].tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) die(files[i].tmp);
    memset(buf, '#', files[i].size);
    if (write(fd, buf, files[i].size) < 0) die("write plan");
    close(fd);
  }
  for (int i = 0; i < 2; i++)
    if (renameat(dir, files[i].tmp, dir, files[i].name) < 0) die("renameat");
  if (fstat(rootfs, &st) < 0 || fstat(dir, &st) < 0) die("fstat");
  close(dir);
  log_line(log, 354);
  close(rootfs);
}

static void poststop(void) {
  char path[4096];
  read_stdin();
  read_sized(env("IOF_CONFIG"), 0);
  int log = open_log();
  int lock = lock_claims(path, sizeof path);
  list_dir(env("IOF_CLAIMS"), 2048);
  snprintf(path, sizeof path, "%s/%s.json", env("IOF_CLAIMS"), env("IOF_GPU"));
  read_sized(path, 0);
  if (readlink("/proc/self/ns/pid", buf, 256) < 0) die("readlink ns/pid");
  char stat[64];
  snprintf(stat, sizeof stat, "/proc/%s/stat", env("IOF_PID"));
  read_record(stat);
  if (unlink(path) < 0) die("unlink claim");
  flock(lock, LOCK_UN);
  close(lock);
  (void)getpid();
  log_line(log, 123);
  snprintf(path, sizeof path, "%s/../hostplans/.hostplan.none", env("IOF_CLAIMS"));
  unlink(path);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "create")) create();
  else if (!strcmp(mode, "poststop")) poststop();
  else if (strcmp(mode, "none")) { fprintf(stderr, "usage: io-floor create|poststop|none\n"); return 2; }
  return 0;
}
