/* Exercises include/cpuplan.h from C; prints key=value lines that tests/c_abi.rs checks.
 * usage: abi_test PLAN_JSON */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "cpuplan.h"

static void print_cpus(const char *key) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        printf("%s=error\n", key);
        return;
    }
    printf("%s=", key);
    const char *sep = "";
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            printf("%s%d", sep, c);
            sep = ",";
        }
    printf("\n");
}

static void warm(void *arg) { print_cpus((const char *)arg); }

static void *helper(void *arg) {
    (void)arg;
    print_cpus("helper_before");
    printf("to_process_mask=%d\n", cpuplan_to_process_mask());
    print_cpus("helper_after");
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    const char *e;
    printf("early_pin=%d\n", cpuplan_pin_worker(0) == -ENOENT);
    e = cpuplan_last_error();
    printf("early_error=%s\n", e ? e : "(null)");
    printf("missing=%d\n", cpuplan_load("/nonexistent/plan.json") == -ENOENT);
    e = cpuplan_last_error();
    printf("missing_error=%s\n", e ? e : "(null)");

    printf("load=%d\n", cpuplan_load(argv[1]));
    printf("error_after_ok=%s\n", cpuplan_last_error() ? "set" : "(null)");
    printf("usable=%d\nleft=%d\nworkers=%d\n", cpuplan_usable(), cpuplan_left(), cpuplan_workers());
    printf("threads=%d,%d,%d\n", cpuplan_threads(-1), cpuplan_threads(1), cpuplan_threads(-2) < 0);

    printf("pin_worker0=%d\n", cpuplan_pin_worker_warm(0, warm, "warm"));
    print_cpus("main");
    printf("why0=%s\n", cpuplan_last_why());

    pthread_t t;
    pthread_create(&t, NULL, helper, NULL);
    pthread_join(t, NULL);

    printf("pin_worker1=%d\n", cpuplan_pin_worker(1));
    printf("why1=%s\n", cpuplan_last_why());
    print_cpus("main_after_unpinned");

    printf("pin_negative=%d\n", cpuplan_pin_worker(-1) == -EINVAL);
    e = cpuplan_last_error();
    printf("negative_error=%s\n", e ? e : "(null)");

    printf("pin_result=%d\n", cpuplan_pin_result());
    print_cpus("result");
    return 0;
}
