/* The on-disk program cache: a second process loads instead of compiling;
 * damaged or foreign entries are rejected and rebuilt; an unusable folder
 * only turns the cache off. Each "process start" is a real child process
 * (this executable run with --child DIR), since OpenCL does not survive fork. */
#include <dirent.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

extern char **environ;
static const char *self_path;

struct build_counts {
    int built, loaded;
};

static void count_builds(void *user, enum flashcl_log_level level, const char *message)
{
    struct build_counts *c = user;
    (void)level;
    if (strstr(message, "built a program"))
        c->built++;
    if (strstr(message, "loaded a program from the cache"))
        c->loaded++;
}

/* Child: one forward call on a fresh context with the cache in dir; checks
 * the output against the reference itself. Exit: 1 built, 2 loaded, 3 wrong. */
static int child_main(const char *dir)
{
    struct build_counts counts = {0};
    struct flashcl_context_params p = {0};
    p.cache_dir = dir;
    p.log = count_builds;
    p.log_user = &counts;
    p.portable_only = 1;
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&p, &ctx) != FLASHCL_SUCCESS)
        return 4;
    cl_context cl = flashcl_context_cl_context(ctx);
    cl_int err;
    cl_command_queue queue = clCreateCommandQueue(cl, flashcl_context_device(ctx), 0, &err);
    enum { N = 33, D = 16 };
    float q[N * D], k[N * D], v[N * D], o[N * D];
    rng_seed(77);
    for (int i = 0; i < N * D; i++) {
        q[i] = (float)rng_uniform(-1, 1);
        k[i] = (float)rng_uniform(-1, 1);
        v[i] = (float)rng_uniform(-1, 1);
        o[i] = NAN;
    }
    cl_mem mq = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err);
    cl_mem mk = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof(k), k, &err);
    cl_mem mv = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof(v), v, &err);
    cl_mem mo = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof(o), o, &err);
    struct flashcl_attention a = {0};
    a.batch = a.heads_q = a.heads_kv = 1;
    a.seq_q = a.seq_kv = N;
    a.head_dim = D;
    a.q = flashcl_tensor_bnhd(mq, FLASHCL_F32, N, 1, D);
    a.k = flashcl_tensor_bnhd(mk, FLASHCL_F32, N, 1, D);
    a.v = flashcl_tensor_bnhd(mv, FLASHCL_F32, N, 1, D);
    a.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, N, 1, D);
    a.causal = 1;
    int result = 3;
    if (flashcl_forward(ctx, &a, queue, 0, NULL, NULL) == FLASHCL_SUCCESS &&
        clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, sizeof(o), o, 0, NULL, NULL) == CL_SUCCESS) {
        double qd[D], kd[N * D], vd[N * D], ref[D], lse, scratch[N], max_err = 0;
        for (int i = 0; i < N * D; i++) {
            kd[i] = k[i];
            vd[i] = v[i];
        }
        for (int row = 0; row < N; row++) {
            for (int e = 0; e < D; e++)
                qd[e] = q[row * D + e];
            hostref_attention_row(qd, kd, vd, N, D, 0.25, row, ref, &lse, scratch);
            for (int e = 0; e < D; e++)
                max_err = fmax(max_err, fabs(o[row * D + e] - ref[e]) + (isnan(o[row * D + e]) ? 1 : 0));
        }
        if (max_err < 1e-5)
            result = counts.loaded && !counts.built ? 2 : counts.built && !counts.loaded ? 1 : 5;
    }
    clReleaseMemObject(mq);
    clReleaseMemObject(mk);
    clReleaseMemObject(mv);
    clReleaseMemObject(mo);
    clReleaseCommandQueue(queue);
    flashcl_context_destroy(&ctx);
    return result;
}

static int run_child(const char *dir)
{
    char *argv[] = {(char *)self_path, "--child", (char *)dir, NULL};
    pid_t pid;
    ck_assert_int_eq(posix_spawn(&pid, self_path, NULL, NULL, argv, environ), 0);
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status), "child did not exit normally");
    return WEXITSTATUS(status);
}

static void remove_dir(const char *dir)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void fresh_dir(char *dir, size_t size, const char *name)
{
    snprintf(dir, size, "/tmp/flashcl-cache-test-%ld-%s", (long)getpid(), name);
    remove_dir(dir);
}

/* The one entry file in dir. */
static void entry_path(const char *dir, char *path, size_t size)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int found = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strlen(e->d_name) > 4 && strcmp(e->d_name + strlen(e->d_name) - 4, ".bin") == 0) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    ck_assert_int_eq(found, 1);
}

START_TEST(second_process_loads)
{
    char dir[512];
    fresh_dir(dir, sizeof(dir), "hit");
    ck_assert_int_eq(run_child(dir), 1);  /* compiles and stores */
    ck_assert_int_eq(run_child(dir), 2);  /* loads, does not compile, same results */
    ck_assert_int_eq(run_child(dir), 2);
    remove_dir(dir);
}
END_TEST

/* Damage the stored entry in several ways: each is rejected, rebuilt (with
 * correct results), and the rebuilt entry loads next time. */
static void damage(const char *path, int how)
{
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    const long size = ftell(f);
    fclose(f);
    if (how == 0) {  /* truncated */
        ck_assert_int_eq(truncate(path, size / 2), 0);
    } else if (how == 1) {  /* one byte flipped in the binary */
        f = fopen(path, "r+b");
        fseek(f, size - 20, SEEK_SET);
        const int c = fgetc(f);
        fseek(f, size - 20, SEEK_SET);
        fputc(c ^ 0x5a, f);
        fclose(f);
    } else if (how == 2) {  /* random bytes */
        f = fopen(path, "wb");
        rng_seed(3);
        for (int i = 0; i < 4096; i++)
            fputc((int)rng_uniform(0, 256), f);
        fclose(f);
    } else if (how == 4) {  /* a FIFO: reading it would block forever */
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(mkfifo(path, 0600), 0);
    } else if (how == 5) {  /* a link to a copy of a valid entry: not followed */
        char copy[1100], cmd[2400];
        snprintf(copy, sizeof(copy), "%s.copy", path);
        snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", path, copy);
        ck_assert_int_eq(system(cmd), 0);
        ck_assert_int_eq(unlink(path), 0);
        ck_assert_int_eq(symlink(copy, path), 0);
    } else {  /* a valid-looking entry for another key: the key text changed */
        f = fopen(path, "r+b");
        char head[64];
        ck_assert_uint_gt(fread(head, 1, sizeof(head), f), 40);
        fseek(f, 40, SEEK_SET);
        fputc(head[40] ^ 1, f);
        fclose(f);
    }
}

START_TEST(damaged_entries_rebuild)
{
    char dir[512], path[1024];
    fresh_dir(dir, sizeof(dir), "damage");
    ck_assert_int_eq(run_child(dir), 1);
    entry_path(dir, path, sizeof(path));
    for (int how = 0; how < 6; how++) {
        damage(path, how);
        ck_assert_msg(run_child(dir) == 1, "damage %d: the entry was not rejected and rebuilt", how);
        ck_assert_msg(run_child(dir) == 2, "damage %d: the rebuilt entry did not load", how);
    }
    remove_dir(dir);
}
END_TEST

START_TEST(unusable_folder)
{
    /* A path below a regular file can never be a folder. */
    char file[512], dir[600];
    snprintf(file, sizeof(file), "/tmp/flashcl-cache-test-%ld-file", (long)getpid());
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(dir, sizeof(dir), "%s/sub", file);
    ck_assert_int_eq(run_child(dir), 1);  /* works, compiles */
    ck_assert_int_eq(run_child(dir), 1);  /* and compiles again: no cache */
    ck_assert_int_eq(run_child(""), 1);   /* "" turns it off */
    ck_assert_int_eq(run_child(""), 1);
    remove(file);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--child") == 0)
        return child_main(argv[2]);
    self_path = argv[0];
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("program cache");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, second_process_loads);
    tcase_add_test(tc, damaged_entries_rebuild);
    tcase_add_test(tc, unusable_folder);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
