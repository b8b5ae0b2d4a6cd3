/* Choosing an OpenCL device and the context that binds flashcl to it. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_PLATFORMS 16
#define MAX_DEVICES 64

static bool contains_ignoring_case(const char *haystack, const char *needle)
{
    size_t n = strlen(needle);
    if (n == 0)
        return false;
    for (; *haystack; haystack++) {
        size_t i = 0;
        while (i < n && haystack[i] &&
               tolower((unsigned char)haystack[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return true;
    }
    return false;
}

/* Parses "P:D" into indices; false if select is not of that form. */
static bool parse_indices(const char *select, unsigned *platform, unsigned *device)
{
    char tail;
    return sscanf(select, "%u:%u%c", platform, device, &tail) == 2;
}

/* Picks a device: by `select` when given ("P:D" or a name substring), else
 * the first GPU on any platform, else the first device of any kind. The
 * platforms' order is the ICD loader's and carries no meaning: on a machine
 * with PoCL and NVIDIA either may be platform 0. */
static flashcl_status choose_device(const char *select, cl_device_id *out)
{
    cl_platform_id platforms[MAX_PLATFORMS];
    cl_uint n_platforms = 0;
    cl_int err = clGetPlatformIDs(MAX_PLATFORMS, platforms, &n_platforms);
    /* -1001 is CL_PLATFORM_NOT_FOUND_KHR: the ICD loader found no platform. */
    if (err == -1001 || (err == CL_SUCCESS && n_platforms == 0))
        return fcl_fail(NULL, FLASHCL_DEVICE_NOT_FOUND,
                    "no OpenCL platform found (is an ICD such as pocl-opencl-icd installed?)");
    if (err != CL_SUCCESS)
        return fcl_fail(NULL, (flashcl_status)err, "clGetPlatformIDs failed (%d)", err);
    if (n_platforms > MAX_PLATFORMS)
        n_platforms = MAX_PLATFORMS;

    unsigned want_p = 0, want_d = 0;
    const bool by_index = select && parse_indices(select, &want_p, &want_d);
    cl_device_id first_any = NULL, first_gpu = NULL;

    for (cl_uint p = 0; p < n_platforms; p++) {
        cl_device_id devices[MAX_DEVICES];
        cl_uint n_devices = 0;
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, MAX_DEVICES, devices, &n_devices) !=
            CL_SUCCESS)
            continue;  /* a platform with no devices is not an error */
        if (n_devices > MAX_DEVICES)
            n_devices = MAX_DEVICES;
        char platform_name[256] = "";
        clGetPlatformInfo(platforms[p], CL_PLATFORM_NAME, sizeof(platform_name), platform_name, NULL);

        for (cl_uint d = 0; d < n_devices; d++) {
            if (by_index) {
                if (p == want_p && d == want_d) {
                    *out = devices[d];
                    return FLASHCL_SUCCESS;
                }
                continue;
            }
            if (select) {
                char device_name[256] = "";
                clGetDeviceInfo(devices[d], CL_DEVICE_NAME, sizeof(device_name), device_name, NULL);
                if (contains_ignoring_case(device_name, select) ||
                    contains_ignoring_case(platform_name, select)) {
                    *out = devices[d];
                    return FLASHCL_SUCCESS;
                }
                continue;
            }
            cl_device_type type = 0;
            clGetDeviceInfo(devices[d], CL_DEVICE_TYPE, sizeof(type), &type, NULL);
            if (!first_any)
                first_any = devices[d];
            if (!first_gpu && (type & CL_DEVICE_TYPE_GPU))
                first_gpu = devices[d];
        }
    }
    if (select)
        return fcl_fail(NULL, FLASHCL_ERROR_INVALID_ENV,
                    "device selection \"%s\" matches no OpenCL device (use \"P:D\" indices as "
                    "clinfo -l lists them, or part of a platform or device name)", select);
    *out = first_gpu ? first_gpu : first_any;
    if (!*out)
        return fcl_fail(NULL, FLASHCL_DEVICE_NOT_FOUND, "no OpenCL device found on %u platform(s)",
                    n_platforms);
    return FLASHCL_SUCCESS;
}

static flashcl_status query_device(flashcl_context *ctx)
{
    struct device_desc *dev = &ctx->dev;
    cl_ulong local = 0;
    cl_int err = clGetDeviceInfo(ctx->device, CL_DEVICE_NAME, sizeof(dev->name), dev->name, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DRIVER_VERSION, sizeof(dev->driver), dev->driver, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_TYPE, sizeof(dev->type), &dev->type, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(local), &local, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(ctx->max_alloc_size),
                           &ctx->max_alloc_size, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(ctx->global_mem_size),
                           &ctx->global_mem_size, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(dev->max_workgroup),
                           &dev->max_workgroup, NULL);
    cl_uint align_bits = 0, units = 0;
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(align_bits), &align_bits, NULL);
    err |= clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(units), &units, NULL);
    dev->compute_units = (int)units;
    if (err != CL_SUCCESS)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "cannot query the device (is it a valid cl_device_id?)");
    dev->reported_local = (size_t)local;
    ctx->base_align_bytes = align_bits / 8 > 512 ? align_bits / 8 : 512;
    dev->name[sizeof(dev->name) - 1] = '\0';
    dev->driver[sizeof(dev->driver) - 1] = '\0';
    if (dev->max_workgroup < 64)
        return fcl_fail(NULL, FLASHCL_ERROR_UNSUPPORTED_DEVICE,
                        "device \"%s\" allows %zu work-items per work-group; flashcl needs 64", dev->name,
                        dev->max_workgroup);
    return FLASHCL_SUCCESS;
}

/* Local memory forced, tuned and built-in shapes may use: the parameter,
 * else the probe's finding, else the architecture's size, else the reported. */
static size_t usable_local(const flashcl_context *ctx)
{
    const size_t reported = ctx->dev.reported_local;
    if (ctx->param_local_mem)
        return ctx->param_local_mem;
    if (ctx->probed_local_mem > reported)
        return ctx->probed_local_mem;
    if (ctx->arch_local_mem > reported)
        return ctx->arch_local_mem;
    return reported;
}

/* The caller's cl_context must contain the caller's device. */
static flashcl_status check_device_in_context(cl_context context, cl_device_id device)
{
    cl_uint n = 0;
    cl_int err = clGetContextInfo(context, CL_CONTEXT_NUM_DEVICES, sizeof(n), &n, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(NULL, FLASHCL_INVALID_CONTEXT, "params.context is not a valid cl_context (%d)", err);
    cl_device_id devices[MAX_DEVICES];
    if (n > MAX_DEVICES)
        n = MAX_DEVICES;
    err = clGetContextInfo(context, CL_CONTEXT_DEVICES, n * sizeof(cl_device_id), devices, NULL);
    if (err != CL_SUCCESS)
        return fcl_fail(NULL, FLASHCL_INVALID_CONTEXT, "cannot list params.context's devices (%d)", err);
    for (cl_uint i = 0; i < n; i++)
        if (devices[i] == device)
            return FLASHCL_SUCCESS;
    return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "params.device is not one of params.context's devices");
}

/* A copy of an environment variable (whole, whatever its length); NULL when
 * it is not set, `unset` copied then if not NULL. *ok false when out of memory. */
static char *read_env(const char *name, const char *unset, bool *ok)
{
    const char *v = getenv(name);
    if (!v && !unset)
        return NULL;
    char *copy = strdup(v ? v : unset);
    *ok = *ok && copy;
    return copy;
}

/* "a" + "b" in a new string; NULL when out of memory. */
static char *concat(const char *a, const char *b)
{
    char *s = malloc(strlen(a) + strlen(b) + 1);
    if (s)
        strcat(strcpy(s, a), b);
    return s;
}

/* Every environment variable flashcl reads, read here once per context. */
static bool env_read(struct fcl_env *env)
{
    bool ok = true;
    env->device = read_env("FLASHCL_DEVICE", NULL, &ok);
    const char *portable = getenv("FLASHCL_PORTABLE");
    env->portable = portable && strcmp(portable, "1") == 0;
    const char *step_times = getenv("FLASHCL_STEP_TIMES");
    env->step_times = step_times && strcmp(step_times, "1") == 0;
    env->tuning = read_env("FLASHCL_TUNING", NULL, &ok);
    env->cache_dir = read_env("FLASHCL_CACHE_DIR", NULL, &ok);
    env->build_options = read_env("FLASHCL_BUILD_OPTIONS", "", &ok);
    env->kernels = read_env("FLASHCL_KERNELS", "", &ok);
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    env->user_cache = xdg && *xdg ? concat(xdg, "/flashcl") : home && *home ? concat(home, "/.cache/flashcl") : strdup("");
    return ok && env->user_cache;
}

static void env_free(struct fcl_env *env)
{
    char **all[] = {&env->device, &env->tuning, &env->cache_dir, &env->build_options, &env->kernels, &env->user_cache};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        free(*all[i]);
        *all[i] = NULL;
    }
}

static flashcl_status check_params(const struct flashcl_context_params *params)
{
    if ((params->context == NULL) != (params->device == NULL))
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE,
                        "params.context and params.device must be given together (or both NULL)");
    if (params->log_level < 0 || params->log_level > FLASHCL_LOG_DEBUG)
        return fcl_fail(NULL, FLASHCL_INVALID_VALUE, "params.log_level = %d; must be 0..%d", (int)params->log_level,
                        FLASHCL_LOG_DEBUG);
    return FCL_CHECK_RESERVED(NULL, "params.reserved", params->reserved);
}

flashcl_status fcl_context_create(const struct flashcl_context_params *params, const struct fcl_test_hooks *hooks,
                                  flashcl_context **out)
{
    const flashcl_status entry = FCL_ENTER(NULL, out);
    if (entry != FLASHCL_SUCCESS)
        return entry;
    *out = NULL;
    static const struct flashcl_context_params defaults = {0};
    if (!params)
        params = &defaults;
    flashcl_status st = check_params(params);
    if (st != FLASHCL_SUCCESS)
        return st;

    flashcl_context *ctx = calloc(1, sizeof(*ctx));
    if (!ctx)
        return fcl_fail(NULL, FLASHCL_OUT_OF_HOST_MEMORY, "cannot allocate a context");
    if (!env_read(&ctx->env)) {
        env_free(&ctx->env);
        free(ctx);
        return fcl_fail(NULL, FLASHCL_OUT_OF_HOST_MEMORY, "cannot copy the environment");
    }
    if (hooks)
        ctx->hooks = *hooks;
    ctx->param_local_mem = params->local_mem_bytes;
    ctx->log = params->log;
    ctx->log_user = params->log_user;
    ctx->log_level = params->log_level ? params->log_level : FLASHCL_LOG_INFO;
    if (pthread_mutex_init(&ctx->lock, NULL) != 0) {
        env_free(&ctx->env);
        free(ctx);
        return fcl_fail(NULL, FLASHCL_OUT_OF_HOST_MEMORY, "cannot create a mutex");
    }
    const bool portable_only = params->portable_only || ctx->env.portable;
    st = fcl_overrides_from_params(ctx, params, portable_only);
    if (st != FLASHCL_SUCCESS)
        goto error;

    if (params->context) {
        st = check_device_in_context(params->context, params->device);
        if (st != FLASHCL_SUCCESS)
            goto error;
        /* Each reference is the context's only once taken: destroy releases what is set. */
        cl_int err = clRetainContext(params->context);
        if (err == CL_SUCCESS)
            ctx->cl_ctx = params->context;
        if (err == CL_SUCCESS && (err = clRetainDevice(params->device)) == CL_SUCCESS)
            ctx->device = params->device;
        if (err != CL_SUCCESS) {
            st = fcl_fail(NULL, (flashcl_status)err, "cannot retain params.context or params.device (%d)", err);
            goto error;
        }
    } else {
        const char *select = params->device_select ? params->device_select : ctx->env.device;
        if (select && !*select)
            select = NULL;
        st = choose_device(select, &ctx->device);
        if (st != FLASHCL_SUCCESS)
            goto error;
        cl_int err = clRetainDevice(ctx->device);  /* a no-op for root devices; keeps destroy uniform */
        if (err != CL_SUCCESS) {
            ctx->device = NULL;
            st = fcl_fail(NULL, (flashcl_status)err, "clRetainDevice failed (%d)", err);
            goto error;
        }
        ctx->cl_ctx = clCreateContext(NULL, 1, &ctx->device, NULL, NULL, &err);
        if (!ctx->cl_ctx) {
            st = fcl_fail(NULL, (flashcl_status)err, "clCreateContext failed (%d)", err);
            goto error;
        }
    }
    st = query_device(ctx);
    if (st != FLASHCL_SUCCESS)
        goto error;
    fcl_log_msg(ctx, FLASHCL_LOG_INFO, "flashcl %s on \"%s\" (%zu bytes of local memory reported)",
                FLASHCL_VERSION_STRING, ctx->dev.name, ctx->dev.reported_local);
    fcl_cache_init(ctx, params->cache_dir);
    fcl_tuning_load(ctx, params->tuning_file);
    fcl_nvidia_probe(ctx, portable_only, &ctx->hooks);
    ctx->dev.usable_local = usable_local(ctx);
    *out = ctx;
    return FLASHCL_SUCCESS;

error:
    flashcl_context_destroy(&ctx);
    return st;
}

flashcl_status flashcl_context_create(const struct flashcl_context_params *params, flashcl_context **out)
{
    return fcl_context_create(params, NULL, out);
}

void flashcl_context_destroy(flashcl_context **pctx)
{
    if (!pctx || !*pctx)
        return;
    flashcl_context *ctx = *pctx;
    fcl_program_cache_free(ctx);
    fcl_workspace_free(ctx);
    fcl_tuning_free(ctx);
    if (ctx->cl_ctx)
        clReleaseContext(ctx->cl_ctx);
    if (ctx->device)
        clReleaseDevice(ctx->device);
    for (struct failed_program *f = ctx->failed, *next; f; f = next) {
        next = f->next;
        free(f->options);
        free(f);
    }
    pthread_mutex_destroy(&ctx->lock);
    env_free(&ctx->env);
    free(ctx);
    *pctx = NULL;
}

cl_context flashcl_context_cl_context(const flashcl_context *ctx)
{
    return ctx ? ctx->cl_ctx : NULL;
}

cl_device_id flashcl_context_device(const flashcl_context *ctx)
{
    return ctx ? ctx->device : NULL;
}

const char *flashcl_context_device_name(const flashcl_context *ctx)
{
    return ctx ? ctx->dev.name : "";
}
