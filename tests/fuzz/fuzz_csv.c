/*
 * fuzz_csv.c - libFuzzer target for nnc_parse_csv (io/idx.c, io/npy.c, io/csv.c).
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
    /* the first byte picks the header mode so all three paths get fuzzed */
    int skip = size > 0 ? (int)(data[0] % 3) - 1 : -1;
    if (nnc_parse_csv(data, size, "fuzz.csv", skip, &a, err, sizeof err) == 0) {
        nnc_array f, i;
        if (nnc_array_to_f32(&a, 0.5f, &f, err, sizeof err) == 0)
            nnc_array_free(&f);
        if (nnc_array_to_i32(&a, &i, err, sizeof err) == 0) /* exercises the range checks */
            nnc_array_free(&i);
    }
    nnc_array_free(&a);
    return 0;
}
