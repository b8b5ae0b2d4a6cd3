// The public header compiles on its own as C++ with -Wpedantic.
#include "flashcl.h"

int flashcl_header_cpp_check();
int flashcl_header_cpp_check()
{
    flashcl_tensor t = flashcl_tensor_bnhd(nullptr, FLASHCL_F16, 1, 1, 1);
    return t.stride_head == 1;
}
