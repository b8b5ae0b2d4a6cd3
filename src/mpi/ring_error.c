/* The ring's messages: a per-thread last error, as the core's flashcl_last_error. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "ring_internal.h"

static _Thread_local char last_error[1024];

flashcl_status fcl_ring_fail(flashcl_status status, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof(last_error), format, args);
    va_end(args);
    return status;
}

flashcl_status fcl_ring_fail_core(flashcl_status status, const char *what)
{
    return fcl_ring_fail(status, "%s: %s (%s)", what, flashcl_last_error(), flashcl_status_name(status));
}

void fcl_ring_clear_error(void)
{
    last_error[0] = '\0';
}

const char *flashcl_ring_last_error(void)
{
    return last_error;
}

const char *flashcl_ring_status_name(flashcl_status status)
{
    if (status == FLASHCL_RING_ERROR_PEER)
        return "FLASHCL_RING_ERROR_PEER";
    if (status == FLASHCL_RING_ERROR_MPI)
        return "FLASHCL_RING_ERROR_MPI";
    return flashcl_status_name(status);
}

double fcl_ring_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
