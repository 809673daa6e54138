/* test_par.c - par_for (train/par.h): every element of [0, n) in exactly one part, for ranges
 * from empty to many parts, many jobs in a row (a worker woken late must not take a part of the
 * next job twice), and the part count a size gives. */
#define _XOPEN_SOURCE 700
#include "../../train/par.h"

#include <stdatomic.h>
#include <stdint.h>

#include "check.h"

typedef struct {
    atomic_int *hits;
    atomic_int parts;
} Job;

static void mark(void *ctx, int64_t lo, int64_t hi) {
    Job *j = ctx;
    atomic_fetch_add(&j->parts, 1);
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
}

int main(void) {
    enum { N = 100000 };
    static atomic_int hits[N];
    CHECK(par_parts(0) == 1, "an empty range is one part");
    CHECK(par_parts(PAR_MIN_BYTES - 1) == 1, "under %lld bytes: one part", (long long)PAR_MIN_BYTES);
    CHECK(par_parts((int64_t)1 << 40) >= 1 && par_parts((int64_t)1 << 40) <= PAR_MAX_PARTS,
          "a huge range: at most %d parts (got %d)", PAR_MAX_PARTS, par_parts((int64_t)1 << 40));
    const int64_t sizes[] = {0, 1, 2, 7, 1000, N};
    const int64_t bytes[] = {0, PAR_MIN_BYTES * 2, PAR_MIN_BYTES * 64};
    int bad = 0, jobs = 0, over = 0;
    for (int rep = 0; rep < 200; rep++)
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
            for (size_t b = 0; b < sizeof bytes / sizeof *bytes; b++) {
                for (int64_t i = 0; i < sizes[s]; i++) atomic_store(&hits[i], 0);
                Job j = {hits, 0};
                par_for(mark, &j, sizes[s], bytes[b]);
                for (int64_t i = 0; i < sizes[s]; i++) bad += atomic_load(&hits[i]) != 1;
                over += atomic_load(&j.parts) > par_parts(bytes[b]);
                jobs++;
            }
    CHECK(bad == 0, "%d jobs: every element written exactly once (%d were not)", jobs, bad);
    CHECK(over == 0, "no job ran more parts than its size gives (%d did)", over);
    return check_done();
}
