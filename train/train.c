/* train.c - runs the compiled step over the data: epochs of shuffled batches, evaluation on
 * the test set after each epoch, progress on a terminal (plain lines otherwise), JSON-lines
 * metrics, and safetensors checkpoints that PyTorch and Hugging Face loaders read.
 *
 * Batches come from a Philox permutation keyed by the seed and the epoch (a token stream's from
 * windows at starts drawn so: dataset_windows_draw), so a run is reproducible from its seed; the last batch of an epoch may be short (PyTorch's DataLoader
 * with drop_last=False), which the compiled step supports because its batch size is a run-time
 * argument bounded by the compile-time batch. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "../include/nnc_rng.h"
#include "../io/numfmt.h"
#include "../io/safetensors.h"
#include "par.h"
#include "tensorboard.h"
#include "train.h"

double train_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* SIGINT and SIGTERM both stop at the end of the current step and save (a scheduler's TERM
 * deserves the same as a Ctrl-C); the exit status is the shell's 128 + signal number: 130
 * for SIGINT, 143 for SIGTERM, so a job script sees which signal ended the run. */
static volatile sig_atomic_t interrupted;

static void on_stop_signal(int sig) {
    interrupted = sig;
}

typedef struct {
    const TrainConfig *t; /* the train section, overrides applied */
    ModelRef *lm;
    int metric_first, nouts; /* eval's metrics and outputs: outputs metric_first .. + nouts */
    TrainPos pos;               /* where training stands, for checkpoints */
    const TrainOpts *o;
    void **bufs;
    int64_t *idx;
    FILE *metrics;
    char *mbuf;                 /* metrics lines not yet handed to `metrics`: METRICS_BUF bytes */
    size_t mlen;
    bool mflushed;              /* mbuf went to the stream since metrics_check last looked */
    unsigned mlines;            /* metrics lines written (the flush check every 64) */
    double t0;
    double last_flush;
    int64_t *perm;              /* the epoch's sample order, allocated once */
    bool metrics_failed;        /* a metrics write failed: metrics closed, training goes on */
    int64_t metrics_lost;       /* the step at which it failed */
    void **direct;              /* zero-copy batch pointers into the dataset */
    bool pipe; /* pipelined calls: the next batch queued before a call is waited for */
    void **ring; /* ... the model's input buffers of the call being gathered */
    bool kept; /* ... the training set kept in the device's memory: a call sends its rows' starts */
    int64_t **starts; /* ... per column, a batch's starts (elements into its kept source) */
    double lr;                  /* the epoch's learning rate, when a schedule sets it */
    int scale_state, skipped_state;   /* a loss scaler's states "scaler.scale", ".skipped_steps", or -1 */
    int norm_out;                     /* train_step's output "grad_norm" (clip_grad_norm), or -1 */
    Comm *comm;                 /* data parallel: the processes (NULL: this one alone) */
    int rank, size;
    int64_t gbatch;             /* rows of a global batch, split over the processes */
    double last_poll;           /* when the trainer last asked for a faster build (upgrade) */
    long wait_step;             /* NNC_TIER_WAIT_STEP: the step that waits for it (tests), or -1 */
    long signal_step; /* NNC_TEST_SIGINT_STEP: SIGINT raised as this step is recorded (tests), or -1 */
    int stop_after_epoch; /* the signal that came at an epoch's last step: the run stops after its records */
    Hparams hp;                 /* this run's hyperparameters, which its checkpoints record */
    int64_t steps; /* the run's optimizer steps: a per-step schedule's default length */
    bool bar_shown; /* the progress line is on the terminal (progress_clear erases it) */
    int bar_width; /* its bar's characters: 30, or fewer on a narrow terminal */
    TbWriter *tb; /* --tensorboard's event file, or NULL */
    bool tb_failed; /* a write failed: the events stopped there, training went on */
    int64_t tb_lost; /* the step at which they did */
    double tb_flushed, t_step; /* when the events last went out; when the last step ended */
} Run;

static int state_index(const nnc_model_abi *a, const char *name) {
    for (int i = 0; i < a->nstates; i++)
        if (!strcmp(a->states[i].name, name)) return i;
    return -1;
}

/* A scalar state's value from the host mirror (the caller synced it). */
static double state_scalar(const Run *R, int i) {
    const void *p = R->lm->abi->state(R->lm->m, i);
    return R->lm->abi->real_bytes == 8 ? *(const double *)p : (double)*(const float *)p;
}

double sched_lr(const SchedConfig *s, double lr, int64_t e, int64_t length) {
    double x = (double)e, len = length > 0 ? (double)length : 1;
    switch (s->kind) {
    case SCHED_NONE: break;
    case SCHED_STEP: return lr * pow(s->gamma, floor(x / s->step_size));
    case SCHED_EXPONENTIAL: return lr * pow(s->gamma, x);
    case SCHED_COSINE: {
        double tmax = s->t_max > 0 ? s->t_max : len;
        return s->eta_min + (lr - s->eta_min) * (1 + cos(M_PI * x / tmax)) / 2;
    }
    case SCHED_LINEAR: {
        double f = x < s->total_iters ? x / s->total_iters : 1;
        return lr * (s->start_factor + (s->end_factor - s->start_factor) * f);
    }
    case SCHED_WARMUP_COSINE: { /* max_steps > warmup: the front end's check, or sched_check's for the run's length */
        double top = s->max_steps > 0 ? s->max_steps : len;
        if (x < s->warmup) return lr * (x + 1) / (s->warmup + 1);
        if (x > top) return s->min_lr;
        return s->min_lr + 0.5 * (1 + cos(M_PI * (x - s->warmup) / (top - s->warmup))) * (lr - s->min_lr);
    }
    }
    return lr;
}

/* R->lr into the model through the ABI's set_lr; false (printed) when the model refuses it. */
static bool set_lr(Run *R) {
    const nnc_model_abi *a = R->lm->abi;
    if (a->set_lr(R->lm->m, R->lr) == 0) return true;
    fprintf(stderr, "nnc: error: %s\n", a->error(R->lm->m));
    return false;
}

/* Before epoch `epoch` (1 for the first) under a schedule stepped per epoch: the rate torch's
 * scheduler gives after epoch - 1 scheduler.step() calls. */
static bool set_epoch_lr(Run *R, int epoch) {
    const TrainConfig *t = R->t;
    if (t->sched.kind == SCHED_NONE || !t->opt.lr_state || t->sched.interval != SCHED_PER_EPOCH) return true;
    R->lr = sched_lr(&t->sched, t->opt.lr, epoch - 1, R->o->epochs);
    return set_lr(R);
}

/* Before each optimizer step under a schedule stepped per step (interval = "step"): the rate
 * after as many scheduler.step() calls as steps taken, which is nanoGPT's get_lr(iter_num). */
static bool set_step_lr(Run *R) {
    const TrainConfig *t = R->t;
    if (t->sched.kind == SCHED_NONE || !t->opt.lr_state || t->sched.interval != SCHED_PER_STEP) return true;
    R->lr = sched_lr(&t->sched, t->opt.lr, R->lm->abi->get_step(R->lm->m), R->steps);
    return set_lr(R);
}

/* Data parallel with gradient accumulation: the group's sum goes through one allreduce,
 * weighted by each process's share of the group's last micro-batch.  Every batch but an
 * epoch's last splits alike; when that one splits in other proportions and ends a group of
 * several, the group's earlier micro-batches take its shares: said once, before training. */
static void accumulate_shares_note(const Run *R, int64_t n) {
    int64_t k = R->t->accumulate, B = R->gbatch, rem = n % B, batches = (n + B - 1) / B;
    if (!R->comm || R->size < 2 || k < 2 || !rem || (batches - 1) % k == 0 || R->o->no_write) return;
    for (int r = 0; r < R->size; r++) {
        int64_t full = B * (r + 1) / R->size - B * r / R->size, last = rem * (r + 1) / R->size - rem * r / R->size;
        if (full * rem == last * B) continue;
        fprintf(stderr,
                "nnc: note: accumulate = %lld over %d processes: each epoch's last batch (%lld row%s) splits "
                "unevenly, so the micro-batches of its group are weighted by its shares (process %d: %lld of "
                "%lld rows, against %lld of %lld); a batch or sample count the processes divide avoids it\n",
                (long long)k, R->size, (long long)rem, rem == 1 ? "" : "s", r, (long long)last, (long long)rem,
                (long long)full, (long long)B);
        return;
    }
}

/* A per-step schedule whose length is the run's: warmup_cosine must have steps left to decay. */
static bool sched_check(const Run *R) {
    const SchedConfig *s = &R->t->sched;
    if (s->kind != SCHED_WARMUP_COSINE || s->interval != SCHED_PER_STEP || s->max_steps > 0 || R->steps == 0 ||
        (double)R->steps > s->warmup)
        return true;
    fprintf(stderr,
            "nnc: error: %s:%d:%d: warmup_cosine(): warmup = %.0f steps, but the run takes %lld (its max_steps "
            "by default): give max_steps, or train longer\n",
            s->loc.file, s->loc.line, s->loc.col, s->warmup, (long long)R->steps);
    return false;
}

static double read_scalar(const ModelRef *lm, int entry, int k) {
    const void *p = lm->abi->output(lm->m, entry, k);
    if (!p) return NAN;
    return lm->abi->real_bytes == 8 ? *(const double *)p : (double)*(const float *)p;
}

/* The dataset holds f32 (and i32 labels); a model built with real = double (--f64) takes f64
 * inputs, so its f32 columns are widened in place, from the last element down (bufs hold 8
 * bytes per element then, see alloc_bufs). */
static void gather(Run *R, const Dataset *d, const int64_t *idx, int64_t rows) {
    const nnc_model_abi *abi = R->lm->abi;
    dataset_gather(d, idx, rows, R->bufs);
    if (abi->real_bytes != 8) return;
    for (int c = 0; c < d->ncols && c < abi->ninputs; c++) {
        if (abi->inputs[c].dtype == NNC_TYPE_I32) continue;
        const float *f = R->bufs[c];
        double *x = R->bufs[c];
        for (int64_t i = rows * d->cols[c].row_elems - 1; i >= 0; i--) x[i] = (double)f[i];
    }
}

/* This process's share of a global batch of `rows` rows: rows [lo, lo + mine), weighted by its
 * part of the batch.  A share of nothing (a last batch smaller than the processes) runs one
 * row at weight 0, so that the process still takes part in the step's collectives. */
typedef struct {
    int64_t first, use, mine;
} Share;

static Share share_of(Run *R, int64_t rows) {
    int64_t lo = rows * R->rank / R->size, mine = rows * (R->rank + 1) / R->size - lo;
    if (R->comm) comm_set_weight(R->comm, (double)mine / (double)rows);
    return (Share){mine ? lo : 0, mine ? mine : 1, mine};
}

/* ---- progress inside an epoch ---------------------------------------------------------------
 * On a terminal (stderr), one line redrawn in place as tqdm draws it, at most 10 times a second
 * (a step can take 100 us: the clock is read once a step, the line is not written), and cleared
 * before anything else is printed.  --log-every N prints a plain line every N steps instead,
 * for logs that are files. */

/* "0:03:07", tqdm's elapsed and remaining times (hours grow as needed). */
static const char *fmt_hms(char *b, size_t n, double secs) {
    long long s = isfinite(secs) && secs > 0 ? (long long)(secs + 0.5) : 0;
    snprintf(b, n, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return b;
}

/* "1630 step/s", "12.5 step/s", "45k step/s", or "3.20 s/step" for slow steps, as tqdm switches to s/it. */
static const char *fmt_rate(char *b, size_t n, double steps_per_s) {
    if (!(steps_per_s > 0) || !isfinite(steps_per_s)) snprintf(b, n, "? step/s");
    else if (steps_per_s >= 1e6) snprintf(b, n, "%.1fM step/s", steps_per_s / 1e6);
    else if (steps_per_s >= 1e4) snprintf(b, n, "%.0fk step/s", steps_per_s / 1e3);
    else if (steps_per_s >= 100) snprintf(b, n, "%.0f step/s", steps_per_s);
    else if (steps_per_s >= 1) snprintf(b, n, "%.1f step/s", steps_per_s);
    else snprintf(b, n, "%.2f s/step", 1 / steps_per_s);
    return b;
}

static int terminal_columns(void) {
    struct winsize w;
    return ioctl(2, TIOCGWINSZ, &w) == 0 && w.ws_col >= 20 ? w.ws_col : 80;
}

/* Erases the bar, if one is drawn, so that the next line starts clean. */
static void progress_clear(Run *R) {
    if (!R->bar_shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    R->bar_shown = false;
}

/* "epoch 1/3  412/938 [=====>    ] 44%  1630 step/s  loss 0.8123  ETA 0:00:03", fitted to the
 * terminal's width (the bar shrinks, then goes) so that it never wraps. */
static void progress_draw(Run *R, int epoch, int64_t step, int64_t steps, double loss, double elapsed) {
    char head[64], tail[160], rate[32], eta[32];
    double per_s = (double)step / elapsed;
    snprintf(head, sizeof head, "epoch %d/%d  %lld/%lld ", epoch, R->o->epochs, (long long)step, (long long)steps);
    snprintf(tail, sizeof tail, " %3.0f%%  %s  loss %.4f  ETA %s", 100.0 * (double)step / (double)steps,
             fmt_rate(rate, sizeof rate, per_s), loss, fmt_hms(eta, sizeof eta, (double)(steps - step) / per_s));
    int cols = terminal_columns(), room = cols - 1 - (int)strlen(head) - (int)strlen(tail) - 2;
    if (room < R->bar_width) R->bar_width = room; /* narrower only: the bar keeps its width in an epoch */
    int w = R->bar_width >= 10 ? R->bar_width : 0, fill = (int)((double)w * (double)step / (double)steps);
    char line[320];
    size_t k = (size_t)snprintf(line, sizeof line, "%s", head);
    if (w) {
        line[k++] = '[';
        for (int i = 0; i < w; i++) line[k++] = i < fill ? '=' : i == fill ? '>' : ' ';
        line[k++] = ']';
    }
    snprintf(line + k, sizeof line - k, "%s", tail);
    fprintf(stderr, "\r%.*s\033[K", cols - 1, line); /* cut rather than wrap on a very narrow terminal */
    fflush(stderr);
    R->bar_shown = true;
}

/* --log-every N: "epoch 1/3  step 400  loss 0.812345  400/938  1630 step/s  ETA 0:00:03" on
 * stdout; the loss is the epoch's mean so far, as the epoch line's is over the whole epoch. */
static void progress_log(Run *R, int epoch, int64_t gstep, int64_t step, int64_t steps, double loss, double elapsed) {
    char rate[32], eta[32];
    double per_s = (double)step / elapsed;
    progress_clear(R);
    printf("epoch %d/%d  step %lld  loss %.6f  %lld/%lld  %s  ETA %s\n", epoch, R->o->epochs, (long long)gstep, loss,
           (long long)step, (long long)steps, fmt_rate(rate, sizeof rate, per_s),
           fmt_hms(eta, sizeof eta, (double)(steps - step) / per_s));
    fflush(stdout);
}

static bool run_step(Run *R, int entry, int64_t rows) {
    int rc = R->lm->abi->run(R->lm->m, entry, (const void *const *)R->bufs, rows);
    if (rc != 0) {
        progress_clear(R);
        fprintf(stderr, "nnc: error: %s\n", R->lm->abi->error(R->lm->m));
        return false;
    }
    return true;
}

/* A non-scalar output (logits, predictions) has no single value for the set: it is reported
 * by shape, and with --eval-out gathered for the whole set.  Its samples are along a leading
 * batch axis; an output without a batch axis is written when every batch gives the same value
 * (a function of the parameters only), and otherwise not at all, rather than one batch's. */
typedef struct {
    bool scalar;                /* averaged into EvalResult.metric */
    bool lead_batch;            /* shape [B, ...]: one row per sample */
    bool batch_inside;          /* a batch axis that is not the first: cannot be concatenated */
    bool varies;                /* no batch axis, and the batches disagreed */
    bool missing;               /* the model returned no values for it (an input passed through) */
    int64_t elems;              /* per sample (lead_batch) or in all */
    size_t elem_bytes;
    char *data;                 /* gathered values (only with --eval-out) */
} OutValues;

typedef struct {
    double loss;
    double metric[16];
    OutValues out[16];
    bool has_loss;
} EvalResult;

/* The model's metrics and outputs, in eval's outputs after the loss (their roles say which):
 * metric j is output metric_first + j, as many as R->nouts. */
static const nnc_tensor_info *metric_info(const Run *R, int j) {
    return &R->lm->abi->outputs[NNC_ENTRY_EVAL][R->metric_first + j];
}

static bool is_count_metric(const Run *R, int j) { return metric_info(R, j)->role == NNC_ROLE_COUNT; }

static void eval_out_init(const Run *R, EvalResult *res, int64_t n) {
    for (int j = 0; j < R->nouts && j < 16; j++) {
        const nnc_tensor_info *t = metric_info(R, j);
        OutValues *o = &res->out[j];
        o->elems = 1;
        bool batched = false;
        for (int a = 0; a < t->rank; a++) { /* per sample: the batch axis B*k gives k */
            batched |= t->dims[a] < 0;
            o->elems *= tensor_dim(t->dims[a], 1);
        }
        o->scalar = t->role == NNC_ROLE_MEAN || t->role == NNC_ROLE_COUNT;
        o->lead_batch = batched && t->dims[0] < 0;
        o->batch_inside = batched && !o->lead_batch;
        o->elem_bytes = t->dtype == NNC_TYPE_I32 ? 4 : (size_t)R->lm->abi->real_bytes;
        if (R->o->eval_out && !o->scalar && !o->batch_inside)
            o->data = xmalloc((size_t)(o->lead_batch ? n : 1) * (size_t)o->elems * o->elem_bytes);
    }
}

/* Appends one batch's rows of a non-scalar output (or compares an unbatched one with the first). */
static void eval_out_add(const Run *R, OutValues *o, int k, int64_t start, int64_t rows) {
    const char *p = R->lm->abi->output(R->lm->m, NNC_ENTRY_EVAL, k);
    if (!o->data) return;
    if (!p) {
        o->missing = true;
        return;
    }
    size_t row = (size_t)o->elems * o->elem_bytes;
    if (o->lead_batch) memcpy(o->data + (size_t)start * row, p, (size_t)rows * row);
    else if (start == 0) memcpy(o->data, p, row);
    else o->varies |= memcmp(o->data, p, row) != 0;
}

/* Averages the loss and scalar metrics over the whole set: counts (accuracy) are summed and
 * divided by the number of samples, anything else is weighted by batch rows. */
static bool evaluate(Run *R, const Dataset *d, EvalResult *res) {
    const nnc_model_abi *abi = R->lm->abi;
    int64_t B = abi->batch_max;
    memset(res, 0, sizeof *res);
    res->has_loss = R->metric_first > 0;
    eval_out_init(R, res, d->n);
    /* data parallel: batch b is process b % size's, and the sums are added up after (every
     * process computes everything when --eval-out gathers per-sample outputs) */
    bool shard = R->size > 1 && !R->o->eval_out;
    for (int64_t s = 0; s < d->n; s += B) {
        int64_t rows = d->n - s < B ? d->n - s : B;
        if (shard && (s / B) % R->size != R->rank) continue;
        for (int64_t r = 0; r < rows; r++) R->idx[r] = s + r;
        gather(R, d, R->idx, rows);
        if (!run_step(R, NNC_ENTRY_EVAL, rows)) return false;
        if (res->has_loss) res->loss += read_scalar(R->lm, NNC_ENTRY_EVAL, 0) * (double)rows;
        for (int j = 0; j < R->nouts && j < 16; j++) {
            int k = R->metric_first + j;
            if (!res->out[j].scalar) {
                eval_out_add(R, &res->out[j], k, s, rows);
                continue;
            }
            double v = read_scalar(R->lm, NNC_ENTRY_EVAL, k);
            res->metric[j] += is_count_metric(R, j) ? v : v * (double)rows;
        }
    }
    if (shard) {
        double v[17];
        v[0] = res->loss;
        memcpy(v + 1, res->metric, sizeof res->metric);
        if (!comm_sum(R->comm, v, 17)) return false;
        res->loss = v[0];
        memcpy(res->metric, v + 1, sizeof res->metric);
    }
    res->loss /= (double)d->n;
    for (int j = 0; j < R->nouts && j < 16; j++) res->metric[j] /= (double)d->n;
    return true;
}

/* The --metrics file: one JSON object per line, {"type":"step",...}, built in R->mbuf and
 * written 64 KB at a time (and at every flush).  Numbers go through numfmt (printf's %.9g and
 * %.6f, several times faster): a microsecond step writes a line or two each time, and
 * printf's and stdio's costs per call would match the step's. */
#define METRICS_BUF (1 << 16)

static void metrics_flush(Run *R) {
    if (R->mlen) fwrite(R->mbuf, 1, R->mlen, R->metrics);
    R->mlen = 0;
    R->mflushed = true;
}

/* Most pieces are a few bytes (keys, digits): copied inline, without a call to memcpy. */
static inline void metric_put(Run *R, const char *s, size_t len) {
    if (R->mlen + len > METRICS_BUF) {
        metrics_flush(R);
        if (len > METRICS_BUF) {   /* an output name longer than the buffer */
            fwrite(s, 1, len, R->metrics);
            return;
        }
    }
    char *d = R->mbuf + R->mlen;
    if (len > 32) memcpy(d, s, len);
    else
        for (size_t i = 0; i < len; i++) d[i] = s[i];
    R->mlen += len;
}

static void metric_open(Run *R, const char *type) {
    metric_put(R, "{\"type\":\"", 9);
    metric_put(R, type, strlen(type));
    metric_put(R, "\"", 1);
}

/* ,"key": */
static void metric_key(Run *R, const char *key) {
    metric_put(R, ",\"", 2);
    metric_put(R, key, strlen(key));
    metric_put(R, "\":", 2);
}

static void metric_int(Run *R, const char *key, long long v) {
    char b[NUMFMT_LEN];   /* 24 would do: more, so no compiler doubts metric_put's long copy */
    int n = numfmt_int(b, v);
    metric_key(R, key);
    metric_put(R, b, (size_t)n);
}

/* %.9g, or %.6f; NaN and infinities as Python's json writes and reads them (NaN, Infinity,
 * -Infinity: a skipped f16 step's gradient norm is one), not C's "nan". */
static void metric_num(Run *R, const char *key, double v, bool fixed) {
    char b[NUMFMT_LEN];
    int n = isnan(v) ? snprintf(b, sizeof b, "NaN") : isinf(v) ? snprintf(b, sizeof b, "%sInfinity", v < 0 ? "-" : "")
          : fixed ? numfmt_f(b, v, 6) : numfmt_g(b, v, 9);
    metric_key(R, key);
    metric_put(R, b, (size_t)n);
}

/* A tail -f sees progress: at most every half second, lines go out (looked at every 64 lines
 * and at every epoch's end, so a microsecond step reads no clock). */
static void metrics_flush_due(Run *R, double secs) {
    if (secs - R->last_flush <= 0.5) return;
    metrics_flush(R);
    fflush(R->metrics);
    R->last_flush = secs;
}

static void metric_close(Run *R) {
    metric_put(R, "}\n", 2);
    if (!(++R->mlines & 63)) metrics_flush_due(R, train_now() - R->t0);
}

/* ---- --tensorboard: the same numbers as --metrics, as TensorBoard scalars ------------------
 * Per step (at the global step): train/loss, train/lr, train/step_ms (the wall time since the
 * previous step ended, data included), train/grad_norm and train/loss_scale where the model has
 * them.  Per epoch (at the epoch's number): epoch/loss, epoch/test_loss, one epoch/NAME per
 * scalar metric, epoch/lr, epoch/loss_scale, epoch/seconds.  --eval: eval/loss and eval/NAME
 * at the model's step.  A failed write (a full disk) stops the events, never the training: a
 * warning, and the run's exit status says the file is incomplete (as for --metrics). */

/* The rate the steps take when the schedule has set `lr` (R->lr, or what it was at a step). */
static double lr_taken(const Run *R, double lr) {
    const TrainConfig *t = R->t;
    return t->sched.kind != SCHED_NONE && t->opt.lr_state ? lr : t->opt.lr;
}

static double current_lr(const Run *R) { return lr_taken(R, R->lr); }

static void tb_done(Run *R, double now) {
    bool ok = tb_end(R->tb);
    if (ok && now - R->tb_flushed > 2) { /* a running TensorBoard follows within seconds */
        ok = tb_flush(R->tb);
        R->tb_flushed = now;
    }
    if (ok) return;
    char err[1200];
    progress_clear(R);
    R->tb_lost = R->lm->abi->get_step(R->lm->m);
    snprintf(err, sizeof err, "%s", tb_error(R->tb));
    fprintf(stderr, "nnc: warning: --tensorboard %s: cannot write %s: %s; training goes on without it (step %lld)\n",
            R->o->tensorboard, tb_path(R->tb), err, (long long)R->tb_lost);
    tb_close(R->tb, NULL, 0);
    R->tb = NULL;
    R->tb_failed = true;
}

static void tb_step(Run *R, int64_t gstep, double loss, double lr, double now) {
    if (!R->tb) return;
    tb_begin(R->tb, gstep);
    tb_scalar(R->tb, "train/loss", loss);
    tb_scalar(R->tb, "train/lr", lr_taken(R, lr));
    tb_scalar(R->tb, "train/step_ms", 1e3 * (now - R->t_step));
    if (R->norm_out >= 0) tb_scalar(R->tb, "train/grad_norm", read_scalar(R->lm, NNC_ENTRY_TRAIN, R->norm_out));
    if (R->scale_state >= 0) { /* the scale after this step (a GPU's is read back) */
        R->lm->abi->sync(R->lm->m, NNC_SYNC_TO_HOST);
        tb_scalar(R->tb, "train/loss_scale", state_scalar(R, R->scale_state));
    }
    tb_done(R, now);
}

/* Closes the events: false (reported) when anything was lost. */
static bool tb_finish(Run *R) {
    char err[1200];
    if (R->tb && !tb_close(R->tb, err, sizeof err)) {
        fprintf(stderr, "nnc: error: --tensorboard %s: cannot write %s\n", R->o->tensorboard, err);
        R->tb = NULL;
        return false;
    }
    R->tb = NULL;
    if (R->tb_failed)
        fprintf(stderr,
                "nnc: error: --tensorboard %s: incomplete: writing events failed at step %lld "
                "(training went on)\n",
                R->o->tensorboard, (long long)R->tb_lost);
    return !R->tb_failed;
}

/* The epoch's line (when `show`: --log-every thins them out), metrics and event records. */
static void report_epoch(Run *R, int epoch, int64_t step, double train_loss, const EvalResult *ev, bool has_eval,
                         bool show) {
    double secs = train_now() - R->t0;
    progress_clear(R);
    if (!R->o->quiet && show) {
        printf("epoch %d/%d  step %lld  loss %.6f", epoch, R->o->epochs, (long long)step, train_loss);
        if (has_eval) {
            if (ev->has_loss) printf("  test_loss %.6f", ev->loss);
            for (int j = 0; j < R->nouts && j < 16; j++)
                if (ev->out[j].scalar)   /* per-sample outputs have no one value: --eval shows them */
                    printf(is_count_metric(R, j) ? "  %s %.2f%%" : "  %s %.6f", metric_info(R, j)->name,
                           is_count_metric(R, j) ? 100 * ev->metric[j] : ev->metric[j]);
        }
        if (R->t->sched.kind != SCHED_NONE) printf("  lr %.4g", R->lr);
        if (R->scale_state >= 0)
            printf("  scale %g skipped %.0f", state_scalar(R, R->scale_state), state_scalar(R, R->skipped_state));
        printf("  %.2fs\n", secs);
        fflush(stdout);
    }
    if (R->metrics) {
        metric_open(R, "epoch");
        metric_int(R, "epoch", epoch);
        metric_int(R, "step", step);
        metric_num(R, "loss", train_loss, false);
        if (has_eval) {
            if (ev->has_loss) metric_num(R, "test_loss", ev->loss, false);
            for (int j = 0; j < R->nouts && j < 16; j++)
                if (ev->out[j].scalar) metric_num(R, metric_info(R, j)->name, ev->metric[j], false);
        }
        if (R->t->sched.kind != SCHED_NONE) metric_num(R, "lr", R->lr, false);
        if (R->scale_state >= 0) {
            metric_num(R, "loss_scale", state_scalar(R, R->scale_state), false);
            metric_int(R, "skipped_steps", (long long)state_scalar(R, R->skipped_state));
        }
        metric_num(R, "seconds", secs, true);
        metric_close(R);
        metrics_flush_due(R, secs);
    }
    if (R->tb) {
        tb_begin(R->tb, epoch);
        tb_scalar(R->tb, "epoch/loss", train_loss);
        if (has_eval && ev->has_loss) tb_scalar(R->tb, "epoch/test_loss", ev->loss);
        for (int j = 0; has_eval && j < R->nouts && j < 16; j++) {
            char tag[300];
            snprintf(tag, sizeof tag, "epoch/%s", metric_info(R, j)->name);
            if (ev->out[j].scalar) tb_scalar(R->tb, tag, ev->metric[j]);
        }
        tb_scalar(R->tb, "epoch/lr", current_lr(R));
        if (R->scale_state >= 0) tb_scalar(R->tb, "epoch/loss_scale", state_scalar(R, R->scale_state));
        tb_scalar(R->tb, "epoch/seconds", secs);
        R->tb_flushed = -1e9; /* every epoch's records go out at its end */
        tb_done(R, secs);
    }
}

/* "f32[10000,10]": the shape of a non-scalar output over a set of n samples. */
static const char *out_shape(const Run *R, int j, int64_t n, char *buf, size_t len) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)n);
    return tensor_shape_str(metric_info(R, j), b, buf, len);
}

static const char *out_not_written(const OutValues *o) {
    if (o->batch_inside) return "its batch axis is not the first";
    if (o->missing) return "the model returns no values for it";
    if (o->varies) return "it has no batch axis and differs between batches";
    return NULL;
}

/* Writes the gathered non-scalar outputs as one safetensors file, the set's loss and scalar
 * metrics as its metadata.  False (with a message) on failure. */
static bool write_eval_out(const Run *R, const Dataset *d, const EvalResult *ev) {
    nnc_st_tensor t[16];
    nnc_st_meta meta[17];
    char vals[17][32];
    int nt = 0, nm = 0;
    if (ev->has_loss) {
        snprintf(vals[nm], sizeof vals[nm], "%.9g", ev->loss);
        meta[nm] = (nnc_st_meta){"loss", vals[nm]};
        nm++;
    }
    for (int j = 0; j < R->nouts && j < 16; j++) {
        const OutValues *o = &ev->out[j];
        const nnc_tensor_info *info = metric_info(R, j);
        if (o->scalar) {
            snprintf(vals[nm], sizeof vals[nm], "%.9g", ev->metric[j]);
            meta[nm] = (nnc_st_meta){info->name, vals[nm]};
            nm++;
            continue;
        }
        if (!o->data || out_not_written(o)) continue;
        nnc_st_tensor *x = &t[nt++];
        *x = (nnc_st_tensor){.name = info->name, .rank = info->rank, .data = o->data};
        x->dtype = info->dtype == NNC_TYPE_I32 ? NNC_DT_I32 : o->elem_bytes == 8 ? NNC_DT_F64 : NNC_DT_F32;
        for (int a = 0; a < info->rank; a++) x->dims[a] = tensor_dim(info->dims[a], d->n);
    }
    char err[1024];
    if (nnc_st_save(R->o->eval_out, t, nt, meta, nm, err, sizeof err) == 0) return true;
    fprintf(stderr, "nnc: error: --eval-out: %s\n", err);
    return false;
}

/* The loss and scalar metrics as one number each; a non-scalar output by its shape, and
 * where --eval-out put it (or why it could not). */
static void report_eval(Run *R, const Dataset *d, bool test, const EvalResult *ev) {
    char sb[160];
    if (!R->o->quiet) {
        printf("eval on %s data (%lld samples):", test ? "test" : "training", (long long)d->n);
        if (ev->has_loss) printf("  loss %.6f", ev->loss);
        for (int j = 0; j < R->nouts && j < 16; j++) {
            const OutValues *o = &ev->out[j];
            if (o->scalar) {
                printf(is_count_metric(R, j) ? "  %s %.2f%%" : "  %s %.6f", metric_info(R, j)->name,
                       is_count_metric(R, j) ? 100 * ev->metric[j] : ev->metric[j]);
                continue;
            }
            printf("  %s %s", metric_info(R, j)->name, out_shape(R, j, d->n, sb, sizeof sb));
            if (!R->o->eval_out) printf(" (not a single number: --eval-out FILE writes it)");
            else if (out_not_written(o)) printf(" (not written: %s)", out_not_written(o));
            else printf(" -> %s", R->o->eval_out);
        }
        printf("\n");
    }
    if (R->metrics) {
        metric_open(R, "eval");
        metric_int(R, "samples", d->n);
        if (ev->has_loss) metric_num(R, "loss", ev->loss, false);
        for (int j = 0; j < R->nouts && j < 16; j++)
            if (ev->out[j].scalar) metric_num(R, metric_info(R, j)->name, ev->metric[j], false);
        metric_close(R);
    }
    if (R->tb) {
        tb_begin(R->tb, R->lm->abi->get_step(R->lm->m));
        if (ev->has_loss) tb_scalar(R->tb, "eval/loss", ev->loss);
        for (int j = 0; j < R->nouts && j < 16; j++) {
            char tag[300];
            snprintf(tag, sizeof tag, "eval/%s", metric_info(R, j)->name);
            if (ev->out[j].scalar) tb_scalar(R->tb, tag, ev->metric[j]);
        }
        tb_done(R, 0);
    }
}

static void eval_free(EvalResult *ev) {
    for (int j = 0; j < 16; j++)
        if (ev->out[j].data) {
            free(ev->out[j].data);
            ev->out[j].data = NULL;
        }
}

/* A failed metrics write (a full disk: every write is checked through the stream's error flag,
 * which a failed write of mbuf or a flush sets) must never cost the model: the metrics stop
 * there with a warning, and training goes on to its end and its --save.  metrics_close then
 * fails the run, so an incomplete file never hides behind an exit status of 0. */
static void metrics_check(Run *R) {
    if (!R->metrics || !R->mflushed) return;   /* the stream changes only when mbuf goes out */
    R->mflushed = false;
    if (!ferror(R->metrics)) return;
    int e = errno ? errno : EIO;
    progress_clear(R);
    R->metrics_lost = R->lm->abi->get_step(R->lm->m);
    fprintf(stderr, "nnc: warning: %s: cannot write metrics: %s; training goes on without them (step %lld)\n",
            R->o->metrics_path, strerror(e), (long long)R->metrics_lost);
    fclose(R->metrics);   /* fails too: what it held is lost either way */
    R->metrics = NULL;
    R->metrics_failed = true;
}

/* Flushes and closes the metrics file; false (reported) when anything was lost. */
static bool metrics_close(Run *R) {
    if (!R->metrics) {
        if (R->metrics_failed)
            fprintf(stderr, "nnc: error: %s: incomplete: writing metrics failed at step %lld (training went on)\n",
                    R->o->metrics_path, (long long)R->metrics_lost);
        return !R->metrics_failed;
    }
    errno = 0;
    metrics_flush(R);
    bool ok = fflush(R->metrics) == 0 && !ferror(R->metrics);
    int e = errno;
    ok &= fclose(R->metrics) == 0;
    if (!e) e = errno;
    R->metrics = NULL;
    if (!ok) fprintf(stderr, "nnc: error: %s: cannot write metrics: %s\n", R->o->metrics_path, strerror(e ? e : EIO));
    return ok;
}

/* Creates an empty, new file for a rescue copy in $TMPDIR (else /tmp): O_EXCL|O_NOFOLLOW, mode
 * 0600, so nobody else's file or link at that name is written through.  Its name goes to buf. */
static bool rescue_create(char *buf, size_t n) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    for (int k = 0; k < 100; k++) {
        if (k) snprintf(buf, n, "%s/nnc-rescue-%ld-%d.safetensors", tmp, (long)getpid(), k);
        else snprintf(buf, n, "%s/nnc-rescue-%ld.safetensors", tmp, (long)getpid());
        int fd = open(buf, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            close(fd);
            return true;
        }
        if (errno != EEXIST) return false;
    }
    return false;
}

/* Saves to --save; when that fails (the disk filled, the directory went away), the trained
 * model is not lost: it goes to a rescue file whose name is printed, and the run still fails. */
static bool save_now(Run *R) {
    char err[1024], why[1024], rescue[1100];
    /* the records so far go out before the checkpoint: a run killed after the save has them,
     * and --resume keeps exactly the records up to the checkpoint's step (resuming a finished
     * run writes none) */
    if (R->metrics) {
        metrics_flush(R);
        fflush(R->metrics);
        metrics_check(R);
    }
    if (R->o->no_write) return true;   /* data parallel: process 0 writes */
    if (checkpoint_save(R->lm, R->o->save_path, &R->pos, R->o->save_half, &R->hp, err, sizeof err)) return true;
    fprintf(stderr, "nnc: error: %s\n", err);
    if (!checkpoint_params_finite(R->lm, why, sizeof why)) return false;   /* nothing worth keeping */
    if (rescue_create(rescue, sizeof rescue) &&
        checkpoint_save(R->lm, rescue, &R->pos, R->o->save_half, &R->hp, why, sizeof why))
        fprintf(stderr, "nnc: the trained model was saved to %s instead\n", rescue);
    else {
        if (rescue[0]) unlink(rescue);
        fprintf(stderr, "nnc: error: could not save a rescue copy in $TMPDIR either\n");
    }
    return false;
}

/* Ctrl-C or SIGTERM, agreed by the processes: said, and the checkpoint saved; false (the run stops). */
static bool stop_now(Run *R, int epoch, int64_t gstep) {
    comm_mark_agreed(R->comm);
    if (R->o->no_write) return false; /* process 0 says it */
    progress_clear(R);
    fprintf(stderr, "nnc: %s at epoch %d, step %lld%s\n", interrupted == SIGTERM ? "terminated" : "interrupted", epoch,
            (long long)gstep, R->o->save_path ? "; saving" : "");
    if (R->o->save_path && save_now(R)) fprintf(stderr, "nnc: saved %s (continue with --resume)\n", R->o->save_path);
    return false;
}

/* --save must be able to take the checkpoint before hours of training are spent: what is there
 * now must be nothing or a regular file (never a FIFO, a device or a directory, which a save
 * would replace or fail on), and its directory must take a new file: a probe file is created
 * (O_EXCL, in the directory of the file the save will replace, links followed) and removed. */
static bool save_dest_check(const char *path, char *err, size_t n) {
    char why[1024];
    if (nnc_st_dest_check(path, why, sizeof why) != 0) {
        snprintf(err, n, "--save %s (checked before training)", why);
        return false;
    }
    char *real = realpath(path, NULL), dir[4096], probe[4200];
    const char *p = real ? real : path, *slash = strrchr(p, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else snprintf(dir, sizeof dir, "%.*s", slash == p ? 1 : (int)(slash - p), p);
    free(real);
    snprintf(probe, sizeof probe, "%s/.nnc-save-probe-%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(err, n, "--save %.900s: cannot create a file in directory '%.900s': %s (checked before training)", path,
                 dir, strerror(errno));
        return false;
    }
    close(fd);
    unlink(probe);
    return true;
}

/* The loss can stay finite while a parameter is NaN (a ReLU or a max hides it): check the
 * parameters themselves once per epoch, an O(parameters) scan, before anything reports or
 * saves the epoch as a success. */
static bool params_finite(Run *R, int epoch) {
    char err[512];
    if (checkpoint_params_finite(R->lm, err, sizeof err)) return true;
    comm_mark_agreed(R->comm);   /* the parameters are the same everywhere */
    if (R->o->no_write) return false;
    progress_clear(R);
    fprintf(stderr, "nnc: error: %s after epoch %d, step %lld; training stopped, nothing saved "
                    "(lower the learning rate, or find the op with --check-numerics)\n",
            err, epoch, (long long)R->lm->abi->get_step(R->lm->m));
    return false;
}

/* Between steps: a faster build of the model, if one is on its way and ready (every 10 ms at
 * most; a test may make one step wait for it). */
static void poll_upgrade(Run *R) {
    if (!R->lm->upgrade) return;
    bool wait = R->wait_step >= 0 && R->lm->abi->get_step(R->lm->m) >= R->wait_step;
    double t = train_now();
    if (!wait && t - R->last_poll < 0.01) return;
    R->last_poll = t;
    char err[64];
    if (R->lm->upgrade(R->lm, wait, err, sizeof err) && !R->o->quiet) {
        progress_clear(R);
        fprintf(stderr, "nnc: the -O3 build takes over after step %lld (it compiled while the -O1 build trained)\n",
                (long long)R->lm->abi->get_step(R->lm->m));
    }
}

/* One batch of `rows` rows from `at` in the epoch's order through `entry` (train_step, or an
 * accumulate call for a group's earlier micro-batches): this process's share of it, its loss
 * in *loss and that times its rows in *part.  An accumulate call on a share of nothing is
 * skipped: it has no collective to take part in, and a row at weight 0 would still add its
 * gradient to the group's. */
static bool run_batch(Run *R, const Dataset *d, int entry, int64_t at, int64_t rows, double *loss, double *part) {
    Share sh = share_of(R, rows);
    *loss = *part = 0;
    if (entry == NNC_ENTRY_ACCUM && !sh.mine) return true;
    int64_t off = at + sh.first;
    bool ok;
    if (!R->o->shuffle && R->lm->abi->real_bytes == 4 && dataset_direct(d, off, R->direct)) {
        void **saved = R->bufs; /* samples in order and already f32/i32: no copy */
        R->bufs = R->direct;
        ok = run_step(R, entry, sh.use);
        R->bufs = saved;
    } else {
        gather(R, d, R->perm + off, sh.use);
        ok = run_step(R, entry, sh.use);
    }
    if (!ok) return false;
    *loss = read_scalar(R->lm, entry, 0);
    *part = sh.mine ? *loss * (double)sh.mine : 0;
    return true;
}

/* An epoch in progress, as its steps' records see it. */
typedef struct {
    int epoch;
    int64_t steps; /* its optimizer steps (from where it started) */
    int64_t done_rows; /* rows whose losses are in sum */
    double sum; /* their loss * rows */
    double t_start, last_draw; /* the progress line's clock */
    bool bar;
    long log_every;
} Epoch;

/* An optimizer step that has run: what its records say. */
typedef struct {
    int64_t s; /* its index in the epoch */
    int64_t gstep; /* the step counter after it */
    int64_t end; /* the epoch's sample after its last batch */
    int64_t group; /* its rows */
    double loss; /* the mean over them */
    double lr; /* R->lr when it was queued: the rate it took */
} StepDone;

/* A step's records, in the order a user sees them: the stop on a non-finite loss, its metrics
 * and events, a save that is due, a stop that was asked for, progress.  `ahead`: a call of
 * the next step is queued already (pipelined calls), so a stop asked for now waits for that
 * step, as if the signal had come while it ran.  False: stop (with its message printed). */
static bool step_record(Run *R, Epoch *E, const StepDone *st, bool ahead) {
    const nnc_model_abi *abi = R->lm->abi;
    if (!isfinite(st->loss)) {
        comm_mark_agreed(R->comm);
        if (R->o->no_write) return false;
        progress_clear(R);
        fprintf(stderr,
                "nnc: error: the loss became %s at epoch %d, step %lld; training stopped "
                "(lower the learning rate, or find the op with --check-numerics)\n",
                isnan(st->loss) ? "NaN" : "infinite", E->epoch, (long long)st->gstep);
        return false;
    }
    E->sum += st->loss * (double)st->group;
    E->done_rows += st->group;
    R->pos = (TrainPos){E->epoch, (long long)st->end, R->o->seed, true, E->sum};
    if (R->metrics) {
        metric_open(R, "step");
        metric_int(R, "epoch", E->epoch);
        metric_int(R, "step", st->gstep);
        metric_num(R, "loss", st->loss, false);
        if (R->norm_out >= 0) metric_num(R, "grad_norm", read_scalar(R->lm, NNC_ENTRY_TRAIN, R->norm_out), false);
        if (R->t->sched.kind != SCHED_NONE && R->t->sched.interval == SCHED_PER_STEP)
            metric_num(R, "lr", st->lr, false); /* the rate this step took */
        if (R->scale_state >= 0) { /* the scale after this step (a GPU's is read back) */
            abi->sync(R->lm->m, NNC_SYNC_TO_HOST);
            metric_num(R, "loss_scale", state_scalar(R, R->scale_state), false);
            metric_int(R, "skipped_steps", (long long)state_scalar(R, R->skipped_state));
        }
        metric_close(R);
    }
    metrics_check(R);
    if (R->tb) {
        double now = train_now();
        tb_step(R, st->gstep, st->loss, st->lr, now - R->t0);
        R->t_step = now - R->t0;
    }
    /* save_now writes the step's records out before its checkpoint */
    bool save_due = R->o->save_every > 0 && st->gstep % R->o->save_every == 0;
    if (save_due && !save_now(R)) return false;
    if (st->gstep == R->signal_step) raise(SIGINT); /* a test's Ctrl-C at an exact step */
    /* a stop asked for: after this step, or at an epoch's last step after the epoch's records
     * (its mean loss and evaluation), which a resumed run, starting at the next epoch, would not
     * write: a run stopped there and resumed then records what the uninterrupted run records */
    if (interrupted && !ahead && st->s + 1 == E->steps) R->stop_after_epoch = interrupted;
    else if (interrupted && !ahead) return stop_now(R, E->epoch, st->gstep);
    if (E->bar || E->log_every) {
        double t = train_now();
        bool log = E->log_every && st->gstep % E->log_every == 0 && st->s + 1 < E->steps; /* the epoch's line ends it */
        if (log)
            progress_log(R, E->epoch, st->gstep, st->s + 1, E->steps, E->sum / (double)E->done_rows, t - E->t_start);
        if (E->bar && (log || t - E->last_draw > 0.1 || st->s + 1 == E->steps)) {
            progress_draw(R, E->epoch, st->s + 1, E->steps, E->sum / (double)E->done_rows, t - E->t_start);
            E->last_draw = t;
        }
    }
    return true;
}

/* ---- pipelined calls: the next batch queued before this one is waited for ------------------
 * On a target that computes beside the host (the ABI's submit: CUDA), each batch is gathered
 * straight into the model's pinned input ring and queued while the call before it runs; the
 * host waits for a call only after queuing the next one, then reads its loss and writes its
 * step's records, one call late, so the gather, the copy to the device and the host's records
 * overlap the device's step.  Everything a user sees is the same as without: each step's
 * records are written from that step's own outputs and rate, and the next step is not queued
 * ahead when something must see the parameters right after this one: the epoch's end
 * (evaluation), a save that is due, a stop already asked for.  A stop asked for while the next
 * step is queued happens after that step, as if the signal had come while it ran.  A
 * non-finite loss stops with the same message at the same step; the step queued after it
 * runs and is discarded (nothing is saved after such a stop).  Not used by data-parallel runs
 * (each step's loss is summed over the processes), nor when a loss scaler's state is recorded
 * every step, which reads the state right after its step; NNC_NO_PIPELINE=1 turns it off. */

/* A call queued and not yet finished, with what its step's records need. */
typedef struct {
    int entry;
    int64_t s, at, rows; /* its step's index in the epoch, its batch */
    int64_t gstep; /* the step counter once it is queued */
    double lr; /* R->lr then */
    bool refused; /* submit refused it: `msg` says why, reported in its turn */
    char msg[1024];
} Flight;

typedef struct {
    Flight q[NNC_PIPELINE_DEPTH]; /* oldest first */
    int n;
} Flights;

static bool pipelined(const Run *R) {
    const nnc_model_abi *a = R->lm->abi;
    const char *off = getenv("NNC_NO_PIPELINE");
    return a->submit && a->finish && a->input_buffer && !R->comm && !R->lm->upgrade &&
        !(R->scale_state >= 0 && (R->o->metrics_path || R->tb)) && !(off && *off && strcmp(off, "0"));
}

/* ---- the training set kept in the device's memory (data_on_device) ------------------------------
 * On a pipelined target that keeps inputs (the ABI's keep: CUDA on one GPU), the training set is
 * copied to the GPU once, as it is held here (8-bit samples as bytes, a token stream once for
 * the columns it feeds), and each call sends only its rows' starts: the batch is gathered on the
 * device, so no batch crosses the bus.  `auto` keeps it when it takes at most a quarter of the
 * GPU's free memory, `true` always (an error when it cannot), `false` never.  The numbers are the
 * host gather's, bit for bit (the device makes the same floats of the same bytes). */

/* The source a column's samples come from, as the ABI's keep takes it. */
static void column_source(const Column *col, int64_t n, const void **data, int64_t *elems, int *type) {
    if (col->stream) {
        *data = col->stream->tokens, *elems = col->stream->ntok, *type = NNC_TYPE_I32;
        return;
    }
    *data = col->data, *elems = n * col->row_elems;
    *type = col->bytes ? NNC_TYPE_U8 : col->dtype;
}

/* Keeps every column on the device where the run and the setting ask for it; false (said) when
 * data_on_device = true cannot be done. */
static bool keep_dataset(Run *R, const Dataset *d) {
    const nnc_model_abi *a = R->lm->abi;
    const int want = R->t->data_on_device;
    R->kept = false;
    if (want == DATA_DEV_OFF || !a->keep || !a->submit_rows) return true; /* the CPU reads the set in place */
    if (!R->pipe || a->ninputs != d->ncols) {
        if (want == DATA_DEV_ON && !R->o->quiet)
            fprintf(stderr,
                    "nnc: note: data_on_device = true: this run's calls are not pipelined%s, so each batch "
                    "goes up from the host\n",
                    R->comm ? " (data parallel)" : "");
        return true;
    }
    for (int c = 0; c < d->ncols; c++) a->keep(R->lm->m, c, NULL, 0, 0, 0, 0); /* nothing shared with a set before */
    double bytes = 0;
    for (int c = 0; c < d->ncols; c++) {
        const void *data;
        int64_t elems;
        int type;
        column_source(&d->cols[c], d->n, &data, &elems, &type);
        bool shared = false; /* a token stream feeding two columns goes up once */
        for (int j = 0; j < c; j++) shared |= d->cols[j].stream && d->cols[j].stream == d->cols[c].stream;
        if (a->keep(R->lm->m, c, data, elems, type, d->cols[c].scale, want == DATA_DEV_AUTO) == 0) {
            bytes += shared ? 0 : (double)elems * (type == NNC_TYPE_U8 ? 1 : 4);
            continue;
        }
        if (want == DATA_DEV_ON) {
            fprintf(stderr, "nnc: error: data_on_device = true: %s\n", a->error(R->lm->m));
            return false;
        }
        if (R->o->verbose) fprintf(stderr, "nnc: the training set stays on the host (%s)\n", a->error(R->lm->m));
        for (int j = 0; j < c; j++) a->keep(R->lm->m, j, NULL, 0, 0, 0, 0);
        return true;
    }
    if (!R->starts) {
        R->starts = xcalloc((size_t)d->ncols + 1, sizeof *R->starts);
        for (int c = 0; c < d->ncols; c++) R->starts[c] = xmalloc((size_t)(a->batch_max + 1) * sizeof(int64_t));
    }
    R->kept = true;
    if (R->o->verbose)
        fprintf(stderr, "nnc: the training set is kept on the GPU (%.1f %s): each batch is gathered there\n",
                bytes < 1e6 ? bytes / 1e3 : bytes / 1e6, bytes < 1e6 ? "KB" : "MB");
    return true;
}

/* Samples idx[0..rows) as the rows' starts in every column's kept source. */
static const int64_t *const *kept_starts(Run *R, const Dataset *d, const int64_t *idx, int64_t rows) {
    for (int c = 0; c < d->ncols; c++) {
        const Column *col = &d->cols[c];
        const TokenStream *ts = col->stream;
        int64_t *s = R->starts[c];
        for (int64_t r = 0; r < rows; r++)
            s[r] = ts ? (ts->offsets ? ts->offsets[idx[r]] : idx[r] * ts->T) + col->shift : idx[r] * col->row_elems;
    }
    return (const int64_t *const *)R->starts;
}

/* Gathers the batch at `at` into the model's input ring and queues it (a refusal is kept for
 * its turn, so that the step before it is recorded first, as when each call ran to its end). */
static void flight_submit(Run *R, const Dataset *d, Flights *F, int entry, int64_t s, int64_t at, int64_t rows) {
    const nnc_model_abi *abi = R->lm->abi;
    Flight *f = &F->q[F->n++];
    *f = (Flight){.entry = entry, .s = s, .at = at, .rows = rows, .lr = R->lr};
    if (R->kept) {
        f->refused = abi->submit_rows(R->lm->m, entry, kept_starts(R, d, R->perm + at, rows), rows) != 0;
        if (f->refused) snprintf(f->msg, sizeof f->msg, "%s", abi->error(R->lm->m));
        f->gstep = abi->get_step(R->lm->m);
        return;
    }
    void **saved = R->bufs;
    for (int c = 0; c < d->ncols; c++)
        if (!(R->ring[c] = abi->input_buffer(R->lm->m, c))) {
            f->refused = true;
            snprintf(f->msg, sizeof f->msg, "no input buffer for the next call: %s", abi->error(R->lm->m));
            return;
        }
    R->bufs = R->ring;
    gather(R, d, R->perm + at, rows);
    R->bufs = saved;
    f->refused = abi->submit(R->lm->m, entry, (const void *const *)R->ring, rows) != 0;
    if (f->refused) snprintf(f->msg, sizeof f->msg, "%s", abi->error(R->lm->m));
    f->gstep = abi->get_step(R->lm->m);
}

/* Waits for the oldest call: its Flight in *f and its loss; false (reported) when it failed. */
static bool flight_finish(Run *R, Flights *F, Flight *f, double *loss) {
    const nnc_model_abi *abi = R->lm->abi;
    *f = F->q[0];
    F->q[0] = F->q[1];
    F->n--;
    if (f->refused || abi->finish(R->lm->m) != 0) {
        progress_clear(R);
        fprintf(stderr, "nnc: error: %s\n", f->refused ? f->msg : abi->error(R->lm->m));
        return false;
    }
    *loss = read_scalar(R->lm, f->entry, 0);
    return true;
}

/* Finishes what is still queued, reporting nothing: the run has stopped before it. */
static void flights_drain(Run *R, Flights *F) {
    for (; F->n > 0; F->n--) {
        if (!F->q[0].refused) R->lm->abi->finish(R->lm->m);
        F->q[0] = F->q[1];
    }
}

/* Whether call c + 1, whose step starts a new one when `new_step`, may be queued before call
 * c is waited for: not past a step after which the parameters must be seen as they are. */
static bool may_queue_ahead(const Run *R, bool new_step) {
    if (!new_step) return true;
    int64_t gstep = R->lm->abi->get_step(R->lm->m); /* call c ended its step: the step counter after it */
    return !interrupted && !(R->o->save_every > 0 && gstep % R->o->save_every == 0);
}

/* The epoch's batches from `start` as pipelined calls (k per optimizer step, the last step's
 * fewer), each step recorded when its last call is finished. */
static bool train_epoch_pipelined(Run *R, Dataset *d, Epoch *E, int64_t start, int64_t batches, int64_t k) {
    int64_t B = R->gbatch, next = 0, group = 0;
    double sum_parts = 0;
    Flights F = {.n = 0};
    for (int64_t c = 0; c < batches; c++) {
        while (next <= c + 1 && next < batches && (next == c || may_queue_ahead(R, next % k == 0))) {
            int64_t s = next / k, nmicro = batches - s * k < k ? batches - s * k : k, at = start + next * B;
            if (next % k == 0 && !set_step_lr(R)) {
                flights_drain(R, &F);
                return false;
            }
            flight_submit(R, d, &F, next % k + 1 < nmicro ? NNC_ENTRY_ACCUM : NNC_ENTRY_TRAIN, s, at,
                          d->n - at < B ? d->n - at : B);
            next++;
        }
        Flight f;
        double loss;
        if (!flight_finish(R, &F, &f, &loss)) {
            flights_drain(R, &F);
            return false;
        }
        sum_parts += loss * (double)f.rows;
        group += f.rows;
        if (f.entry != NNC_ENTRY_TRAIN) continue;
        bool several = c % k > 0; /* one batch alone: its loss as read */
        StepDone st = {f.s, f.gstep, f.at + f.rows, group, several ? sum_parts / (double)group : loss, f.lr};
        sum_parts = 0;
        group = 0;
        if (!step_record(R, E, &st, F.n > 0)) {
            flights_drain(R, &F);
            return false;
        }
    }
    return true;
}

/* Runs one epoch from sample `start` of its order (non-zero when resuming mid-epoch; batches
 * are counted from there, so a resumed run may use another batch size).  `sum0`, when given,
 * is the loss * rows of the samples before `start`, so that the epoch's mean is the whole
 * epoch's, as the uninterrupted run reports it.  With accumulate = k each optimizer step takes
 * k batches (micro-batches: k - 1 accumulate calls, then train_step), and the epoch's last step
 * takes what is left, as a torch loop that steps at (i + 1) % k == 0 or at the epoch's last
 * batch; the step's loss is the mean over its rows. */
static bool train_epoch(Run *R, Dataset *d, int epoch, int64_t start, const double *sum0, double *mean_loss) {
    int64_t B = R->gbatch, k = R->t->accumulate > 1 ? R->t->accumulate : 1;
    int64_t batches = (d->n - start + B - 1) / B, steps = (batches + k - 1) / k;
    /* a token stream shuffles by drawing random windows (its order stays 0, 1, ...), the rest
     * by a permutation of the samples */
    if (R->o->shuffle && !dataset_windows_draw(d, R->o->seed, epoch))
        nnc_rng_permutation(R->perm, d->n, R->o->seed, 0x5348554646ULL + (uint64_t)epoch);
    Epoch E = {.epoch = epoch,
               .steps = steps,
               .done_rows = sum0 ? start : 0,
               .sum = sum0 ? *sum0 : 0,
               .bar = R->o->progress && !R->o->quiet,
               .log_every = R->o->quiet ? 0 : R->o->log_every};
    E.t_start = E.bar || E.log_every ? train_now() : 0;
    R->bar_width = 30;
    R->t_step = train_now() - R->t0;
    if (R->pipe && !train_epoch_pipelined(R, d, &E, start, batches, k)) return false;
    for (int64_t s = 0; !R->pipe && s < steps; s++) {
        poll_upgrade(R); /* between groups: a new build starts with no micro-batch accumulated */
        if (!set_step_lr(R)) return false;
        int64_t first = s * k, nmicro = batches - first < k ? batches - first : k, at = 0, rows = 0, group = 0;
        double loss = 0, part, parts = 0;
        for (int64_t j = 0; j < nmicro; j++) {
            at = start + (first + j) * B, rows = d->n - at < B ? d->n - at : B;
            if (!run_batch(R, d, j + 1 < nmicro ? NNC_ENTRY_ACCUM : NNC_ENTRY_TRAIN, at, rows, &loss, &part))
                return false;
            parts += part;
            group += rows;
        }
        if (nmicro > 1 || R->size > 1) loss = parts / (double)group; /* one batch alone: its loss as read */
        if (R->size > 1) { /* the step's loss, and a stop any process was asked for: for all */
            double v[3] = {parts, interrupted != 0, interrupted == SIGTERM};
            if (!comm_sum(R->comm, v, 3)) return false;
            loss = v[0] / (double)group;
            if (v[1] > 0) interrupted = v[2] > 0 ? SIGTERM : SIGINT;
        }
        StepDone st = {s, R->lm->abi->get_step(R->lm->m), at + rows, group, loss, R->lr};
        if (!step_record(R, &E, &st, false)) return false;
    }
    *mean_loss = E.done_rows ? E.sum / (double)E.done_rows : NAN;
    return true;
}

static void alloc_bufs(Run *R, const Dataset *d) {
    int64_t B = R->lm->abi->batch_max;
    R->bufs = xcalloc((size_t)d->ncols + 1, sizeof(void *));
    size_t elem = R->lm->abi->real_bytes == 8 ? 8 : 4;   /* f64 models: widened in gather() */
    for (int c = 0; c < d->ncols; c++) R->bufs[c] = xmalloc((size_t)(B * d->cols[c].row_elems) * elem);
    R->idx = xmalloc((size_t)(B > d->n ? B : d->n + 1) * sizeof(int64_t));
    R->perm = xmalloc((size_t)(d->n + 1) * sizeof(int64_t));
    for (int64_t i = 0; i < d->n; i++) R->perm[i] = i;   /* the order, unless shuffled per epoch */
    R->direct = xcalloc((size_t)d->ncols + 1, sizeof(void *));
    R->ring = xcalloc((size_t)d->ncols + 1, sizeof(void *));
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Bytes of input i at `rows` rows (f32 inputs in the model's real). */
static size_t input_bytes(const nnc_model_abi *a, int i, int64_t rows) {
    const nnc_tensor_info *t = &a->inputs[i];
    size_t n = t->dtype == NNC_TYPE_I32 ? 4 : (size_t)a->real_bytes;
    for (int k = 0; k < t->rank; k++) n *= (size_t)tensor_dim(t->dims[k], rows);
    return n;
}

/* --bench on a pipelined target: the batch copied into the model's input ring (across cores, as
 * training's gather is) and queued, then the step before it waited for and its loss read. */
static bool bench_queue(Run *R, const Dataset *d, int64_t use) {
    const nnc_model_abi *a = R->lm->abi;
    if (R->kept) return a->submit_rows(R->lm->m, NNC_ENTRY_TRAIN, kept_starts(R, d, R->idx, use), use) == 0;
    for (int i = 0; i < a->ninputs; i++) {
        if (!(R->ring[i] = a->input_buffer(R->lm->m, i))) return false;
        par_memcpy(R->ring[i], R->bufs[i], input_bytes(a, i, use));
    }
    return a->submit(R->lm->m, NNC_ENTRY_TRAIN, (const void *const *)R->ring, use) == 0;
}

static bool bench_wait(Run *R) {
    if (R->lm->abi->finish(R->lm->m) != 0) return false;
    (void)read_scalar(R->lm, NNC_ENTRY_TRAIN, 0);
    return true;
}

/* The loop's median step, as training runs it: each iteration queues a step and waits for the
 * one before (the first step alone, for first_step_s). */
static bool bench_pipelined(Run *R, const Dataset *d, int64_t use, int n, double *t, double *first) {
    if (!bench_queue(R, d, use) || !bench_wait(R)) {
        fprintf(stderr, "nnc: error: %s\n", R->lm->abi->error(R->lm->m));
        return false;
    }
    *first = train_now() - R->o->t_process;
    bool ok = bench_queue(R, d, use);
    for (int i = 0; ok && i < 9 + n; i++) {
        double a = train_now();
        ok = bench_queue(R, d, use) && bench_wait(R);
        if (i >= 9) t[i - 9] = train_now() - a;
    }
    if (ok && bench_wait(R)) return true;
    fprintf(stderr, "nnc: error: %s\n", R->lm->abi->error(R->lm->m));
    for (int i = 0; i < NNC_PIPELINE_DEPTH; i++) R->lm->abi->finish(R->lm->m); /* what is left, if anything */
    return false;
}

/* --bench N: time N training steps on the first batch after a warm-up; one JSON line out, or
 * with --profile the profile of the step on that batch (TrainOpts.profile).  On a pipelined
 * target a step is one turn of training's loop (bench_pipelined): the batch into the input
 * ring, queued, the step before waited for and its loss read, so the median is the loop's time
 * per step.  Data parallel: each process times its share of the batch, and the time its
 * collectives took (waiting for the other processes included) is reported beside: the
 * allreduce's share. */
static int bench(Run *R, const Dataset *d) {
    int64_t B = R->gbatch, rows = d->n < B ? d->n : B;
    Share sh = share_of(R, rows);
    int64_t use = sh.use;
    for (int64_t r = 0; r < use; r++) R->idx[r] = sh.first + r;
    gather(R, d, R->idx, use);
    int n = R->o->bench_steps;
    double *t = xmalloc((size_t)n * sizeof *t), *c = xmalloc((size_t)n * sizeof *c);
    double first = 0;
    R->pipe = pipelined(R) && R->lm->abi->ninputs <= d->ncols;
    memset(c, 0, (size_t)n * sizeof *c);
    if (R->pipe && !keep_dataset(R, d)) return 1;
    if (R->pipe && !bench_pipelined(R, d, use, n, t, &first)) return 1;
    for (int i = 0; !R->pipe && i < 10; i++) {
        if (!run_step(R, NNC_ENTRY_TRAIN, use)) return 1;
        if (i == 0) first = train_now() - R->o->t_process;
        if (i == 0 && R->lm->upgrade) R->lm->upgrade(R->lm, true, NULL, 0);   /* time the build training ends on */
    }
    comm_take_seconds(R->comm);
    for (int i = 0; !R->pipe && i < n; i++) {
        double a = train_now();
        if (!run_step(R, NNC_ENTRY_TRAIN, use)) return 1;
        t[i] = train_now() - a;
        c[i] = comm_take_seconds(R->comm);
    }
    qsort(t, (size_t)n, sizeof *t, compare_double);
    qsort(c, (size_t)n, sizeof *c, compare_double);
    const TrainProfile *prof = R->o->profile;
    if (prof && !prof->run(prof->ctx, (const void *const *)R->bufs, use, t[n / 2])) {
        free(t);
        free(c);
        return 1;
    }
    if (R->rank == 0 && !prof) {
        printf("{\"steps\":%d,\"batch\":%lld,\"median_us\":%.3f,\"min_us\":%.3f,\"max_us\":%.3f,\"first_step_s\":%.6f",
               n, (long long)rows, 1e6 * t[n / 2], 1e6 * t[0], 1e6 * t[n - 1], first);
        if (R->comm) printf(",\"processes\":%d,\"allreduce_median_us\":%.3f", R->size, 1e6 * c[n / 2]);
        printf("}\n");
    }
    free(t);
    free(c);
    return 0;
}

/* Data parallel: every process must start from the same parameters and optimizer state (the
 * same seed, the same checkpoint); a checksum of both is compared across them, and a mismatch
 * stops all of them before the first step. */
static bool same_start(Run *R) {
    const nnc_model_abi *a = R->lm->abi;
    a->sync(R->lm->m, NNC_SYNC_TO_HOST);
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a over the bytes */
    for (int i = 0; i < a->nparams + a->nstates; i++) {
        const nnc_tensor_info *t = i < a->nparams ? &a->params[i] : &a->states[i - a->nparams];
        const unsigned char *p = i < a->nparams ? a->param(R->lm->m, i) : a->state(R->lm->m, i - a->nparams);
        for (size_t k = 0, bytes = nnc_tensor_bytes(t); k < bytes; k++) h = (h ^ p[k]) * 1099511628211ULL;
    }
    uint64_t lo, hi;
    if (!comm_agree_u64(R->comm, h, &lo, &hi)) return false;
    if (lo == hi) return true;
    comm_mark_agreed(R->comm);
    if (R->rank == 0)
        fprintf(stderr, "nnc: error: the %d processes start from different parameters (checksums %016llx .. %016llx): "
                        "every process must use the same seed and read the same checkpoint\n", R->size,
                (unsigned long long)lo, (unsigned long long)hi);
    return false;
}

static void free_run(Run *R, const Dataset *d) {
    for (int c = 0; R->bufs && c < d->ncols; c++) free(R->bufs[c]);
    for (int c = 0; R->starts && c < d->ncols; c++) free(R->starts[c]);
    free(R->starts);
    free(R->bufs);
    free(R->idx);
    free(R->perm);
    free(R->direct);
    free(R->ring);
    free(R->mbuf);
    if (R->metrics) fclose(R->metrics);   /* only on paths that already failed */
}

/* Resuming: each hyperparameter the checkpoint records with another value than this run's,
 * one line each (the run goes on with its own, as the user asked for them). */
static void hparams_compare(const Run *R, const char *from, const CkptInfo *info) {
    if (R->o->no_write) return;   /* process 0 says it */
    if (!info->has_hparams) {
        fprintf(stderr, "nnc: note: %s records no hyperparameters (written by another program or an older nnc): "
                        "nothing to check this run's optimizer, learning rate and batch against\n", from);
        return;
    }
    for (int i = 0; i < R->hp.n; i++) {
        const char *was = hparams_get(&info->hparams, R->hp.p[i].key);
        if (was && strcmp(was, R->hp.p[i].value))
            fprintf(stderr, "nnc: warning: resuming %s: %s was %s, now %s\n", from, R->hp.p[i].key, was,
                    R->hp.p[i].value);
    }
}

/* Loads `from` (--load's file, or --resume's: resuming) into the model and *start.  Resuming
 * needs the optimizer state as well: without it momentum and Adam's moments would go on from
 * zero as if nothing were missing.  --resume-fresh-optimizer takes the parameters and the
 * position only and starts the optimizer fresh, at step 0 (Adam's bias correction restarts, as
 * with a new torch.optim.Adam), and says so.  False with the error printed. */
static bool load_start(Run *R, const char *from, bool resuming, TrainPos *start) {
    const TrainOpts *o = R->o;
    bool fresh = resuming && o->fresh_optimizer, train = !o->eval_only && o->bench_steps <= 0;
    char err[2048];
    CkptInfo info;
    if (!checkpoint_load(R->lm, from, !o->eval_only && !fresh, start, &info, err, sizeof err)) {
        fprintf(stderr, "nnc: error: %s\n", err);
        return false;
    }
    if (!resuming || !train) return true;
    hparams_compare(R, from, &info);
    if (!fresh && !info.states_missing) return true;
    if (fresh) {
        const char *had = !info.states ? "this optimizer has none"
                        : info.states_missing == info.states ? "it holds none"
                        : info.states_missing ? "what it holds is not used" : "it is not used";
        if (!o->no_write)
            fprintf(stderr, "nnc: warning: --resume-fresh-optimizer: the optimizer starts fresh at step 0 "
                            "(%s's optimizer state: %s)\n", from, had);
        return true;
    }
    comm_mark_agreed(R->comm);   /* every process read the same file */
    if (!o->no_write)
        fprintf(stderr, "nnc: error: %s: cannot resume the optimizer: %d of its %d state tensors are missing "
                        "(the first: '%s'); a --save-dtype export or another program's file holds parameters "
                        "only. --resume-fresh-optimizer starts the optimizer fresh from these parameters\n",
                from, info.states_missing, info.states, info.first_missing);
    return false;
}

/* The "step" of a --metrics line nnc wrote, or -1 for a line without one (cut short by a kill). */
static long long metrics_line_step(const char *line, size_t len) {
    if (!len || line[len - 1] != '\n') return -1;
    const char *k = strstr(line, "\"step\":"); /* getline ends the line with a 0 */
    if (!k) return -1;
    char *end;
    long long v = strtoll(k + 7, &end, 10);
    return end == k + 7 ? -1 : v;
}

/* --metrics FILE with --resume: the file the interrupted run wrote keeps its records up to the
 * checkpoint's step (what the resumed run would otherwise write again, or a line a kill cut
 * short, goes), so that the resumed run's file reads as the uninterrupted run's.  Rewritten
 * beside and renamed over, then opened for appending.  Any other run starts the file afresh. */
static FILE *metrics_open(const char *path, long long keep_upto) {
    if (keep_upto < 0) return fopen(path, "w");
    FILE *in = fopen(path, "r");
    if (!in) return errno == ENOENT ? fopen(path, "w") : NULL;
    size_t tlen = strlen(path) + 16;
    char *tmp = xmalloc(tlen);
    snprintf(tmp, tlen, "%s.resume~", path);
    FILE *out = fopen(tmp, "w");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    bool ok = out != NULL;
    while (ok && (len = getline(&line, &cap, in)) > 0) {
        long long st = metrics_line_step(line, (size_t)len);
        if (st >= 0 && st <= keep_upto) ok = fwrite(line, 1, (size_t)len, out) == (size_t)len;
    }
    ok = ok && !ferror(in);
    free(line);
    fclose(in);
    if (out && fclose(out) != 0) ok = false;
    if (ok && rename(tmp, path) != 0) ok = false;
    if (!ok) {
        int e = errno;
        unlink(tmp);
        errno = e;
    }
    free(tmp);
    return ok ? fopen(path, "a") : NULL;
}

/* The test set, loaded in a thread beside the training set (a .gz's inflate is single-threaded). */
typedef struct {
    const TrainConfig *t;
    const nnc_model_abi *model;
    uint64_t seed;
    const char *cache_dir;
    Dataset d;
    bool ok;
    char err[2048];
} TestLoad;

static void *load_test(void *arg) {
    TestLoad *t = arg;
    t->ok = dataset_load(t->t, t->model, true, t->seed, t->cache_dir, &t->d, t->err, sizeof t->err);
    return NULL;
}

/* Both sets, or false with the error printed (the training set's first).  Both are checked
 * before the first step, as when they loaded one after the other. */
static bool load_data(const TrainConfig *t, const nnc_model_abi *model, const TrainOpts *o, bool has_test,
                      Dataset *train, Dataset *test) {
    char err[2048];
    TestLoad tl = {.t = t, .model = model, .seed = o->seed, .cache_dir = o->cache_dir, .ok = true};
    pthread_t th;
    bool threaded = has_test && pthread_create(&th, NULL, load_test, &tl) == 0;
    bool ok = dataset_load(t, model, false, o->seed, o->cache_dir, train, err, sizeof err);
    if (threaded) pthread_join(th, NULL);
    else if (has_test && ok) load_test(&tl);
    *test = tl.d;
    if (ok && tl.ok) return true;
    fprintf(stderr, "nnc: error: %s\n", ok ? tl.err : err);
    dataset_free(train);
    dataset_free(test);
    return false;
}

/* Where eval's metrics and outputs are among its outputs: after the loss, as far as their roles
 * go (a --check-against build keeps every other value after them). */
static void find_metrics(Run *R, const nnc_model_abi *model) {
    const nnc_tensor_info *out = model->outputs[NNC_ENTRY_EVAL];
    int n = model->noutputs[NNC_ENTRY_EVAL];
    R->metric_first = n > 0 && out[0].role == NNC_ROLE_LOSS;
    for (R->nouts = 0; R->metric_first + R->nouts < n; R->nouts++) {
        int role = out[R->metric_first + R->nouts].role;
        if (role != NNC_ROLE_MEAN && role != NNC_ROLE_COUNT && role != NNC_ROLE_OUTPUT) break;
    }
}

int train_run(const TrainConfig *t, ModelRef *lm, const TrainOpts *o) {
    char err[2048];
    interrupted = 0; /* a library's process may train again after a stop */
    Run R = {.t = t,
             .lm = lm,
             .o = o,
             .t0 = train_now(),
             .comm = o->comm,
             .rank = comm_rank(o->comm),
             .size = comm_size(o->comm),
             .wait_step = -1,
             .signal_step = -1};
    const nnc_model_abi *model = lm->info ? lm->info : lm->abi; /* its tables, before its build is loaded */
    const char *ws = getenv("NNC_TIER_WAIT_STEP");
    if (ws && *ws) R.wait_step = strtol(ws, NULL, 10);
    const char *ss = getenv("NNC_TEST_SIGINT_STEP");
    if (ss && *ss) R.signal_step = strtol(ss, NULL, 10);
    Dataset train = {0}, test = {0};
    bool has_test = false;
    if (o->save_path && !o->no_write && !o->eval_only && o->bench_steps <= 0 && !save_dest_check(o->save_path, err, sizeof err)) {
        fprintf(stderr, "nnc: error: %s\n", err);
        return 1;
    }
    for (int i = 0; i < t->ndata; i++) has_test |= t->data[i].test.kind != SRC_NONE;
    if (!load_data(t, model, o, has_test, &train, &test)) return 1;
    if (!lm->abi && !(lm->upgrade && lm->upgrade(lm, true, err, sizeof err) && lm->abi)) {   /* read while it compiled */
        fprintf(stderr, "nnc: error: %s\n", err);
        dataset_free(&train);
        dataset_free(&test);
        return 1;
    }
    find_metrics(&R, lm->abi);
    R.scale_state = state_index(lm->abi, "scaler.scale");
    R.skipped_state = state_index(lm->abi, "scaler.skipped_steps");
    if (R.skipped_state < 0) R.scale_state = -1;
    R.norm_out = -1;
    for (int k = 0; k < lm->abi->noutputs[NNC_ENTRY_TRAIN]; k++)
        if (!strcmp(lm->abi->outputs[NNC_ENTRY_TRAIN][k].name, "grad_norm")) R.norm_out = k;
    R.gbatch = o->global_batch > 0 ? o->global_batch : lm->abi->batch_max;
    int64_t k = t->accumulate > 1 ? t->accumulate : 1;
    R.steps = (int64_t)o->epochs * (((train.n + R.gbatch - 1) / R.gbatch + k - 1) / k);
    if (o->run_steps) *o->run_steps = R.steps;
    hparams_of(&R.hp, t, R.gbatch, o->epochs, R.steps);
    if (!o->keep_params) {
        lm->abi->init(lm->m, o->seed);
        lm->abi->sync(lm->m, NNC_SYNC_TO_DEVICE);
    }
    TrainPos start = {1, 0, o->seed, false, 0};
    const char *from = o->load_path;
    if (o->resume && o->save_path && access(o->save_path, F_OK) == 0) from = o->save_path;
    if (o->eval_only && !from && lm->abi->nparams > 0 && !o->no_write)   /* a forgotten --load looks like a result */
        fprintf(stderr, "nnc: warning: --eval without --load: evaluating freshly initialised parameters (seed %llu)\n",
                (unsigned long long)o->seed);
    if (from && !load_start(&R, from, from == o->save_path, &start)) {
        dataset_free(&train);
        dataset_free(&test);
        return 1;
    }
    alloc_bufs(&R, &train);
    if (o->metrics_path) R.mbuf = xmalloc(METRICS_BUF);
    /* a run that goes on from its own checkpoint (not one whose optimizer starts again at step 0) */
    bool continuing = from && from == o->save_path && o->resume && !o->fresh_optimizer && !o->eval_only &&
        o->bench_steps <= 0 && start.epoch > 0;
    int rc = 0;
    if (R.comm && lm->abi->set_comm) lm->abi->set_comm(lm->m, comm_abi(R.comm));
    if (R.comm && !same_start(&R)) rc = 1;
    if (!rc && !o->eval_only && o->bench_steps <= 0 && !sched_check(&R)) rc = 1;
    if (!rc && !o->eval_only && o->bench_steps <= 0) accumulate_shares_note(&R, train.n);
    if (rc) {
    } else if (o->metrics_path &&
               !(R.metrics = metrics_open(o->metrics_path, continuing ? lm->abi->get_step(lm->m) : -1))) {
        fprintf(stderr, "nnc: error: %s: cannot write metrics: ", o->metrics_path);
        perror(NULL);
        rc = 1;
    } else if (o->tensorboard && o->bench_steps <= 0 && !(R.tb = tb_open(o->tensorboard, err, sizeof err))) {
        fprintf(stderr, "nnc: error: %s\n", err);
        rc = 1;
    } else if (o->bench_steps > 0) {
        rc = bench(&R, &train);
    } else if (o->eval_only) {
        EvalResult ev;
        const Dataset *d = has_test ? &test : &train;
        if (!evaluate(&R, d, &ev)) rc = 1;
        else if (o->eval_out && !o->no_write && !write_eval_out(&R, d, &ev)) rc = 1;
        else report_eval(&R, d, has_test, &ev);
        eval_free(&ev);
    } else {
        int e0 = 1;
        int64_t s0 = 0;
        if (from == o->save_path && o->resume && start.epoch > 0) {   /* continue where it stopped */
            if (start.seed != o->seed && !o->no_write)   /* process 0 says it, as for the other hyperparameters */
                fprintf(stderr, "nnc: warning: resuming a run of seed %llu with seed %llu\n", start.seed,
                        (unsigned long long)o->seed);
            if (start.samples > train.n) {
                fprintf(stderr, "nnc: error: %s: metadata nnc_epoch_samples is %lld, expected an integer in [0, %lld] "
                                "(the training set has %lld samples)\n", from, start.samples, (long long)train.n,
                        (long long)train.n);
                rc = 1;
            }
            e0 = start.samples >= train.n ? start.epoch + 1 : start.epoch;
            s0 = start.samples >= train.n ? 0 : start.samples;
            if (!o->quiet && rc == 0) printf("resuming from %s: epoch %d, sample %lld\n", from, e0, (long long)s0);
        }
        R.pipe = pipelined(&R);
        if (rc == 0 && !keep_dataset(&R, &train)) rc = 1;
        struct sigaction sa = {0}, old_int, old_term;
        sa.sa_handler = on_stop_signal;
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        R.pos = (TrainPos){e0 - 1, train.n, o->seed, false, 0};
        if (s0 == 0 && start.samples > 0 && start.has_loss_sum) /* resumed at an epoch's end: saved as it was */
            R.pos.has_loss_sum = true, R.pos.loss_sum = start.loss_sum;
        EvalResult ev = {0};   /* evaluate() clears it; eval_free leaves no pointer behind */
        for (int e = e0; e <= o->epochs && rc == 0; e++) {
            double loss;
            int64_t before = lm->abi->get_step(lm->m), after;
            const double *sum0 = e == e0 && s0 > 0 && start.has_loss_sum ? &start.loss_sum : NULL;
            if (!set_epoch_lr(&R, e)) rc = 1;
            else if (!train_epoch(&R, &train, e, e == e0 ? s0 : 0, sum0, &loss))
                rc = interrupted ? 128 + interrupted : 1;
            else if (!params_finite(&R, e)) rc = 1;
            else if (has_test && !evaluate(&R, &test, &ev)) rc = 1;
            else { /* --log-every N: the epochs in which a step that is a multiple of N ended, and the last */
                after = lm->abi->get_step(lm->m);
                bool show = !o->log_every || e == o->epochs || after / o->log_every > before / o->log_every;
                report_epoch(&R, e, after, loss, &ev, has_test, show);
            }
            eval_free(&ev);
            metrics_check(&R);
            /* stopped at the epoch's last step: after its records (a last epoch simply ends) */
            if (rc == 0 && R.stop_after_epoch && e < o->epochs) {
                interrupted = R.stop_after_epoch;
                stop_now(&R, e, lm->abi->get_step(lm->m));
                rc = 128 + interrupted;
            }
        }
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
        if (o->end) *o->end = R.pos;
        if (rc == 0 && o->save_path && !save_now(&R)) rc = 1;
    }
    if (!metrics_close(&R) && rc == 0) rc = 1;
    if (!tb_finish(&R) && rc == 0) rc = 1;
    free_run(&R, &train);
    dataset_free(&train);
    dataset_free(&test);
    return rc;
}
