/* cpuplan.h: the C ABI of cpuplan-shim (crates/shim/src/ffi.rs), hand-written to match it.
 *
 * Link with -lcpuplan_shim (libcpuplan_shim.so), or libcpuplan_shim.a plus
 * -lpthread -ldl -lm -lgcc_s -lc.
 *
 * Every function returns 0 (or a count) on success and a negative errno on failure
 * (-ENOENT: no plan; -EINVAL: a malformed plan or CPUs outside the process mask;
 * the kernel's errno when it refuses an affinity change; -EIO: an internal error,
 * a panic caught inside the call). The failure's message is then in cpuplan_last_error().
 * Nothing unwinds out of these functions, and a panic does not abort the process: the
 * library is built with panics unwinding, as every profile of the workspace does
 * (a build with panic = "abort" would lose that).
 *
 * The process mask is the loaded plan's mask; with no plan loaded, the affinity of
 * the thread that first called into the library.
 */
#ifndef CPUPLAN_H
#define CPUPLAN_H

#ifdef __cplusplus
extern "C" {
#endif

/* Load and install the plan at path; NULL: $CPUPLAN_PLAN, else /run/cpuplan/plan.json,
 * else the CPUPLAN_* variables of plan.env. -ENOENT when there is none: run unpinned. */
int cpuplan_load(const char *path);

/* Pin the calling thread to worker's CPUs: back to the process mask, then onto them.
 * 0 also when the plan leaves the worker unpinned (nothing changes; see cpuplan_last_why). */
int cpuplan_pin_worker(int worker);

/* cpuplan_pin_worker, calling warm(arg) on the process mask just before the move
 * (start the thread's intra-op pool there with one op as wide as the pool). warm may be NULL. */
int cpuplan_pin_worker_warm(int worker, void (*warm)(void *), void *arg);

/* Pin the calling thread to the API server's result CPUs; 0 also when the plan leaves them unpinned. */
int cpuplan_pin_result(void);

/* Move the calling thread onto the process mask (call it first in any thread a pinned thread starts). */
int cpuplan_to_process_mask(void);

/* The loaded plan's usable CPU count (what the quota lets run), or a negative errno. */
int cpuplan_usable(void);

/* The loaded plan's CPUs left for pools (usable less pinned), or a negative errno. */
int cpuplan_left(void);

/* How many workers the loaded plan lists, or a negative errno. */
int cpuplan_workers(void);

/* The intra-op threads of worker's process (worker >= 0), or of the API server (worker -1),
 * under the loaded plan: its share of the CPUs left where each worker runs in its own process
 * (what OMP_NUM_THREADS holds for it), or a negative errno. */
int cpuplan_threads(int worker);

/* The message of this thread's last failed call, or NULL if it succeeded; valid until
 * this thread's next call into the library. */
const char *cpuplan_last_error(void);

/* What this thread's last successful pin call did ("pinned to cpus 3 (...)" or
 * "left unpinned: ..."), or NULL; valid until this thread's next pin call. */
const char *cpuplan_last_why(void);

#ifdef __cplusplus
}
#endif

#endif /* CPUPLAN_H */
