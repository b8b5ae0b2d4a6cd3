/*
 * Where device time goes, from OpenCL profiling events. The queue is
 * in order, so each command's time is taken from the end of the command
 * before it to its own end: the internal kernels CLBlast and flashcl may
 * enqueue before the one whose event they return count with their call.
 */
#ifndef LLM_PROFILE_H
#define LLM_PROFILE_H

#include <flashcl.h>

enum llm_phase { LLM_PROJECTION, LLM_ATTENTION, LLM_OTHER, LLM_PHASES };

struct llm_profile {
    double seconds[LLM_PHASES];
    long launches[LLM_PHASES];   /* calls enqueued: our kernels, CLBlast and flashcl calls */
    long tokens;                 /* tokens the counts cover */
    /* Events of the batch in flight, in queue order. */
    cl_event *events;
    int *phases;
    int n_events, cap_events;
};

/* Keeps ev (to be timed at llm_profile_collect) under a phase; counts the launch either way. */
int llm_profile_add(struct llm_profile *p, cl_event ev, enum llm_phase phase);
/* After the queue finished: adds the batch's times and releases its events. */
int llm_profile_collect(struct llm_profile *p);
void llm_profile_clear(struct llm_profile *p);
void llm_profile_free(struct llm_profile *p);
const char *llm_phase_name(enum llm_phase phase);

#endif
