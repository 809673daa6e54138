/*
 * fuzz_tokens.c - libFuzzer target for nnc_parse_tokens (io/tokens.c): the first byte picks the
 * format asked for (auto: llm.c's header or raw uint16; or a raw width), the rest is the file.
 * Any crash, sanitizer report, leak or hang is a bug: every input becomes either a stream of
 * i32 tokens or a one-line error.
 */
#include <stddef.h>
#include <stdint.h>

#include "data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nnc_array a;
    nnc_tokens_layout at;
    char err[256];
    if (size < 1) return 0;
    nnc_tokens_format fmt = (nnc_tokens_format)(data[0] % (NNC_TOKENS_I32 + 1));
    if (nnc_parse_tokens(data + 1, size - 1, "fuzz.bin", fmt, &a, &at, err, sizeof err) == 0 &&
        (a.rank != 1 || a.dims[0] < 1 || at.data_off + (size_t)a.dims[0] * at.width != size - 1))
        __builtin_trap(); /* a stream's tokens are exactly the file after its header */
    nnc_array_free(&a);
    return 0;
}
