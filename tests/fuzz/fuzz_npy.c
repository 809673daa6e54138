/*
 * fuzz_npy.c - libFuzzer target for nnc_parse_npy (io/idx.c, io/npy.c, io/csv.c).
 * Any crash, sanitizer report, leak or hang is a bug: the parser must turn
 * every input into either an array or a one-line error.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    nnc_array a;
    char err[256];
    if (nnc_parse_npy(data, size, "fuzz.npy", &a, err, sizeof err) == 0 &&
        nnc_array_numel(&a) < 0)
        __builtin_trap(); /* a successful parse must give a consistent array */
    nnc_array_free(&a);
    return 0;
}
