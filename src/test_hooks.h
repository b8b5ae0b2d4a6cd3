/* Hooks for the test suites only: not in the installed headers, not
 * exported by the shared library. The suites link the library's objects
 * (libflashcl_internal) and create contexts through fcl_context_create. */
#ifndef FLASHCL_TEST_HOOKS_H
#define FLASHCL_TEST_HOOKS_H

#include <stdbool.h>
#include <stddef.h>

#include "flashcl.h"

struct fcl_test_hooks {
    bool assume_tensor_cores;  /* claim tensor cores without the probe, so a device without them runs the
                                  tensor-core planning and the fallback after a failed build */
    bool emulate_tensor_cores;  /* with assume_tensor_cores: build the tensor-core kernels that have a
                                   plain-OpenCL emulation (-DNV_EMULATE=1, cl/nv_emulate.h) so they run here
                                   (PoCL); plan none of those that have none (TF32, backward) */
    bool assume_wgmma;  /* with assume_tensor_cores: plan the sm_90a route's kernels unprobed (emulated: built
                           with -DNV_EMULATE=1, not through the route) */
    int assume_compute_capability;  /* with assume_tensor_cores: e.g. 90 for sm_90 (architecture-specific shapes) */
    size_t gemm_limit;         /* elements one CLBlast GEMM may index (0: 2^31), to run the chunked path small */
    bool poison_workspace;     /* fill each new split-KV workspace with NaN bytes before its counters are zeroed, so
                                  a missing or unordered zeroing, or a partial read before it is written, shows */
};

/* flashcl_context_create with hooks (NULL: none). */
flashcl_status fcl_context_create(const struct flashcl_context_params *params, const struct fcl_test_hooks *hooks,
                                  flashcl_context **out);

#endif /* FLASHCL_TEST_HOOKS_H */
