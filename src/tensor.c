/* dtypes and the helpers that build contiguous tensor views. */
#include "internal.h"

size_t flashcl_dtype_size(flashcl_dtype dtype)
{
    switch (dtype) {
    case FLASHCL_F32:
        return 4;
    case FLASHCL_F16:
    case FLASHCL_BF16:
        return 2;
    case FLASHCL_E4M3:
        return 1;
    }
    return 0;
}

flashcl_tensor flashcl_tensor_bnhd(cl_mem mem, flashcl_dtype dtype, size_t seq, size_t heads,
                                   size_t dim)
{
    flashcl_tensor t = {0};
    t.mem = mem;
    t.dtype = dtype;
    t.stride_head = dim;
    t.stride_seq = heads * dim;
    t.stride_batch = seq * heads * dim;
    return t;
}

flashcl_tensor flashcl_tensor_bhnd(cl_mem mem, flashcl_dtype dtype, size_t seq, size_t heads,
                                   size_t dim)
{
    flashcl_tensor t = {0};
    t.mem = mem;
    t.dtype = dtype;
    t.stride_seq = dim;
    t.stride_head = seq * dim;
    t.stride_batch = heads * seq * dim;
    return t;
}

flashcl_tensor flashcl_tensor_lse(cl_mem mem, size_t seq, size_t heads)
{
    return flashcl_tensor_bhnd(mem, FLASHCL_F32, seq, heads, 1);
}

const char *flashcl_dtype_name(flashcl_dtype dtype)
{
    return dtype == FLASHCL_F32 ? "f32" : dtype == FLASHCL_F16 ? "f16" : dtype == FLASHCL_BF16 ? "bf16"
           : dtype == FLASHCL_E4M3 ? "e4m3" : NULL;
}

const char *flashcl_version(void)
{
    return FLASHCL_VERSION_STRING;
}

int flashcl_api_version(void)
{
    return FLASHCL_API_VERSION;
}

/* The public structs' sizes are part of the ABI (docs/design.md): new fields
 * take reserved bytes, never grow them. Checked where the sizes are known. */
#if defined(__LP64__) && (defined(__x86_64__) || defined(__aarch64__))
_Static_assert(sizeof(flashcl_tensor) == 64, "flashcl_tensor changed size");
_Static_assert(sizeof(struct flashcl_context_params) == 152, "flashcl_context_params changed size");
_Static_assert(sizeof(struct flashcl_attention) == 488, "flashcl_attention changed size");
_Static_assert(sizeof(struct flashcl_attention_grad) == 320, "flashcl_attention_grad changed size");
_Static_assert(sizeof(struct flashcl_tile) == 72, "flashcl_tile changed size");
_Static_assert(sizeof(struct flashcl_tuned_config) == 80, "flashcl_tuned_config changed size");
_Static_assert(sizeof(struct flashcl_kernel_info) == 88, "flashcl_kernel_info changed size");
#endif

int fcl_dtype_define(flashcl_dtype dtype)
{
    return dtype == FLASHCL_F32 ? 0 : dtype == FLASHCL_F16 ? 1 : dtype == FLASHCL_BF16 ? 2 : 3;  /* cl/storage.h's */
}
