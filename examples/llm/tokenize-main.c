/* llm-tokenize MODEL.gguf [--special] TEXT: prints the token ids of TEXT
 * (no OpenCL; for checking the tokenizer by hand). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

int main(int argc, char **argv)
{
    int special = argc > 2 && !strcmp(argv[2], "--special");
    if (argc != 3 + special) {
        fprintf(stderr, "usage: %s MODEL.gguf [--special] TEXT\n", argv[0]);
        return 2;
    }
    char err[512];
    struct gguf_file f;
    struct tokenizer *tok = NULL;
    if (gguf_open(argv[1], &f, err, sizeof err) || tokenizer_load(&f, &tok, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", argv[1], err);
        gguf_close(&f);
        return 1;
    }
    int *ids = NULL;
    size_t n = 0;
    const char *text = argv[2 + special];
    if (tokenizer_encode(tok, text, strlen(text), special, &ids, &n)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    tokenizer_free(&tok);
    gguf_close(&f);
    return 0;
}
