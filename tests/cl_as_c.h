/* What a cl/ header needs of OpenCL C to compile as C in a test (tests/test_exp2_poly.c, tests/test_fp8.c):
 * OpenCL's uint and its as_float, as_uint and clz, on host C's IEEE binary32. */
#ifndef FLASHCL_TESTS_CL_AS_C_H
#define FLASHCL_TESTS_CL_AS_C_H

#include <stdint.h>
#include <string.h>

typedef uint32_t uint;

static inline float as_float(uint i)
{
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

static inline uint as_uint(float f)
{
    uint i;
    memcpy(&i, &f, sizeof i);
    return i;
}

static inline uint clz(uint x)
{
    return x ? (uint)__builtin_clz(x) : 32u;
}

#endif
