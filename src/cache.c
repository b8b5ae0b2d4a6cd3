/* The on-disk program cache: compiled binaries keyed by everything that
 * decides them (source, options, device, driver, platform, flashcl version),
 * so a second process start does not recompile. Entries are written to a
 * temporary file and renamed; an entry that is truncated, corrupted or for
 * another key is rejected and rebuilt; an unusable folder turns the cache
 * off without a word above DEBUG. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define CACHE_MAGIC "FLASHCL-PROGRAM-CACHE 1\n"
#define CACHE_MAX_FILE ((size_t)256 << 20)

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
#define FNV_START 0xcbf29ce484222325ull

/* mkdir -p; true if the folder exists and is writable afterwards. */
static bool make_dirs(const char *path)
{
    char buf[1024];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
        return false;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return false;
            *p = '/';
        }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return false;
    return access(buf, W_OK | X_OK) == 0;
}

void fcl_cache_init(flashcl_context *ctx, const char *param_dir)
{
    ctx->cache_dir[0] = '\0';
    const char *dir = param_dir ? param_dir : ctx->env.cache_dir ? ctx->env.cache_dir : ctx->env.user_cache;
    if (!*dir || strcmp(dir, "off") == 0)
        return;
    if (!make_dirs(dir)) {
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "program cache off: cannot use folder %s", dir);
        return;
    }
    snprintf(ctx->cache_dir, sizeof(ctx->cache_dir), "%s", dir);

    /* What, besides source and options, decides a binary. */
    cl_platform_id platform = NULL;
    char platform_name[128] = "", platform_version[128] = "", driver[128] = "";
    clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof(platform), &platform, NULL);
    clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof(platform_name), platform_name, NULL);
    clGetPlatformInfo(platform, CL_PLATFORM_VERSION, sizeof(platform_version), platform_version, NULL);
    clGetDeviceInfo(ctx->device, CL_DRIVER_VERSION, sizeof(driver), driver, NULL);
    snprintf(ctx->cache_identity, sizeof(ctx->cache_identity),
             "flashcl %s\nplatform %s | %s\ndevice %s\ndriver %s\n", FLASHCL_VERSION_STRING, platform_name,
             platform_version, ctx->dev.name, driver);
}

/* The full key text; the file name is its hash, the file holds the text. */
static char *cache_key(const flashcl_context *ctx, const char *source, const char *options)
{
    const uint64_t source_hash = fnv1a(FNV_START, source, strlen(source));
    const size_t n = strlen(ctx->cache_identity) + strlen(options) + 96;
    char *key = malloc(n);
    if (key)
        snprintf(key, n, "%ssource %016llx %zu\noptions %s\n", ctx->cache_identity,
                 (unsigned long long)source_hash, strlen(source), options);
    return key;
}

static void cache_path(const flashcl_context *ctx, const char *key, char *path, size_t size)
{
    snprintf(path, size, "%s/%016llx.bin", ctx->cache_dir, (unsigned long long)fnv1a(FNV_START, key, strlen(key)));
}

static bool read_u64(const unsigned char **p, const unsigned char *end, uint64_t *v)
{
    if ((size_t)(end - *p) < 8)
        return false;
    memcpy(v, *p, 8);
    *p += 8;
    return true;
}

FILE *fcl_open_regular(const char *path, const char **why)
{
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "absent" : "cannot be opened";
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        *why = "not a regular file";
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        *why = "cannot be opened";
    }
    return f;
}

/* Reads all of a regular file that fits the cap: opened without following
 * a link and without blocking (a FIFO or device there is refused, not
 * waited on). NULL with a reason otherwise. */
static unsigned char *read_regular_file(const char *path, size_t cap, long *size, const char **why)
{
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "absent" : "cannot be opened (a link?)";
        return NULL;
    }
    struct stat st;
    unsigned char *data = NULL;
    *why = "not a regular file";
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        *why = "empty or too large";
        if (st.st_size > 0 && (uintmax_t)st.st_size <= cap && (data = malloc((size_t)st.st_size))) {
            size_t got = 0;
            while (got < (size_t)st.st_size) {
                const ssize_t n = read(fd, data + got, (size_t)st.st_size - got);
                if (n <= 0)
                    break;
                got += (size_t)n;
            }
            if (got != (size_t)st.st_size) {
                free(data);
                data = NULL;
                *why = "unreadable";
            } else {
                *size = (long)st.st_size;
            }
        }
    }
    close(fd);
    return data;
}

/* Loads and checks an entry: the binary (malloc'd) or NULL with a reason. */
static unsigned char *read_entry(const char *path, const char *key, size_t *bin_size, const char **why)
{
    unsigned char *bin = NULL;
    long size = 0;
    unsigned char *data = read_regular_file(path, CACHE_MAX_FILE, &size, why);
    if (data) {
        const unsigned char *p = data, *end = data + size;
        const size_t magic_len = strlen(CACHE_MAGIC), key_len = strlen(key);
        uint64_t stored_key_len = 0, stored_bin_len = 0, checksum = 0;
        *why = "bad header";
        if ((size_t)size > magic_len + 24 && memcmp(p, CACHE_MAGIC, magic_len) == 0) {
            p += magic_len;
            *why = "another key";
            if (read_u64(&p, end, &stored_key_len) && stored_key_len == key_len &&
                (size_t)(end - p) >= key_len && memcmp(p, key, key_len) == 0) {
                p += key_len;
                *why = "truncated";
                if (read_u64(&p, end, &stored_bin_len) && stored_bin_len > 0 &&
                    (uint64_t)(end - p) == stored_bin_len + 8) {
                    memcpy(&checksum, p + stored_bin_len, 8);
                    *why = "checksum mismatch";
                    if (fnv1a(FNV_START, data, (size_t)(p + stored_bin_len - data)) == checksum &&
                        (bin = malloc((size_t)stored_bin_len))) {
                        memcpy(bin, p, (size_t)stored_bin_len);
                        *bin_size = (size_t)stored_bin_len;
                        *why = NULL;
                    }
                }
            }
        }
    }
    free(data);
    return bin;
}

cl_program fcl_cache_load(flashcl_context *ctx, const char *source, const char *options)
{
    if (!ctx->cache_dir[0])
        return NULL;
    char *key = cache_key(ctx, source, options);
    if (!key)
        return NULL;
    char path[1200];
    cache_path(ctx, key, path, sizeof(path));
    size_t size = 0;
    const char *why = NULL;
    unsigned char *bin = read_entry(path, key, &size, &why);
    free(key);
    cl_program program = NULL;
    if (bin) {
        const unsigned char *bins[1] = {bin};
        cl_int bin_status = CL_SUCCESS, err;
        program = clCreateProgramWithBinary(ctx->cl_ctx, 1, &ctx->device, &size, bins, &bin_status, &err);
        if (program && (bin_status != CL_SUCCESS ||
                        clBuildProgram(program, 1, &ctx->device, options, NULL, NULL) != CL_SUCCESS)) {
            clReleaseProgram(program);
            program = NULL;
        }
        if (!program)
            why = "the driver refused the binary";
        free(bin);
    }
    if (!program && why && strcmp(why, "absent") != 0) {
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "program cache: %s rejected (%s); rebuilding", path, why);
        remove(path);
    }
    return program;
}

void fcl_cache_store(flashcl_context *ctx, const char *source, const char *options, cl_program program)
{
    if (!ctx->cache_dir[0])
        return;
    size_t size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) != CL_SUCCESS || size == 0 ||
        size > CACHE_MAX_FILE / 2)
        return;
    unsigned char *bin = malloc(size);
    char *key = cache_key(ctx, source, options);
    unsigned char *bins[1] = {bin};
    if (!bin || !key || clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(bins), bins, NULL) != CL_SUCCESS) {
        free(bin);
        free(key);
        return;
    }
    char path[1200], tmp[1300];
    cache_path(ctx, key, path, sizeof(path));
    /* An unpredictable name, created here (O_EXCL, mode 0600): nothing else writes what is renamed in. */
    snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path);
    const int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f)
        close(fd);
    bool ok = f != NULL;
    if (ok) {
        const uint64_t key_len = strlen(key), bin_len = size;
        uint64_t sum = fnv1a(FNV_START, CACHE_MAGIC, strlen(CACHE_MAGIC));
        sum = fnv1a(sum, &key_len, 8);
        sum = fnv1a(sum, key, key_len);
        sum = fnv1a(sum, &bin_len, 8);
        sum = fnv1a(sum, bin, size);
        ok = fwrite(CACHE_MAGIC, 1, strlen(CACHE_MAGIC), f) == strlen(CACHE_MAGIC) &&
             fwrite(&key_len, 8, 1, f) == 1 && fwrite(key, 1, key_len, f) == key_len &&
             fwrite(&bin_len, 8, 1, f) == 1 && fwrite(bin, 1, size, f) == size && fwrite(&sum, 8, 1, f) == 1;
        ok = fclose(f) == 0 && ok;
    }
    /* rename() replaces atomically: a reader sees the old entry or the new one. */
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "program cache: could not write %s", path);
    }
    free(bin);
    free(key);
}
