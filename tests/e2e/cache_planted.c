/* cache_planted.c - the object cache_swap.c plants where nnc's compiled object was: if nnc ever
 * loads it, its constructor (run by dlopen, before nnc can look at anything in it) appends a
 * line to the file named by NNC_SWAP_MARKER.  Someone else's code running in nnc's process. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((constructor)) static void planted_run(void) {
    const char *marker = getenv("NNC_SWAP_MARKER");
    FILE *f = marker ? fopen(marker, "a") : NULL;
    if (f) {
        fputs("the planted object ran in nnc\n", f);
        fclose(f);
    }
}
