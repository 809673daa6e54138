/* vector_math_prelude.c - prints the math prelude of the CPU target's float kernels (typedef real,
 * EXP ... and the inline nnc_expf, nnc_tanhf, nnc_erff of codegen/cpu/dialect_c.c), for
 * vector_math_test.sh to compile vector_math_sweep.c against. */
#include <stdio.h>

#include "../../codegen/kernel.h"

int main(void) {
    Str s = {0};
    BuildOpts o = {0};
    dialect_c.prelude(&s, &o);
    fputs("#include <math.h>\n#include <stdint.h>\n#include <string.h>\n", stdout);
    if (s.buf) fputs(s.buf, stdout);
    str_free(&s);
    return 0;
}
