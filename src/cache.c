/* The on-disk program cache: compiled binaries keyed by everything that
 * decides them (source, options, device, driver, platform, flashcl version),
 * so a second process start does not recompile.
 *
 * What reaches the driver: only bytes this user's flashcl wrote. The folder
 * holds a secret key (CACHE_KEY_FILE: 16 random bytes, mode 0600, owned by
 * the user, created once); every entry ends with the SipHash-2-4 MAC of all
 * its other bytes under that key, and nothing in an entry is parsed before
 * the MAC and the file's length agree. An entry that is truncated, corrupted,
 * forged without the key, or for another key text is rejected, removed and
 * rebuilt. Entries and the key are written under unpredictable temporary
 * names (mkstemp) and moved into place atomically; nothing is opened through
 * a link or with a blocking open. A folder or key that cannot be used turns
 * the cache off without a word above DEBUG. docs/reliability.md says what
 * this trusts. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define CACHE_MAGIC "FLASHCL-PROGRAM-CACHE 2\n"
#define CACHE_MAX_FILE ((size_t)256 << 20)
#define CACHE_KEY_FILE "secret.key"
#define CACHE_MAC_BYTES 8

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

/* Writes all of n bytes to fd; false on any error. */
static bool write_all(int fd, const void *data, size_t n)
{
    const unsigned char *p = data;
    while (n > 0) {
        const ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Reads exactly n bytes from fd; false on a short read or an error. */
static bool read_all(int fd, void *data, size_t n)
{
    unsigned char *p = data;
    while (n > 0) {
        const ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

/* Puts data at path atomically: written under an unpredictable name created
 * here (mkstemp: O_EXCL, mode 0600), then moved in. replace false: an
 * existing file at path is kept (link(2) never replaces), true: replaced
 * (rename(2)). False if nothing was put there by this call. */
static bool write_atomically(const char *path, const void *data, size_t n, bool replace)
{
    char tmp[1300];
    if (snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= (int)sizeof(tmp))
        return false;
    const int fd = mkstemp(tmp);
    if (fd < 0)
        return false;
    bool ok = write_all(fd, data, n);
    ok = close(fd) == 0 && ok;
    ok = ok && (replace ? rename(tmp, path) == 0 : link(tmp, path) == 0);
    if (!ok || !replace)
        unlink(tmp);
    return ok;
}

/* The folder's key: read from CACHE_KEY_FILE, which must be a regular file
 * of exactly the key's size, owned by this user and readable by nobody else
 * (else anyone who can read it could forge entries); created from
 * /dev/urandom when absent. Two processes creating it at once agree: the
 * first link wins and both read what it linked. */
static bool cache_key_load(const char *dir, unsigned char key[FCL_SIPHASH_KEY_BYTES], const char **why)
{
    char path[1100];
    if (snprintf(path, sizeof(path), "%s/" CACHE_KEY_FILE, dir) >= (int)sizeof(path)) {
        *why = "path too long";
        return false;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        unsigned char fresh[FCL_SIPHASH_KEY_BYTES];
        const int random = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        const bool got = random >= 0 && read_all(random, fresh, sizeof(fresh));
        if (random >= 0)
            close(random);
        if (!got) {
            *why = "no random bytes from /dev/urandom";
            return false;
        }
        write_atomically(path, fresh, sizeof(fresh), false);  /* fails harmlessly when another process won */
        fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
        *why = "the key cannot be opened (a link?)";
        return false;
    }
    struct stat st;
    bool ok = fstat(fd, &st) == 0;
    *why = "the key is not a regular file of 16 bytes";
    ok = ok && S_ISREG(st.st_mode) && st.st_size == FCL_SIPHASH_KEY_BYTES;
    if (ok && (st.st_uid != geteuid() || (st.st_mode & 077))) {
        *why = "the key is another user's or readable by others";
        ok = false;
    }
    if (ok && !read_all(fd, key, FCL_SIPHASH_KEY_BYTES)) {
        *why = "the key cannot be read";
        ok = false;
    }
    close(fd);
    return ok;
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
    const char *why = NULL;
    if (!cache_key_load(dir, ctx->cache_key, &why)) {
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "program cache off in %s: %s", dir, why);
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

static uint64_t read_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* Reads all of a regular file that fits the cap: opened without following
 * a link and without blocking (a FIFO or device there is refused, not
 * waited on). NULL with a reason otherwise. */
static unsigned char *read_regular_file(const char *path, size_t cap, size_t *size, const char **why)
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
        if (st.st_size > 0 && (uintmax_t)st.st_size <= cap) {
            *why = "out of host memory";
            if ((data = malloc((size_t)st.st_size))) {
                *size = (size_t)st.st_size;
                if (!read_all(fd, data, *size)) {
                    free(data);
                    data = NULL;
                    *why = "unreadable";
                }
            }
        }
    }
    close(fd);
    return data;
}

/* The layout of an entry: magic, key length, key text, binary length,
 * binary, MAC (lengths little-endian u64 as this host stores them). */
static size_t entry_size(size_t key_len, size_t bin_len)
{
    return strlen(CACHE_MAGIC) + 8 + key_len + 8 + bin_len + CACHE_MAC_BYTES;
}

/* Loads and checks an entry: the binary (malloc'd) or NULL with a reason.
 * The MAC is checked first, over every byte but its own: nothing an
 * outsider wrote is parsed, let alone handed to the driver. */
static unsigned char *read_entry(const flashcl_context *ctx, const char *path, const char *key, size_t *bin_size,
                                 const char **why)
{
    size_t size = 0;
    unsigned char *data = read_regular_file(path, CACHE_MAX_FILE, &size, why);
    if (!data)
        return NULL;
    unsigned char *bin = NULL;
    const size_t magic_len = strlen(CACHE_MAGIC), key_len = strlen(key);
    *why = "too short";
    if (size >= entry_size(0, 0)) {
        const size_t body = size - CACHE_MAC_BYTES;
        *why = "MAC mismatch (not written by this user's flashcl with this folder's key)";
        if (fcl_siphash24(ctx->cache_key, data, body) == read_u64(data + body)) {
            const unsigned char *p = data + magic_len;
            *why = "another format";
            if (memcmp(data, CACHE_MAGIC, magic_len) == 0) {
                *why = "another key";
                if (read_u64(p) == key_len && size >= entry_size(key_len, 0) && memcmp(p + 8, key, key_len) == 0) {
                    const uint64_t bin_len = read_u64(p + 8 + key_len);
                    *why = "wrong length";
                    if (bin_len > 0 && bin_len < CACHE_MAX_FILE && size == entry_size(key_len, (size_t)bin_len)) {
                        *why = "out of host memory";
                        if ((bin = malloc((size_t)bin_len))) {
                            memcpy(bin, p + 16 + key_len, (size_t)bin_len);
                            *bin_size = (size_t)bin_len;
                            *why = NULL;
                        }
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
    unsigned char *bin = read_entry(ctx, path, key, &size, &why);
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
    unsigned char *bin = fcl_program_binary(ctx->device, program, &size);
    if (!bin || size > CACHE_MAX_FILE / 2) {
        free(bin);
        return;
    }
    char *key = cache_key(ctx, source, options);
    const uint64_t key_len = key ? strlen(key) : 0, bin_len = size;
    const size_t magic_len = strlen(CACHE_MAGIC), total = entry_size((size_t)key_len, size);
    unsigned char *entry = key ? malloc(total) : NULL;
    if (!entry) {
        free(bin);
        free(key);
        return;
    }
    memcpy(entry + magic_len + 16 + key_len, bin, size);
    free(bin);
    memcpy(entry, CACHE_MAGIC, magic_len);
    memcpy(entry + magic_len, &key_len, 8);
    memcpy(entry + magic_len + 8, key, (size_t)key_len);
    memcpy(entry + magic_len + 8 + key_len, &bin_len, 8);
    const uint64_t mac = fcl_siphash24(ctx->cache_key, entry, total - CACHE_MAC_BYTES);
    memcpy(entry + total - CACHE_MAC_BYTES, &mac, CACHE_MAC_BYTES);
    char path[1200];
    cache_path(ctx, key, path, sizeof(path));
    /* rename() replaces atomically: a reader sees the old entry or the new one. */
    if (!write_atomically(path, entry, total, true))
        fcl_log_msg(ctx, FLASHCL_LOG_DEBUG, "program cache: could not write %s", path);
    free(entry);
    free(key);
}

unsigned char *fcl_program_binary(cl_device_id device, cl_program program, size_t *size)
{
    cl_uint n = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof(n), &n, NULL) != CL_SUCCESS || n == 0 || n > 64)
        return NULL;
    cl_device_id devices[64];
    size_t sizes[64];
    if (clGetProgramInfo(program, CL_PROGRAM_DEVICES, n * sizeof(devices[0]), devices, NULL) != CL_SUCCESS ||
        clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, n * sizeof(sizes[0]), sizes, NULL) != CL_SUCCESS)
        return NULL;
    cl_uint mine = n;
    for (cl_uint i = 0; i < n; i++)
        if (devices[i] == device)
            mine = i;
    if (mine == n || sizes[mine] == 0)
        return NULL;
    unsigned char *bins[64] = {NULL}, *bin = malloc(sizes[mine] + 1);
    if (!bin)
        return NULL;
    bins[mine] = bin;  /* the others' NULL: not copied */
    if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, n * sizeof(bins[0]), bins, NULL) != CL_SUCCESS) {
        free(bin);
        return NULL;
    }
    bin[sizes[mine]] = '\0';
    *size = sizes[mine];
    return bin;
}
