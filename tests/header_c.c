/* The public header compiles on its own as C99 with -Wpedantic. */
#include "flashcl.h"

int flashcl_header_c_check(void);
int flashcl_header_c_check(void)
{
    return FLASHCL_VERSION_MAJOR >= 0 && FLASHCL_MAX_HEAD_DIM == 256;
}
