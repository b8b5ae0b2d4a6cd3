/* Status names, the per-thread error message, and the optional log. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

#define ERROR_CAPACITY 16384  /* room for a message and a build log's head */

static _Thread_local char last_error[ERROR_CAPACITY];

const char *flashcl_last_error(void)
{
    return last_error;
}

void fcl_clear_error(void)
{
    last_error[0] = '\0';
}

flashcl_status fcl_fail(const flashcl_context *ctx, flashcl_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    fcl_log_msg(ctx, FLASHCL_LOG_ERROR, "%s (%s)", last_error, flashcl_status_name(status));
    return status;
}

flashcl_status fcl_enter(const flashcl_context *ctx, const char *names, const void *const *pointers, size_t n)
{
    fcl_clear_error();
    for (size_t i = 0; i < n; i++) {
        if (pointers[i])
            continue;
        const char *name = names;  /* the i-th of "a, b, c" */
        for (size_t skip = i; skip > 0; skip--)
            for (name = strchr(name, ',') + 1; *name == ' '; name++)
                ;
        const char *end = strchr(name, ',');
        const int len = end ? (int)(end - name) : (int)strlen(name);
        return fcl_fail(ctx, FLASHCL_ERROR_NULL_ARGUMENT, "%.*s is NULL", len, name);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status fcl_check_reserved(const flashcl_context *ctx, const char *what, const unsigned char *bytes, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bytes[i])
            return fcl_fail(ctx, FLASHCL_INVALID_VALUE,
                            "%s[%zu] = %d; must be 0 (a field of a newer flashcl than %s?)", what, i, (int)bytes[i],
                            FLASHCL_VERSION_STRING);
    return FLASHCL_SUCCESS;
}

void fcl_fail_append(const char *text)
{
    size_t used = strlen(last_error);
    snprintf(last_error + used, sizeof(last_error) - used, "%s", text);
}

void fcl_log_msg(const flashcl_context *ctx, enum flashcl_log_level level, const char *fmt, ...)
{
    if (!ctx || !ctx->log || level > ctx->log_level)
        return;
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    ctx->log(ctx->log_user, level, message);
}

const char *flashcl_status_name(flashcl_status status)
{
    switch (status) {
#define NAME(s) case s: return #s
    NAME(FLASHCL_SUCCESS);
    NAME(FLASHCL_ERROR_NULL_ARGUMENT);
    NAME(FLASHCL_ERROR_INVALID_SHAPE);
    NAME(FLASHCL_ERROR_INVALID_DTYPE);
    NAME(FLASHCL_ERROR_OUT_OF_BOUNDS);
    NAME(FLASHCL_ERROR_OVERFLOW);
    NAME(FLASHCL_ERROR_MISALIGNED);
    NAME(FLASHCL_ERROR_ALIASING);
    NAME(FLASHCL_ERROR_INVALID_SCALE);
    NAME(FLASHCL_ERROR_INVALID_CONFIG);
    NAME(FLASHCL_ERROR_UNSUPPORTED_DEVICE);
    NAME(FLASHCL_ERROR_INVALID_ENV);
    NAME(FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    NAME(FLASHCL_ERROR_CLBLAST);
#undef NAME
    default:
        break;
    }
    /* OpenCL's codes, by their CL_ names. */
    switch ((cl_int)status) {
#define NAME(s) case s: return #s
    NAME(CL_DEVICE_NOT_FOUND);
    NAME(CL_DEVICE_NOT_AVAILABLE);
    NAME(CL_COMPILER_NOT_AVAILABLE);
    NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE);
    NAME(CL_OUT_OF_RESOURCES);
    NAME(CL_OUT_OF_HOST_MEMORY);
    NAME(CL_PROFILING_INFO_NOT_AVAILABLE);
    NAME(CL_BUILD_PROGRAM_FAILURE);
    NAME(CL_INVALID_VALUE);
    NAME(CL_INVALID_DEVICE_TYPE);
    NAME(CL_INVALID_PLATFORM);
    NAME(CL_INVALID_DEVICE);
    NAME(CL_INVALID_CONTEXT);
    NAME(CL_INVALID_QUEUE_PROPERTIES);
    NAME(CL_INVALID_COMMAND_QUEUE);
    NAME(CL_INVALID_MEM_OBJECT);
    NAME(CL_INVALID_BINARY);
    NAME(CL_INVALID_BUILD_OPTIONS);
    NAME(CL_INVALID_PROGRAM);
    NAME(CL_INVALID_PROGRAM_EXECUTABLE);
    NAME(CL_INVALID_KERNEL_NAME);
    NAME(CL_INVALID_KERNEL);
    NAME(CL_INVALID_ARG_INDEX);
    NAME(CL_INVALID_ARG_VALUE);
    NAME(CL_INVALID_ARG_SIZE);
    NAME(CL_INVALID_KERNEL_ARGS);
    NAME(CL_INVALID_WORK_DIMENSION);
    NAME(CL_INVALID_WORK_GROUP_SIZE);
    NAME(CL_INVALID_WORK_ITEM_SIZE);
    NAME(CL_INVALID_GLOBAL_OFFSET);
    NAME(CL_INVALID_EVENT_WAIT_LIST);
    NAME(CL_INVALID_EVENT);
    NAME(CL_INVALID_OPERATION);
    NAME(CL_INVALID_BUFFER_SIZE);
    NAME(CL_INVALID_GLOBAL_WORK_SIZE);
#undef NAME
    default:
        return "FLASHCL_UNKNOWN_STATUS";
    }
}
