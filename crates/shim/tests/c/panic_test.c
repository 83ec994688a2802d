/* A panic inside a C ABI call must come back as -EIO, and the host program go on.
 * Linked to a build with the shim's `panic-test` feature; prints key=value lines for tests/c_abi_panic.rs. */
#include <errno.h>
#include <stdio.h>

#include "cpuplan.h"

/* Exported only with the panic-test feature; not in cpuplan.h. */
int cpuplan_test_panic(void);

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0); /* what was printed survives an abort */
    printf("before=1\n");
    int rc = cpuplan_test_panic();
    const char *e = cpuplan_last_error();
    printf("panic=%d\n", rc);
    printf("panic_error=%s\n", e ? e : "(null)");
    /* The library still answers after the panic. */
    printf("again=%d\n", cpuplan_test_panic());
    printf("missing=%d\n", cpuplan_load("/nonexistent/plan.json"));
    e = cpuplan_last_error();
    printf("missing_error=%s\n", e ? e : "(null)");
    printf("continued=1\n");
    return rc == -EIO ? 0 : 1;
}
