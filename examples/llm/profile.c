/* Per-phase device times from profiling events. */
#include "profile.h"

#include <stdlib.h>

int llm_profile_add(struct llm_profile *p, cl_event ev, enum llm_phase phase)
{
    p->launches[phase]++;
    if (!ev)
        return 0;
    if (p->n_events == p->cap_events) {
        const int cap = p->cap_events ? 2 * p->cap_events : 1024;
        cl_event *events = realloc(p->events, (size_t)cap * sizeof *events);
        int *phases = events ? realloc(p->phases, (size_t)cap * sizeof *phases) : NULL;
        if (events)
            p->events = events;
        if (!events || !phases) {
            clReleaseEvent(ev);
            return -1;
        }
        p->phases = phases;
        p->cap_events = cap;
    }
    p->events[p->n_events] = ev;
    p->phases[p->n_events++] = (int)phase;
    return 0;
}

int llm_profile_collect(struct llm_profile *p)
{
    cl_ulong previous_end = 0;
    int st = 0;
    for (int i = 0; i < p->n_events; i++) {
        cl_ulong start = 0, end = 0;
        if (clGetEventProfilingInfo(p->events[i], CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) ||
            clGetEventProfilingInfo(p->events[i], CL_PROFILING_COMMAND_END, sizeof end, &end, NULL))
            st = -1;
        else {
            /* The batch's first command: its own span (the device may have idled before it). */
            const cl_ulong from = i == 0 || previous_end > end ? start : previous_end;
            p->seconds[p->phases[i]] += (double)(end - from) * 1e-9;
            previous_end = end;
        }
        clReleaseEvent(p->events[i]);
    }
    p->n_events = 0;
    return st;
}

void llm_profile_clear(struct llm_profile *p)
{
    for (int i = 0; i < LLM_PHASES; i++) {
        p->seconds[i] = 0;
        p->launches[i] = 0;
    }
    p->tokens = 0;
}

void llm_profile_free(struct llm_profile *p)
{
    for (int i = 0; i < p->n_events; i++)
        clReleaseEvent(p->events[i]);
    free(p->events);
    free(p->phases);
    p->events = NULL;
    p->phases = NULL;
    p->n_events = p->cap_events = 0;
}

const char *llm_phase_name(enum llm_phase phase)
{
    static const char *const names[] = {"projections (CLBlast)", "attention (flashcl)", "rest (norm, RoPE, SwiGLU, embed)"};
    return phase < LLM_PHASES ? names[phase] : "?";
}
