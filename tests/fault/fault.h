/* Fault injection for the test suites: every OpenCL call, CLBlast call and
 * host allocation the library makes goes through a wrapper (linked with
 * -Wl,--wrap, tests/meson.build's fault_wrapped list) that calls the real
 * function, except the one call chosen to fail. Only calls made while armed
 * are counted, so a test arms around one library call; the library is
 * linked statically into the test, so the counted calls are flashcl's own
 * (PoCL's and CLBlast's internal calls are not wrapped). OpenCL objects
 * created, retained and released while armed are tracked, so a test can
 * check that the library released what it made and nothing of the caller's. */
#ifndef FLASHCL_TESTS_FAULT_H
#define FLASHCL_TESTS_FAULT_H

#include <stdbool.h>

/* Counts wrapped calls from now; call number fail_at (1-based) fails as the
 * real one would when out of resources or memory (CL_OUT_OF_RESOURCES, NULL
 * with errno ENOMEM, ...). 0: none fails, the calls are only counted. */
void fault_arm(long fail_at);

struct fault_report {
    long calls;              /* wrapped calls made while armed */
    bool fired;              /* the chosen call was reached and failed */
    const char *failed;      /* its function's name, or NULL */
    long enqueued_before;    /* kernels enqueued (successfully) before it failed */
};
struct fault_report fault_disarm(void);

/* OpenCL objects whose references, taken while armed or on objects made
 * while armed, are not all released: leaks when positive, releases of
 * references the library never took when negative. Returns their number
 * and names the first in *what. */
int fault_unbalanced_objects(const char **what);
/* Forgets every tracked object (between cases). */
void fault_reset_objects(void);

#endif
