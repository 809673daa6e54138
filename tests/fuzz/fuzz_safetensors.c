/*
 * fuzz_safetensors.c - libFuzzer target for nnc_st_parse
 * (io/safetensors.c).  A successful parse must hand out tensors whose
 * bytes can all be read (ASan checks the reads below).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t tensor_bytes(const nnc_st_tensor *t)
{
    size_t n = nnc_dtype_size(t->dtype);
    int d;
    for (d = 0; d < t->rank; d++)
        n *= (size_t)t->dims[d];
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    nnc_st_file *f = nnc_st_parse(data, size, "fuzz.safetensors", err, sizeof err);
    volatile uint8_t sink = 0;
    int i;
    for (i = 0; i < nnc_st_count(f); i++) {
        const nnc_st_tensor *t = nnc_st_get(f, i);
        size_t k, n = tensor_bytes(t);
        for (k = 0; k < n; k++)
            sink ^= ((const uint8_t *)t->data)[k];
        if (nnc_st_find(f, t->name) == NULL)
            __builtin_trap(); /* every listed tensor must be findable */
    }
    (void)nnc_st_meta_get(f, "nnc_crc32");
    nnc_st_close(f);
    (void)sink;
    return 0;
}
