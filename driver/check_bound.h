/* check_bound.h - how far apart --check-against lets the two targets be, value by value
 * (check_bound.c has the model; driver/check.c calls it for each launch it compares). */
#ifndef NNC_CHECK_BOUND_H
#define NNC_CHECK_BOUND_H
#include "../codegen/codegen.h"

/* One launch of the reference (the CPU) as the checker ran it: from the inputs the checked
 * target (CUDA) had, so both computed it from the same values. */
typedef struct {
    const Program *p; /* the reference's program, entry and launch */
    const Entry *e;
    const Launch *L;
    int64_t B, step; /* the batch, and the step it ran at */
    int64_t micro; /* accumulate calls of its group before it (STEP_ACCUMULATED) */
    int real_bytes; /* 4, or 8 (--f64) */
    LaunchNumerics num[2]; /* how each target rounds this launch: [0] checked, [1] reference */
    /* The reference's memory of node x (an input as both targets read it, an output as the
     * reference wrote it), or NULL (an inline scalar). */
    const void *(*mem)(void *ctx, int x);
    /* Launch L again on the reference with each floating input but `keep` (a node, or -1)
     * replaced by its absolute value, the memory then put back: output `out` becomes the sums
     * of the absolute values of its terms, written to S as doubles.  False where it cannot. */
    bool (*rerun_abs)(void *ctx, int out, int keep, double *S);
    void *ctx;
} CheckLaunch;

/* The tolerance of each element of one output. */
typedef struct {
    int64_t n;
    const unsigned char *need; /* n, or NULL: the elements whose tolerance is asked for (where
                                   the targets differ); the others may be left 0 */
    double *tol; /* n: |checked - reference| allowed */
    double *scale; /* n, or NULL: the magnitude `why` ends with (sum |terms|) */
    char why[400]; /* how tol is made, for the message */
} CheckTol;

/* Fills t (its arrays allocated here) for output `out` of c->L, n elements, both targets
 * correct within the rounding the op's numerics allow: every element, or those `need` marks. */
void check_tol_launch(const CheckLaunch *c, int out, int64_t n, const unsigned char *need, CheckTol *t);
void check_tol_free(CheckTol *t);
/* The operands of elementwise output `out` at its element i (both targets had these), into
 * vals; how many (0: not an elementwise launch). */
int check_ew_inputs(const CheckLaunch *c, int out, int64_t i, double *vals);
/* Element i of node x's memory as a double (real, i32 or a 16-bit half), at `mem`. */
double check_elem(const Graph *g, int x, const void *mem, int64_t i, int real_bytes);
#endif
