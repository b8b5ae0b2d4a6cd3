/* Bad inputs: each returns its own status, names the argument in the
 * message, enqueues nothing and leaves the outputs as they were. */
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

#define N 16
#define H 2
#define D 8
#define ELEMS (N * H * D)

static cl_mem q, k, v, o, lse, small;
static cl_context other_cl;
static cl_mem foreign;

static cl_mem make_buffer(cl_context cl, size_t bytes, unsigned char fill)
{
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    memset(host, fill, bytes);
    cl_int err;
    cl_mem m = clCreateBuffer(cl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
    free(host);
    ck_assert_msg(m != NULL, "clCreateBuffer failed (%d)", err);
    return m;
}

static void setup(void)
{
    struct test_env *e = test_env_get();
    if (q)
        return;
    q = make_buffer(e->cl, ELEMS * 4, 0x3c);  /* finite nonzero floats */
    k = make_buffer(e->cl, ELEMS * 4, 0x3d);
    v = make_buffer(e->cl, ELEMS * 4, 0x3e);
    o = make_buffer(e->cl, ELEMS * 4, 0xff);  /* poison */
    lse = make_buffer(e->cl, N * H * 4, 0xff);
    small = make_buffer(e->cl, ELEMS * 4 - 4, 0x3c);
    cl_int err;
    other_cl = clCreateContext(NULL, 1, &e->device, NULL, NULL, &err);
    ck_assert_ptr_nonnull(other_cl);
    foreign = make_buffer(other_cl, ELEMS * 4, 0x3c);
}

static struct flashcl_attention valid(void)
{
    struct flashcl_attention a = {0};
    a.batch = 1;
    a.seq_q = a.seq_kv = N;
    a.heads_q = a.heads_kv = H;
    a.head_dim = D;
    a.q = flashcl_tensor_bnhd(q, FLASHCL_F32, N, H, D);
    a.k = flashcl_tensor_bnhd(k, FLASHCL_F32, N, H, D);
    a.v = flashcl_tensor_bnhd(v, FLASHCL_F32, N, H, D);
    a.o = flashcl_tensor_bnhd(o, FLASHCL_F32, N, H, D);
    a.lse = flashcl_tensor_lse(lse, N, H);
    return a;
}

/* Every byte of O and LSE still holds the poison. */
static void assert_outputs_untouched(void)
{
    struct test_env *e = test_env_get();
    ck_assert_cl(clFinish(e->queue));
    unsigned char host[ELEMS * 4];
    ck_assert_cl(clEnqueueReadBuffer(e->queue, o, CL_TRUE, 0, sizeof(host), host, 0, NULL, NULL));
    for (size_t i = 0; i < sizeof(host); i++)
        ck_assert_msg(host[i] == 0xff, "O byte %zu changed by a rejected call", i);
    ck_assert_cl(clEnqueueReadBuffer(e->queue, lse, CL_TRUE, 0, N * H * 4, host, 0, NULL, NULL));
    for (size_t i = 0; i < N * H * 4; i++)
        ck_assert_msg(host[i] == 0xff, "LSE byte %zu changed by a rejected call", i);
}

static void expect(const struct flashcl_attention *a, flashcl_status status, const char *needle)
{
    struct test_env *e = test_env_get();
    cl_event ev = (cl_event)(uintptr_t)1;  /* a rejected call does not touch *event */
    const flashcl_status st = flashcl_forward(e->ctx, a, e->queue, 0, NULL, &ev);
    ck_assert_ptr_eq(ev, (cl_event)(uintptr_t)1);
    ck_assert_msg(st == status, "returned %s, expected %s (%s)", flashcl_status_name(st),
                  flashcl_status_name(status), flashcl_last_error());
    ck_assert_msg(strstr(flashcl_last_error(), needle) != NULL, "message \"%s\" does not mention \"%s\"",
                  flashcl_last_error(), needle);
    assert_outputs_untouched();
}

START_TEST(null_pointers)
{
    struct test_env *e = test_env_get();
    struct flashcl_attention a = valid();
    ck_assert_status(flashcl_forward(NULL, &a, e->queue, 0, NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_status(flashcl_forward(e->ctx, NULL, e->queue, 0, NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_status(flashcl_forward(e->ctx, &a, NULL, 0, NULL, NULL), FLASHCL_ERROR_NULL_ARGUMENT);
    ck_assert_str_eq(flashcl_last_error(), "queue is NULL");
    a.k.mem = NULL;
    expect(&a, FLASHCL_ERROR_NULL_ARGUMENT, "attn.k.mem");
    a = valid();
    a.o.mem = NULL;
    expect(&a, FLASHCL_ERROR_NULL_ARGUMENT, "attn.o.mem");
    a = valid();
    ck_assert_status(flashcl_forward(e->ctx, &a, e->queue, 2, NULL, NULL), FLASHCL_INVALID_VALUE);
    assert_outputs_untouched();
}
END_TEST

START_TEST(bad_dims)
{
    struct flashcl_attention a;
    const char *names[] = {"batch", "seq_q", "seq_kv", "heads_q", "heads_kv", "head_dim"};
    for (int i = 0; i < 6; i++) {
        for (int bad = -1; bad <= 0; bad++) {
            a = valid();
            int *fields[] = {&a.batch, &a.seq_q, &a.seq_kv, &a.heads_q, &a.heads_kv, &a.head_dim};
            *fields[i] = bad;
            expect(&a, FLASHCL_ERROR_INVALID_SHAPE, names[i]);
        }
    }
    a = valid();
    a.head_dim = 257;
    expect(&a, FLASHCL_ERROR_INVALID_SHAPE, "head_dim = 257");
    a = valid();
    a.head_dim_v = -1;
    expect(&a, FLASHCL_ERROR_INVALID_SHAPE, "head_dim_v = -1");
    a.head_dim_v = 257;
    expect(&a, FLASHCL_ERROR_INVALID_SHAPE, "head_dim_v = 257");
    a.head_dim_v = a.head_dim * 2;  /* V and O then need rows twice as long as these buffers hold */
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.");
    a = valid();
    a.heads_q = 3;
    a.heads_kv = 2;
    expect(&a, FLASHCL_ERROR_INVALID_SHAPE, "heads_q = 3 is not a multiple of attn.heads_kv = 2");
}
END_TEST

START_TEST(bad_dtypes)
{
    struct flashcl_attention a = valid();
    a.v.dtype = FLASHCL_F16;
    expect(&a, FLASHCL_ERROR_INVALID_DTYPE, "attn.v.dtype");
    a = valid();
    a.q.dtype = (flashcl_dtype)42;
    expect(&a, FLASHCL_ERROR_INVALID_DTYPE, "attn.q.dtype = 42");
    a = valid();
    a.lse.dtype = FLASHCL_BF16;
    expect(&a, FLASHCL_ERROR_INVALID_DTYPE, "attn.lse.dtype");
}
END_TEST

START_TEST(out_of_bounds)
{
    struct flashcl_attention a = valid();
    a.k.mem = small;  /* one float short */
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.k reaches byte 1024 but its cl_mem holds 1020");
    a = valid();
    a.o.offset = 4;
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.o");
    a = valid();
    a.q.stride_seq += 1;
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.q");
    a = valid();
    a.batch = 2;
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.q");
    a = valid();
    a.lse.stride_head += 1;
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.lse");
}
END_TEST

START_TEST(overflow)
{
    struct flashcl_attention a = valid();
    a.v.stride_seq = SIZE_MAX / 4;
    expect(&a, FLASHCL_ERROR_OVERFLOW, "attn.v");
    a = valid();
    a.q.stride_head = SIZE_MAX / 2 + 1;
    expect(&a, FLASHCL_ERROR_OVERFLOW, "attn.q");
    a = valid();
    a.k.offset = SIZE_MAX - 3;
    expect(&a, FLASHCL_ERROR_OVERFLOW, "attn.k");
    a = valid();
    a.o.stride_seq = SIZE_MAX / (N - 1) / 4 + 1;  /* elements fit, bytes do not */
    expect(&a, FLASHCL_ERROR_OVERFLOW, "attn.o");
}
END_TEST

START_TEST(misaligned_and_scale)
{
    struct flashcl_attention a = valid();
    a.q.offset = 2;
    expect(&a, FLASHCL_ERROR_MISALIGNED, "attn.q.offset = 2");
    a = valid();
    a.scale = INFINITY;
    expect(&a, FLASHCL_ERROR_INVALID_SCALE, "attn.scale");
    a.scale = NAN;
    expect(&a, FLASHCL_ERROR_INVALID_SCALE, "attn.scale");
    a = valid();
    a.precision = (enum flashcl_precision)7;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.precision = 7");
    a = valid();
    a.mask = (enum flashcl_mask)3;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.mask = 3");
    a = valid();
    a.mask = FLASHCL_MASK_WINDOW;
    a.window_left = -2;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.window_left = -2");
    a = valid();
    a.window_right = 8;  /* without the window mask */
    expect(&a, FLASHCL_INVALID_VALUE, "need attn.mask = FLASHCL_MASK_WINDOW");
    a = valid();
    a.softcap = -1.0f;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.softcap = -1");
    a.softcap = NAN;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.softcap = nan");
    a.softcap = INFINITY;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.softcap = inf");
    /* Attention sinks: a vector of heads_q f32 inside its buffer, aligned, apart from the outputs. */
    a = valid();
    a.sinks = (flashcl_vector){lse, 2};
    expect(&a, FLASHCL_ERROR_MISALIGNED, "attn.sinks");
    a.sinks = (flashcl_vector){lse, (size_t)N * H * sizeof(float) - sizeof(float)};  /* the last float only */
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.sinks");
    a.sinks = (flashcl_vector){NULL, 16};
    expect(&a, FLASHCL_INVALID_VALUE, "attn.sinks.offset");
    a = valid();
    a.sinks = (flashcl_vector){o, 0};  /* inside O, which the call writes */
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.sinks");
    /* ALiBi's slopes: the same rules. */
    a = valid();
    a.alibi_slopes = (flashcl_vector){lse, 6};
    expect(&a, FLASHCL_ERROR_MISALIGNED, "attn.alibi_slopes");
    a.alibi_slopes = (flashcl_vector){lse, (size_t)N * H * sizeof(float) - sizeof(float)};
    expect(&a, FLASHCL_ERROR_OUT_OF_BOUNDS, "attn.alibi_slopes");
    a.alibi_slopes = (flashcl_vector){NULL, 4};
    expect(&a, FLASHCL_INVALID_VALUE, "attn.alibi_slopes.offset");
    a = valid();
    a.alibi_slopes = (flashcl_vector){o, 16};
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.alibi_slopes");
    a = valid();
    a.q.reserved[3] = 1;  /* room of a later version in a view */
    expect(&a, FLASHCL_INVALID_VALUE, "attn.q.reserved[3]");
    a = valid();
    a.reserved[5] = 1;
    expect(&a, FLASHCL_INVALID_VALUE, "attn.reserved[5]");
}
END_TEST

/* Only buffers, inputs readable, outputs writable (OpenCL leaves the rest undefined). */
START_TEST(buffer_kinds_and_access)
{
    struct test_env *e = test_env_get();
    size_t o_size = 0;
    ck_assert_cl(clGetMemObjectInfo(o, CL_MEM_SIZE, sizeof(o_size), &o_size, NULL));
    cl_int err;
    cl_mem read_only = clCreateBuffer(e->cl, CL_MEM_READ_ONLY, o_size, NULL, &err);
    cl_mem write_only = clCreateBuffer(e->cl, CL_MEM_WRITE_ONLY, o_size, NULL, &err);
    ck_assert_ptr_nonnull(read_only);
    ck_assert_ptr_nonnull(write_only);
    struct flashcl_attention a = valid();
    a.o.mem = read_only;
    expect(&a, FLASHCL_INVALID_MEM_OBJECT, "attn.o.mem is CL_MEM_READ_ONLY");
    a = valid();
    a.q.mem = write_only;
    a.q.offset = 0;
    expect(&a, FLASHCL_INVALID_MEM_OBJECT, "attn.q.mem is CL_MEM_WRITE_ONLY");
    clReleaseMemObject(read_only);
    clReleaseMemObject(write_only);
    cl_bool images = CL_FALSE;
    clGetDeviceInfo(e->device, CL_DEVICE_IMAGE_SUPPORT, sizeof(images), &images, NULL);
    if (images) {
        const cl_image_format format = {CL_R, CL_FLOAT};
        cl_image_desc desc;
        memset(&desc, 0, sizeof(desc));
        desc.image_type = CL_MEM_OBJECT_IMAGE2D;
        desc.image_width = 64;
        desc.image_height = 64;
        cl_mem image = clCreateImage(e->cl, CL_MEM_READ_WRITE, &format, &desc, NULL, &err);
        if (image) {
            a = valid();
            a.k.mem = image;
            a.k.offset = 0;
            a.k.stride_batch = a.k.stride_seq = a.k.stride_head = 0;
            expect(&a, FLASHCL_INVALID_MEM_OBJECT, "attn.k.mem is an image");
            clReleaseMemObject(image);
        }
    }
}
END_TEST

START_TEST(aliasing)
{
    struct flashcl_attention a = valid();
    a.o.mem = k;
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.o overlaps attn.k");
    a = valid();
    a.lse.mem = o;
    a.lse.offset = 0;
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.o overlaps attn.lse");
    a = valid();
    a.o.stride_seq = 0;  /* every row to the same place */
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.o's strides");

    /* Q and O interleaved in one buffer ([N, 2, H, D]) share no byte: accepted. One element closer, they do. */
    cl_mem pair = make_buffer(test_env_get()->cl, 2 * ELEMS * 4, 0x3c);
    a = valid();
    a.q.mem = a.o.mem = pair;
    a.q.stride_seq = a.o.stride_seq = 2 * H * D;
    a.o.offset = H * D * 4;
    struct flashcl_tile t;
    ck_assert_flashcl_ok(flashcl_forward_config(test_env_get()->ctx, &a, &t));
    a.o.offset -= 4;
    expect(&a, FLASHCL_ERROR_ALIASING, "attn.o overlaps attn.q");
    clReleaseMemObject(pair);
}
END_TEST

START_TEST(wrong_context)
{
    struct flashcl_attention a = valid();
    a.v.mem = foreign;
    expect(&a, FLASHCL_INVALID_CONTEXT, "attn.v.mem belongs to another cl_context");
    struct test_env *e = test_env_get();
    cl_int err;
    cl_command_queue foreign_queue = clCreateCommandQueue(other_cl, e->device, 0, &err);
    ck_assert_ptr_nonnull(foreign_queue);
    a = valid();
    ck_assert_status(flashcl_forward(e->ctx, &a, foreign_queue, 0, NULL, NULL), FLASHCL_INVALID_COMMAND_QUEUE);
    clReleaseCommandQueue(foreign_queue);
    assert_outputs_untouched();
}
END_TEST

START_TEST(valid_call_writes)
{
    /* The control: the same buffers with a valid call do change O. */
    struct test_env *e = test_env_get();
    struct flashcl_attention a = valid();
    cl_mem o2 = make_buffer(e->cl, ELEMS * 4, 0xff), lse2 = make_buffer(e->cl, N * H * 4, 0xff);
    a.o.mem = o2;
    a.lse.mem = lse2;  /* the shared O and LSE stay poisoned for the other tests */
    ck_assert_flashcl_ok(flashcl_forward(e->ctx, &a, e->queue, 0, NULL, NULL));
    float host[ELEMS];
    ck_assert_cl(clEnqueueReadBuffer(e->queue, o2, CL_TRUE, 0, sizeof(host), host, 0, NULL, NULL));
    for (int i = 0; i < ELEMS; i++)
        ck_assert_msg(host[i] == host[i], "O[%d] is NaN after a valid call", i);
    clReleaseMemObject(o2);
    clReleaseMemObject(lse2);
    ck_assert_str_eq(flashcl_last_error(), "");
    assert_outputs_untouched();
}
END_TEST

/* Random, mostly invalid, calls: never a crash, always a status, and a
 * rejected call leaves the outputs as they were. Valid ones may run. */
START_TEST(random_calls)
{
    struct test_env *e = test_env_get();
    rng_seed(2024);
    int rejected = 0, ran = 0;
    for (int i = 0; i < 3000; i++) {
        struct flashcl_attention a = valid();
        int *dims[] = {&a.batch, &a.seq_q, &a.seq_kv, &a.heads_q, &a.heads_kv, &a.head_dim};
        flashcl_tensor *views[] = {&a.q, &a.k, &a.v, &a.o, &a.lse};
        const int mutations = 1 + (int)rng_uniform(0, 4);
        for (int m = 0; m < mutations; m++) {
            const int what = (int)rng_uniform(0, 7);
            flashcl_tensor *t = views[(int)rng_uniform(0, 5)];
            const size_t big[] = {0, 1, 3, 7, 8, 64, 1000, (size_t)1 << 31, SIZE_MAX / 3, SIZE_MAX};
            switch (what) {
            case 0: *dims[(int)rng_uniform(0, 6)] = (int)rng_uniform(-3, 300); break;
            case 1: t->offset = big[(int)rng_uniform(0, 10)]; break;
            case 2: t->stride_seq = big[(int)rng_uniform(0, 10)]; break;
            case 3: t->stride_head = big[(int)rng_uniform(0, 10)]; break;
            case 4: t->dtype = (flashcl_dtype)(int)rng_uniform(0, 5); break;
            case 5: a.precision = (enum flashcl_precision)(int)rng_uniform(-1, 4); break;
            default: a.scale = rng_uniform(0, 1) < 0.5 ? NAN : (float)rng_uniform(-2, 2); break;
            }
        }
        cl_event ev = NULL;
        const flashcl_status st = flashcl_forward(e->ctx, &a, e->queue, 0, NULL, &ev);
        ck_assert_ptr_nonnull(flashcl_status_name(st));
        if (st == FLASHCL_SUCCESS) {
            ran++;
            ck_assert_cl(clWaitForEvents(1, &ev));
            clReleaseEvent(ev);
            /* It wrote O: put the poison back for the next rejected calls. */
            const unsigned char poison = 0xff;
            ck_assert_cl(clEnqueueFillBuffer(e->queue, o, &poison, 1, 0, ELEMS * 4, 0, NULL, NULL));
            ck_assert_cl(clEnqueueFillBuffer(e->queue, lse, &poison, 1, 0, N * H * 4, 0, NULL, NULL));
        } else {
            rejected++;
            ck_assert_ptr_null(ev);
            ck_assert_uint_gt(strlen(flashcl_last_error()), 0);
        }
        if (i % 500 == 0)
            assert_outputs_untouched();
    }
    assert_outputs_untouched();
    printf("random calls: %d rejected with a status, %d valid and run\n", rejected, ran);
    ck_assert_int_gt(rejected, 2000);
}
END_TEST

/* The standard path validates the same way. */
START_TEST(standard_path_validates)
{
    struct test_env *e = test_env_get();
    struct flashcl_attention a = valid();
    a.k.mem = small;
    ck_assert_status(flashcl_standard_forward(e->ctx, &a, NULL, e->queue, 0, NULL, NULL), FLASHCL_ERROR_OUT_OF_BOUNDS);
    a = valid();
    a.o.mem = v;
    ck_assert_status(flashcl_standard_forward(e->ctx, &a, NULL, e->queue, 0, NULL, NULL), FLASHCL_ERROR_ALIASING);
    a = valid();
    a.heads_q = 3;
    ck_assert_status(flashcl_standard_workspace_size(e->ctx, &a, &(size_t){0}), FLASHCL_ERROR_INVALID_SHAPE);
    assert_outputs_untouched();
}
END_TEST

START_TEST(status_names)
{
    ck_assert_str_eq(flashcl_status_name(FLASHCL_SUCCESS), "FLASHCL_SUCCESS");
    ck_assert_str_eq(flashcl_status_name(FLASHCL_ERROR_ALIASING), "FLASHCL_ERROR_ALIASING");
    ck_assert_str_eq(flashcl_status_name(FLASHCL_INVALID_MEM_OBJECT), "CL_INVALID_MEM_OBJECT");
    ck_assert_str_eq(flashcl_status_name((flashcl_status)-9999), "FLASHCL_UNKNOWN_STATUS");
    ck_assert_int_eq(FLASHCL_INVALID_VALUE, CL_INVALID_VALUE);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("errors");
    TCase *tc = tcase_create("validation");
    tcase_set_timeout(tc, 600);
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, null_pointers);
    tcase_add_test(tc, bad_dims);
    tcase_add_test(tc, bad_dtypes);
    tcase_add_test(tc, out_of_bounds);
    tcase_add_test(tc, overflow);
    tcase_add_test(tc, misaligned_and_scale);
    tcase_add_test(tc, aliasing);
    tcase_add_test(tc, buffer_kinds_and_access);
    tcase_add_test(tc, wrong_context);
    tcase_add_test(tc, valid_call_writes);
    tcase_add_test(tc, random_calls);
    tcase_add_test(tc, standard_path_validates);
    tcase_add_test(tc, status_names);
    suite_add_tcase(s, tc);
    const int rc = test_run_suite(s);
    return rc;
}
