/* par.h - the runtime's large copies across cores: a batch's gather into the input buffers.
 *
 * One memcpy thread moves about 10-20 GB/s; the GPU's copy engine takes 50 GB/s from pinned
 * memory and the step itself may be shorter than the gather (a 4 MB batch: about 250 us on one
 * core against a 140 us step on an H200), so the host bounded the loop.  par_for splits [0, n)
 * into parts of at least PAR_MIN_BYTES each (by the bytes the caller says the whole range moves)
 * and runs them on a few persistent threads, the caller taking parts too: a worker that wakes
 * late finds none left, so a busy machine costs parallelism, never a stall.  Each part writes
 * its own elements, so the result does not depend on which thread ran it. */
#ifndef NNC_PAR_H
#define NNC_PAR_H
#include <stddef.h>
#include <stdint.h>

#define PAR_MIN_BYTES ((int64_t)512 << 10) /* the least a part moves: below, one thread */
#define PAR_MAX_PARTS 8

typedef void (*ParFn)(void *ctx, int64_t lo, int64_t hi);

/* fn(ctx, lo, hi) over parts of [0, n) that cover it, on up to PAR_MAX_PARTS threads (the cores
 * this process may use, at most); returns when every part is done. */
void par_for(ParFn fn, void *ctx, int64_t n, int64_t bytes);

/* memcpy(dst, src, n), in parts as par_for cuts n bytes. */
void par_memcpy(void *dst, const void *src, size_t n);

/* How many parts a range of `bytes` is cut into (1: the caller alone). */
int par_parts(int64_t bytes);

#endif
