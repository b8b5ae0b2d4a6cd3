/* The context's kept split-KV workspaces (src/workspace.c) through their
 * two internal calls, with user events standing for the commands that use
 * a buffer, so every state is made on purpose: which slot a request gets
 * (the smallest free one that fits, an unallocated one before a too-small
 * one is replaced, its own buffer when every slot is in use or the request
 * is larger than the context keeps), when a slot is free (its last use
 * complete, or on the asking call's own in-order queue), that a call which
 * enqueues nothing leaves a slot as busy as it found it, and that a last
 * use which cannot be tracked, or ended in an error, drops the slot.
 * test_decode runs split calls through them; test_threads from threads. */
#include <stdio.h>

#include "common.h"
#include "internal.h"

#define MB ((size_t)1 << 20)

/* A context of its own, so its slots start empty. */
static flashcl_context *fresh_context(void)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    return ctx;
}

static cl_event user_event(void)
{
    cl_int err;
    cl_event ev = clCreateUserEvent(test_env_get()->cl, &err);
    ck_assert_cl(err);
    return ev;
}

static size_t slot_bytes(const flashcl_context *ctx, int slot)
{
    return ctx->workspace[slot].mem ? ctx->workspace[slot].bytes : 0;
}

/* Released as used by a command whose event is `ev` (retained for the slot), on queue. */
static void release_used(flashcl_context *ctx, struct fcl_workspace *ws, cl_command_queue queue, cl_event ev)
{
    ck_assert_cl(clRetainEvent(ev));
    fcl_workspace_release(ctx, ws, queue, true, ev);
}

START_TEST(which_slot)
{
    flashcl_context *ctx = fresh_context();
    cl_command_queue q = test_env_get()->queue;
    struct fcl_workspace a, b, c, d, e;
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, q, &a));
    ck_assert_int_eq(a.slot, 0);
    ck_assert_uint_eq(slot_bytes(ctx, 0), MB);  /* sizes kept in powers of two from 1 MB */
    fcl_workspace_release(ctx, &a, q, false, NULL);
    /* Larger than slot 0: an unallocated slot, not slot 0 replaced. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 3 * MB, q, &b));
    ck_assert_int_eq(b.slot, 1);
    ck_assert_uint_eq(slot_bytes(ctx, 1), 4 * MB);
    ck_assert_uint_eq(slot_bytes(ctx, 0), MB);
    fcl_workspace_release(ctx, &b, q, false, NULL);
    /* The smallest that fits. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 2 * MB, q, &b));
    ck_assert_int_eq(b.slot, 1);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 10, q, &a));
    ck_assert_int_eq(a.slot, 0);
    /* Every slot in use: the rest get buffers of their own. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 10, q, &c));
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 10, q, &d));
    ck_assert_int_eq(c.slot, 2);
    ck_assert_int_eq(d.slot, 3);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 10, q, &e));
    ck_assert_int_eq(e.slot, -1);
    ck_assert_ptr_nonnull(e.mem);
    ck_assert(fcl_workspace_busy(ctx));
    fcl_workspace_release(ctx, &e, q, false, NULL);
    fcl_workspace_release(ctx, &d, q, false, NULL);
    fcl_workspace_release(ctx, &c, q, false, NULL);
    fcl_workspace_release(ctx, &a, q, false, NULL);
    /* Too large to keep. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, FCL_WORKSPACE_KEPT_BYTES + 1, q, &e));
    ck_assert_int_eq(e.slot, -1);
    fcl_workspace_release(ctx, &e, q, false, NULL);
    /* All free and too small: one replaced by a larger one. */
    fcl_workspace_release(ctx, &b, q, false, NULL);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 5 * MB, q, &b));
    ck_assert_int_ge(b.slot, 0);
    ck_assert_uint_eq(slot_bytes(ctx, b.slot), 8 * MB);
    fcl_workspace_release(ctx, &b, q, false, NULL);
    ck_assert(!fcl_workspace_busy(ctx));
    flashcl_context_destroy(&ctx);
}
END_TEST

START_TEST(when_free)
{
    struct test_env *env = test_env_get();
    flashcl_context *ctx = fresh_context();
    cl_int err;
    cl_command_queue q = env->queue, other = clCreateCommandQueue(env->cl, env->device, 0, &err);
    ck_assert_cl(err);
    struct fcl_workspace a, b;
    cl_event pending = user_event();

    /* Its last use pending on q: another queue's call gets another slot, a call on q shares it. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, q, &a));
    release_used(ctx, &a, q, pending);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, other, &b));
    ck_assert_int_eq(b.slot, 1);
    fcl_workspace_release(ctx, &b, other, false, NULL);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, q, &a));
    ck_assert_int_eq(a.slot, 0);
    /* That call enqueued nothing: the pending use on q still holds the slot against other queues. */
    fcl_workspace_release(ctx, &a, q, false, NULL);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, other, &b));
    ck_assert_msg(b.slot != 0, "a call that enqueued nothing freed a slot whose last use was pending");
    fcl_workspace_release(ctx, &b, other, false, NULL);
    /* Complete: free for any queue. */
    ck_assert_cl(clSetUserEventStatus(pending, CL_COMPLETE));
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, other, &b));
    ck_assert_int_eq(b.slot, 0);
    /* Ended in an error: the slot is dropped, its buffer released. */
    cl_event failed = user_event();
    release_used(ctx, &b, other, failed);
    ck_assert_cl(clSetUserEventStatus(failed, -1));
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, other, &b));
    ck_assert_int_eq(b.slot, 1);  /* the free one that fits; slot 0 emptied */
    ck_assert_ptr_null(ctx->workspace[0].mem);
    fcl_workspace_release(ctx, &b, other, false, NULL);
    /* Used, but no event to track it by: dropped, not handed out again. */
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, q, &a));
    ck_assert_int_eq(a.slot, 1);
    fcl_workspace_release(ctx, &a, q, true, NULL);
    ck_assert_ptr_null(ctx->workspace[1].mem);

    ck_assert(!fcl_workspace_busy(ctx));
    clReleaseEvent(pending);
    clReleaseEvent(failed);
    clReleaseCommandQueue(other);
    flashcl_context_destroy(&ctx);
}
END_TEST

/* A call's commands on an out-of-order queue are not ordered after the slot's last use there. */
START_TEST(out_of_order_queue_waits)
{
    bool out_of_order = false;
    cl_command_queue ooo = test_second_queue(&out_of_order);
    if (!out_of_order) {
        printf("out-of-order queue: not run, the device has none\n");
        clReleaseCommandQueue(ooo);
        return;
    }
    flashcl_context *ctx = fresh_context();
    struct fcl_workspace a, b;
    cl_event pending = user_event();
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, ooo, &a));
    release_used(ctx, &a, ooo, pending);
    ck_assert_flashcl_ok(fcl_workspace_acquire(ctx, 100, ooo, &b));
    ck_assert_msg(b.slot != 0, "an out-of-order queue's call shared a slot whose last use there was pending");
    fcl_workspace_release(ctx, &b, ooo, false, NULL);
    ck_assert_cl(clSetUserEventStatus(pending, CL_COMPLETE));
    clReleaseEvent(pending);
    clReleaseCommandQueue(ooo);
    flashcl_context_destroy(&ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("workspace");
    TCase *tc = tcase_create("kept split workspaces");
    tcase_add_test(tc, which_slot);
    tcase_add_test(tc, when_free);
    tcase_add_test(tc, out_of_order_queue_waits);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
