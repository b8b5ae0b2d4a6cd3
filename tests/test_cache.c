/* The on-disk program cache: a second process loads instead of compiling;
 * damaged, forged or foreign entries are rejected and rebuilt before the
 * driver sees them; the folder's key must be this user's alone; an unusable
 * folder only turns the cache off. Each "process start" is a real child process
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
#include "internal.h"

extern char **environ;
static const char *self_path;

struct build_counts {
    int built, loaded, driver_refused;
};

static void count_builds(void *user, enum flashcl_log_level level, const char *message)
{
    struct build_counts *c = user;
    (void)level;
    if (strstr(message, "built a program"))
        c->built++;
    if (strstr(message, "loaded a program from the cache"))
        c->loaded++;
    if (strstr(message, "the driver refused the binary"))
        c->driver_refused++;  /* a cache entry reached the driver: only ever one flashcl wrote */
}

/* Child: one forward call on a fresh context with the cache in dir; checks
 * the output against the reference itself. Exit: 1 built, 2 loaded, 3 wrong,
 * 6 built after the driver was handed an entry and refused it; killed by
 * SIGALRM if anything blocks for a minute (a FIFO read, say). */
static int child_main(const char *dir)
{
    alarm(60);
    struct build_counts counts = {0};
    struct flashcl_context_params p = {0};
    p.log_level = FLASHCL_LOG_DEBUG;
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
    a.mask = FLASHCL_MASK_CAUSAL;
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
            result = counts.driver_refused ? 6 : counts.loaded && !counts.built ? 2 : counts.built && !counts.loaded ? 1 : 5;
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

/* ---- entries and keys written by someone else ---- */

/* SipHash-2-4 against the reference implementation's vectors (veorq/SipHash,
 * vectors.h): key bytes 0..15, message i the bytes 0..i-1. */
START_TEST(siphash_reference_vectors)
{
    static const uint64_t expected[16] = {
        0x726fdb47dd0e0e31ull, 0x74f839c593dc67fdull, 0x0d6c8009d9a94f5aull, 0x85676696d7fb7e2dull,
        0xcf2794e0277187b7ull, 0x18765564cd99a68dull, 0xcbc9466e58fee3ceull, 0xab0200f58b01d137ull,
        0x93f5f5799a932462ull, 0x9e0082df0ba9e4b0ull, 0x7a5dbbc594ddb9f3ull, 0xf4b32f46226bada7ull,
        0x751e8fbc860ee5fbull, 0x14ea5627c0843d90ull, 0xf723ca908e7af2eeull, 0xa129ca6149be45e5ull,
    };
    unsigned char key[16], msg[16];
    for (int i = 0; i < 16; i++)
        key[i] = msg[i] = (unsigned char)i;
    for (int n = 0; n < 16; n++)
        ck_assert_msg(fcl_siphash24(key, msg, (size_t)n) == expected[n], "SipHash-2-4 of %d bytes: %016llx", n,
                      (unsigned long long)fcl_siphash24(key, msg, (size_t)n));
}
END_TEST

/* An entry's parts as cache.c lays them out: magic, key length, key text,
 * binary length, binary, MAC. */
struct entry {
    unsigned char *bytes;
    size_t size, key_len_at, bin_len_at, bin_at, bin_len;
};

static void entry_read(const char *path, struct entry *e)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    e->size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    e->bytes = malloc(e->size);
    ck_assert_uint_eq(fread(e->bytes, 1, e->size, f), e->size);
    fclose(f);
    e->key_len_at = strlen("FLASHCL-PROGRAM-CACHE 2\n");
    ck_assert_int_eq(memcmp(e->bytes, "FLASHCL-PROGRAM-CACHE 2\n", e->key_len_at), 0);
    uint64_t key_len, bin_len;
    memcpy(&key_len, e->bytes + e->key_len_at, 8);
    e->bin_len_at = e->key_len_at + 8 + (size_t)key_len;
    memcpy(&bin_len, e->bytes + e->bin_len_at, 8);
    e->bin_at = e->bin_len_at + 8;
    e->bin_len = (size_t)bin_len;
    ck_assert_uint_eq(e->bin_at + e->bin_len + 8, e->size);
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Rewrites e with its binary cut to bin_len bytes (byte `flip` of it
 * inverted when >= 0), the length field fixed up and the trailing 8 bytes
 * recomputed: mac_key NULL the old way (FNV-1a of everything before), else
 * SipHash-2-4 under mac_key. Consistent for any reader without the key. */
static void write_forged(const char *path, const struct entry *e, size_t bin_len, long flip,
                         const unsigned char *mac_key)
{
    const size_t size = e->bin_at + bin_len + 8;
    unsigned char *f = malloc(size);
    memcpy(f, e->bytes, e->bin_at + bin_len);
    const uint64_t len = bin_len;
    memcpy(f + e->bin_len_at, &len, 8);
    if (flip >= 0)
        f[e->bin_at + (size_t)flip] ^= 0xff;
    uint64_t sum = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < size - 8; i++)
        sum = (sum ^ f[i]) * 0x100000001b3ull;
    if (mac_key)
        sum = fcl_siphash24(mac_key, f, size - 8);
    memcpy(f + size - 8, &sum, 8);
    write_file(path, f, size);
    free(f);
}

/* The probe's finding: a checksum-consistent entry with a truncated binary
 * made PoCL abort. Forged entries (truncated or altered binaries with their
 * header fixed up and the old checksum, or a MAC under a guessed key) must be
 * rejected before the driver sees them and the program rebuilt; an entry
 * under another key (the key file replaced) likewise. */
START_TEST(forged_entries_never_reach_the_driver)
{
    char dir[512], path[1024], key_path[600];
    fresh_dir(dir, sizeof(dir), "forged");
    ck_assert_int_eq(run_child(dir), 1);
    entry_path(dir, path, sizeof(path));
    struct entry e;
    entry_read(path, &e);
    unsigned char guessed[16] = {0};
    const struct {
        const char *what;
        size_t bin_len;
        long flip;
        const unsigned char *mac_key;
    } forgeries[] = {
        {"binary cut to half, old checksum", e.bin_len / 2, -1, NULL},
        {"binary cut to 16 bytes, old checksum", 16, -1, NULL},
        {"binary cut by one byte, old checksum", e.bin_len - 1, -1, NULL},
        {"a byte of the binary inverted, old checksum", e.bin_len, (long)e.bin_len / 3, NULL},
        {"binary cut to half, MAC under an all-zero key", e.bin_len / 2, -1, guessed},
    };
    for (size_t i = 0; i < sizeof(forgeries) / sizeof(forgeries[0]); i++) {
        write_forged(path, &e, forgeries[i].bin_len, forgeries[i].flip, forgeries[i].mac_key);
        const int r = run_child(dir);
        ck_assert_msg(r == 1, "%s: child result %d (1: rejected before the driver and rebuilt)", forgeries[i].what, r);
        ck_assert_int_eq(run_child(dir), 2);  /* the rebuilt entry loads */
    }
    /* The valid entry, but the folder's key replaced: rejected and rebuilt under the new key. */
    write_file(path, e.bytes, e.size);
    ck_assert_int_eq(run_child(dir), 2);
    snprintf(key_path, sizeof(key_path), "%s/secret.key", dir);
    unsigned char other_key[16];
    for (int i = 0; i < 16; i++)
        other_key[i] = (unsigned char)(i * 37 + 11);
    ck_assert_int_eq(unlink(key_path), 0);
    write_file(key_path, other_key, sizeof(other_key));
    ck_assert_int_eq(chmod(key_path, 0600), 0);
    ck_assert_int_eq(run_child(dir), 1);
    ck_assert_int_eq(run_child(dir), 2);
    free(e.bytes);
    remove_dir(dir);
}
END_TEST

/* The key file is created once, mode 0600; one readable by others, a link
 * or a FIFO, or one of the wrong size turns the cache off (no entry is read
 * or written) without blocking. */
START_TEST(key_file_must_be_private)
{
    char dir[512], key_path[600], cmd[3000];
    fresh_dir(dir, sizeof(dir), "key");
    ck_assert_int_eq(run_child(dir), 1);
    snprintf(key_path, sizeof(key_path), "%s/secret.key", dir);
    struct stat st;
    ck_assert_int_eq(lstat(key_path, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(st.st_size, 16);
    ck_assert_int_eq(run_child(dir), 2);
    for (int how = 0; how < 4; how++) {
        snprintf(cmd, sizeof(cmd), "rm -f '%s'/*.bin '%s.copy'; cp -p '%s' '%s.copy'", dir, key_path, key_path, key_path);
        ck_assert_int_eq(system(cmd), 0);
        if (how == 0) {
            ck_assert_int_eq(chmod(key_path, 0644), 0);
        } else if (how == 1) {
            ck_assert_int_eq(unlink(key_path), 0);
            ck_assert_int_eq(symlink("secret.key.copy", key_path), 0);
        } else if (how == 2) {
            ck_assert_int_eq(unlink(key_path), 0);
            ck_assert_int_eq(mkfifo(key_path, 0600), 0);
        } else {
            ck_assert_int_eq(truncate(key_path, 8), 0);
        }
        ck_assert_msg(run_child(dir) == 1, "key damage %d: the cache was used", how);
        ck_assert_msg(run_child(dir) == 1, "key damage %d: an entry was written and loaded", how);
        /* Restored, the cache works again. */
        snprintf(cmd, sizeof(cmd), "rm -f '%s' && mv '%s.copy' '%s'", key_path, key_path, key_path);
        ck_assert_int_eq(system(cmd), 0);
        ck_assert_int_eq(run_child(dir), 1);
        ck_assert_int_eq(run_child(dir), 2);
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

/* ---- the entry fuzzer ---- */

/* One forward call on a fresh context (in this process) with the cache in
 * dir: O's bytes into o, and whether the program was loaded or built. */
static void fuzz_forward(const char *dir, unsigned char *o, size_t o_bytes, struct build_counts *counts)
{
    struct test_env *e = test_env_get();
    struct flashcl_context_params p = {0};
    p.context = e->cl;
    p.device = e->device;
    p.cache_dir = dir;
    p.tuning_file = "";
    p.portable_only = 1;
    p.log = count_builds;
    p.log_user = counts;
    p.log_level = FLASHCL_LOG_DEBUG;
    flashcl_context *ctx = NULL;
    ck_assert_flashcl_ok(flashcl_context_create(&p, &ctx));
    enum { N = 33, D = 16 };
    float q[N * D];
    rng_seed(77);
    for (int i = 0; i < N * D; i++)
        q[i] = (float)rng_uniform(-1, 1);
    cl_int err;
    cl_mem mq = clCreateBuffer(e->cl, CL_MEM_COPY_HOST_PTR, sizeof(q), q, &err);
    cl_mem mo = clCreateBuffer(e->cl, CL_MEM_READ_WRITE, o_bytes, NULL, &err);
    ck_assert(mq && mo);
    struct flashcl_attention a = {0};
    a.batch = a.heads_q = a.heads_kv = 1;
    a.seq_q = a.seq_kv = N;
    a.head_dim = D;
    a.q = a.k = a.v = flashcl_tensor_bnhd(mq, FLASHCL_F32, N, 1, D);
    a.o = flashcl_tensor_bnhd(mo, FLASHCL_F32, N, 1, D);
    a.mask = FLASHCL_MASK_CAUSAL;
    ck_assert_uint_eq(o_bytes, sizeof(q));
    ck_assert_flashcl_ok(flashcl_forward(ctx, &a, e->queue, 0, NULL, NULL));
    ck_assert_cl(clEnqueueReadBuffer(e->queue, mo, CL_TRUE, 0, o_bytes, o, 0, NULL, NULL));
    clReleaseMemObject(mq);
    clReleaseMemObject(mo);
    flashcl_context_destroy(&ctx);
}

static int fuzz_pick(int lo, int hi)
{
    return lo + (int)rng_uniform(0, hi - lo + 1 - 1e-9);
}

/* Mutates a copy of entry e into out (at most e->size + 64 bytes); returns its size. */
static size_t mutate(const struct entry *e, unsigned char *out, const char **how)
{
    memcpy(out, e->bytes, e->size);
    size_t size = e->size;
    const uint64_t lengths[] = {0, 1, 7, 8, e->bin_len - 1, e->bin_len + 1, e->bin_len / 2, UINT64_MAX,
                                (uint64_t)1 << 32, e->size};
    switch (fuzz_pick(0, 6)) {
    case 0:
        *how = "bits flipped";
        for (int n = fuzz_pick(1, 8); n > 0; n--) {
            const size_t at = (size_t)fuzz_pick(0, (int)size - 1);
            out[at] ^= (unsigned char)(1u << fuzz_pick(0, 7));
        }
        break;
    case 1:
        *how = "truncated";
        size = (size_t)fuzz_pick(0, (int)size - 1);
        break;
    case 2: {
        *how = "a length field changed";
        const uint64_t v = lengths[fuzz_pick(0, (int)(sizeof(lengths) / sizeof(lengths[0])) - 1)];
        memcpy(out + (fuzz_pick(0, 1) ? e->bin_len_at : e->key_len_at), &v, 8);
        break;
    }
    case 3:
        *how = "extended";
        for (int n = fuzz_pick(1, 64); n > 0; n--)
            out[size++] = (unsigned char)fuzz_pick(0, 255);
        break;
    case 4: {
        *how = "a run of random bytes";
        const size_t at = (size_t)fuzz_pick(0, (int)size - 1);
        for (size_t x = at; x < size && x < at + (size_t)fuzz_pick(1, 32); x++)
            out[x] = (unsigned char)fuzz_pick(0, 255);
        break;
    }
    case 5:
        *how = "the binary cut, its length fixed up";
        {
            const size_t keep = (size_t)fuzz_pick(0, (int)e->bin_len - 1);
            const uint64_t v = keep;
            memcpy(out + e->bin_len_at, &v, 8);
            memmove(out + e->bin_at + keep, e->bytes + e->bin_at + e->bin_len, 8);
            size = e->bin_at + keep + 8;
        }
        break;
    default:
        *how = "unchanged";
        break;
    }
    return size;
}

/* Real entries mutated N times (bit flips, truncation, length fields,
 * extension, random runs, a cut binary; sometimes left alone): every load
 * either rebuilds (any change) or uses the entry (no change), never crashes
 * or hangs, and O is the same bytes as without a cache every time.
 * Standalone: FLASHCL_FUZZ_ITERATIONS=N FLASHCL_FUZZ_SEED=S CK_RUN_CASE="entry fuzzer" build/tests/test_cache */
START_TEST(mutated_entries_rebuild_or_load)
{
    const char *n_env = getenv("FLASHCL_FUZZ_ITERATIONS"), *seed_env = getenv("FLASHCL_FUZZ_SEED");
    const long iterations = n_env && *n_env ? atol(n_env) : 60;
    const unsigned long long seed = seed_env && *seed_env ? strtoull(seed_env, NULL, 10) : 1;
    char dir[512], path[1024];
    fresh_dir(dir, sizeof(dir), "fuzz");
    enum { O_BYTES = 33 * 16 * 4 };
    unsigned char want[O_BYTES], got[O_BYTES];
    struct build_counts counts = {0};
    fuzz_forward("", want, sizeof(want), &counts);  /* no cache: the reference bytes */
    fuzz_forward(dir, got, sizeof(got), &counts);   /* stores the entry */
    ck_assert_int_eq(memcmp(want, got, sizeof(want)), 0);
    entry_path(dir, path, sizeof(path));
    struct entry e;
    entry_read(path, &e);
    unsigned char *m = malloc(e.size + 64);
    ck_assert_ptr_nonnull(m);
    long rebuilt = 0, loaded = 0;
    for (long it = 0; it < iterations; it++) {
        rng_seed(seed * 1000003ull + (unsigned long long)it);
        const char *how = NULL;
        const size_t size = mutate(&e, m, &how);
        const bool changed = size != e.size || memcmp(m, e.bytes, size) != 0;
        write_file(path, m, size);
        memset(&counts, 0, sizeof(counts));
        memset(got, 0, sizeof(got));
        fuzz_forward(dir, got, sizeof(got), &counts);
        ck_assert_msg(memcmp(want, got, sizeof(want)) == 0, "iteration %ld (%s): O differs", it, how);
        ck_assert_msg(counts.driver_refused == 0, "iteration %ld (%s): the driver was handed the entry", it, how);
        if (changed)
            ck_assert_msg(counts.built == 1 && counts.loaded == 0, "iteration %ld (%s): a changed entry was used", it,
                          how);
        else
            ck_assert_msg(counts.loaded == 1 && counts.built == 0, "iteration %ld: an intact entry was not used", it);
        rebuilt += counts.built;
        loaded += counts.loaded;
    }
    printf("cache entry fuzz: %ld mutated entries (seed %llu): %ld rebuilt, %ld loaded (unchanged), O the same bytes "
           "every time\n", iterations, seed, rebuilt, loaded);
    free(m);
    free(e.bytes);
    remove_dir(dir);
}
END_TEST

/* The sm_90a route's text step (src/program.c): marked comments become code, the target becomes sm_90a,
 * the rest stays byte for byte; PTX that is not the route's is refused. */
START_TEST(sm90a_patch_text)
{
    const char ptx[] = ".version 9.0\n.target sm_90, texmode_independent\n"
                       "\t// begin inline asm\n\t// @fcl-sm90a wgmma.fence.sync.aligned;\n\t// end inline asm\n"
                       "\tadd.s32 %r1, %r2, 3; // a comment\n\t// @fcl-sm90a { .reg .pred p; setp.ne.b32 p, %r4, 0; }";
    const char want[] = ".version 9.0\n.target sm_90a, texmode_independent\n"
                        "\t// begin inline asm\n\twgmma.fence.sync.aligned;\n\t// end inline asm\n"
                        "\tadd.s32 %r1, %r2, 3; // a comment\n\t{ .reg .pred p; setp.ne.b32 p, %r4, 0; }";
    size_t n = 0;
    char *got = fcl_sm90a_patch(ptx, strlen(ptx), &n);
    ck_assert_ptr_nonnull(got);
    ck_assert_str_eq(got, want);
    ck_assert_uint_eq(n, strlen(want));
    free(got);
    /* Only a prefix of the input counts: the marker cut off past `size` stays as it is. */
    got = fcl_sm90a_patch(ptx, strlen(ptx) - 60, &n);
    ck_assert_ptr_nonnull(got);
    ck_assert_uint_eq(n, strlen(ptx) - 60 + 1 - strlen("// @fcl-sm90a "));
    ck_assert_int_eq(memcmp(got, want, n), 0);
    free(got);
    const char *const refused[] = {
        ".version 9.0\n.target sm_80\n\t// @fcl-sm90a wgmma.fence.sync.aligned;\n",   /* another target */
        ".version 9.0\n.target sm_90a\n\t// @fcl-sm90a wgmma.fence.sync.aligned;\n",  /* already sm_90a */
        ".version 9.0\n.target sm_90\n\tadd.s32 %r1, %r2, 3;\n",                       /* no marker */
        "\t// @fcl-sm90a wgmma.fence.sync.aligned;\n",                                 /* no target line */
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
        ck_assert_ptr_null(fcl_sm90a_patch(refused[i], strlen(refused[i]), &n));
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
    tcase_add_test(tc, siphash_reference_vectors);
    tcase_add_test(tc, forged_entries_never_reach_the_driver);
    tcase_add_test(tc, key_file_must_be_private);
    tcase_add_test(tc, unusable_folder);
    tcase_add_test(tc, sm90a_patch_text);
    suite_add_tcase(s, tc);
    TCase *fuzz = tcase_create("entry fuzzer");
    tcase_set_timeout(fuzz, 86400);  /* long runs; meson's timeout bounds the default one */
    tcase_add_test(fuzz, mutated_entries_rebuild_or_load);
    suite_add_tcase(s, fuzz);
    return test_run_suite(s);
}
