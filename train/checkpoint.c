/* checkpoint.c - parameters (and optimizer state) to and from safetensors files.
 *
 * Parameters are saved under their .nn names ("fc1.weight"), so
 * model.load_state_dict(safetensors.torch.load_file(path)) works when the PyTorch module uses
 * the same names; optimizer state goes under "optimizer.<name>" and the step count, seed and
 * model name in the metadata, so a later run can resume, and the hyperparameters (hparams.c),
 * so that it can say what it changes.  The position within the epoch is kept in samples
 * (nnc_epoch_samples), so a run resumed with another --batch continues at the same sample;
 * every field is range-checked when read, and nnc_meta_crc32 covers them all. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/half.h"
#include "../io/safetensors.h"
#include "train.h"

static void to_st(const nnc_tensor_info *t, const void *data, int real_bytes, nnc_st_tensor *o, const char *name) {
    memset(o, 0, sizeof *o);
    o->name = name;
    o->dtype = t->dtype == NNC_TYPE_I32 ? NNC_DT_I32 : real_bytes == 8 ? NNC_DT_F64 : NNC_DT_F32;
    o->rank = t->rank;
    for (int i = 0; i < t->rank; i++) o->dims[i] = t->dims[i];
    o->data = data;
}

/* A diverged model must not be saved as if it were a result: the first NaN or Inf in any
 * parameter, by name and element.  The caller has synced the parameters to the host. */
static bool params_finite_on_host(const ModelRef *lm, char *err, size_t n) {
    const nnc_model_abi *a = lm->abi;
    for (int i = 0; i < a->nparams; i++) {
        int64_t cnt = 1;
        for (int d = 0; d < a->params[i].rank; d++) cnt *= a->params[i].dims[d];
        const void *p = a->param(lm->m, i);
        for (int64_t k = 0; p && k < cnt; k++) {
            double v = a->real_bytes == 8 ? ((const double *)p)[k] : (double)((const float *)p)[k];
            if (isfinite(v)) continue;
            snprintf(err, n, "parameter '%s' element %lld is %s", a->params[i].name, (long long)k,
                     isnan(v) ? "NaN" : "infinite");
            return false;
        }
    }
    return true;
}

bool checkpoint_params_finite(const ModelRef *lm, char *err, size_t n) {
    lm->abi->sync(lm->m, NNC_SYNC_TO_HOST);
    return params_finite_on_host(lm, err, n);
}

/* A parameter rounded to bf16 or f16 (nearest even) for a half export: the buffer is malloc'd. */
static void *to_half(const nnc_tensor_info *t, const void *src, int real_bytes, int half) {
    int64_t cnt = 1;
    for (int i = 0; i < t->rank; i++) cnt *= t->dims[i];
    uint16_t *h = xmalloc((size_t)(cnt ? cnt : 1) * 2);
    for (int64_t k = 0; k < cnt; k++) {
        float v = real_bytes == 8 ? (float)((const double *)src)[k] : ((const float *)src)[k];
        h[k] = half == NNC_DT_BF16 ? nnc_f32_to_bf16(v) : nnc_f32_to_f16(v);
    }
    return h;
}

bool checkpoint_save(const ModelRef *lm, const char *path, const TrainPos *tp, int half, const Hparams *hp, char *err,
                     size_t n) {
    const nnc_model_abi *a = lm->abi;
    a->sync(lm->m, NNC_SYNC_TO_HOST);
    char why[512];
    if (!params_finite_on_host(lm, why, sizeof why)) {
        snprintf(err, n, "%s: not saved: %s (the model diverged; a previous file there is left as it was)", path, why);
        return false;
    }
    /* a half export holds the parameters only: it is for inference (or PyTorch), not resuming;
     * gradient sums are not kept (torch's state_dict keeps no .grad: training stops between steps) */
    int total = a->nparams, kept = 0;
    for (int i = 0; i < a->nstates && !half; i++) total += a->states[i].role != NNC_ROLE_GRAD_SUM;
    nnc_st_tensor *ts = xcalloc((size_t)total + 1, sizeof *ts);
    char **names = xcalloc((size_t)total + 1, sizeof *names);
    void **owned = xcalloc((size_t)a->nparams + 1, sizeof *owned);
    for (int i = 0; i < a->nparams; i++) {
        to_st(&a->params[i], a->param(lm->m, i), a->real_bytes, &ts[i], a->params[i].name);
        if (half && a->params[i].dtype != NNC_TYPE_I32) {
            ts[i].data = owned[i] = to_half(&a->params[i], a->param(lm->m, i), a->real_bytes, half);
            ts[i].dtype = (nnc_dtype)half;
        }
    }
    for (int i = 0; i < a->nstates && !half; i++) {
        if (a->states[i].role == NNC_ROLE_GRAD_SUM) continue;
        size_t len = strlen(a->states[i].name) + 16;
        names[kept] = xmalloc(len);
        snprintf(names[kept], len, "optimizer.%s", a->states[i].name);
        to_st(&a->states[i], a->state(lm->m, i), a->real_bytes, &ts[a->nparams + kept], names[kept]);
        kept++;
    }
    char step[32], ep[32], pos[32], seed[32], lsum[40], keys[HPARAM_MAX][64];
    snprintf(step, sizeof step, "%lld", (long long)a->get_step(lm->m));
    snprintf(ep, sizeof ep, "%d", tp->epoch);
    snprintf(pos, sizeof pos, "%lld", tp->samples);
    snprintf(seed, sizeof seed, "%llu", tp->seed);
    snprintf(lsum, sizeof lsum, "%.17g", tp->has_loss_sum ? tp->loss_sum : 0.0); /* exact: reads back the same */
    nnc_st_meta meta[8 + HPARAM_MAX] = {
        {"format", "pt"},           {"nnc_model", a->name}, {"nnc_step", step},          {"nnc_epoch", ep},
        {"nnc_epoch_samples", pos}, {"nnc_seed", seed},     {"nnc_epoch_loss_sum", lsum}};
    int nmeta = 7;
    if (half) meta[nmeta++] = (nnc_st_meta){"nnc_export", half == NNC_DT_BF16 ? "bf16" : "f16"};
    for (int i = 0; hp && i < hp->n; i++) {
        snprintf(keys[i], sizeof keys[i], "nnc_%s", hp->p[i].key);
        meta[nmeta++] = (nnc_st_meta){keys[i], hp->p[i].value};
    }
    int rc = nnc_st_save(path, ts, total, meta, nmeta, err, n);
    for (int i = 0; i < kept; i++) free(names[i]);
    for (int i = 0; i < a->nparams; i++) free(owned[i]);
    free(owned);
    free(names);
    free(ts);
    return rc == 0;
}

/* "[128,784]" (rank 0: "[]"), as shapes are written in the model file, into buf. */
static const char *dims_str(int rank, const int64_t *dims, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)dims[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

static bool load_one(const nnc_st_file *f, const char *path, const char *name, const nnc_tensor_info *t, void *dst,
                     int real_bytes, bool required, char *err, size_t n) {
    const nnc_st_tensor *s = nnc_st_find(f, name);
    if (!s) {
        if (required) snprintf(err, n, "%s: no tensor '%s' (the model's parameter)", path, name);
        return !required;
    }
    int64_t cnt = 1;
    bool same = s->rank == t->rank;
    for (int i = 0; i < t->rank && same; i++) same = s->dims[i] == t->dims[i];
    for (int i = 0; i < t->rank; i++) cnt *= t->dims[i];
    if (!same) {
        char fs[160], ms[160];
        snprintf(err, n, "%s: tensor '%s' has shape %s, the model's is %s", path, name,
                 dims_str(s->rank, s->dims, fs, sizeof fs), dims_str(t->rank, t->dims, ms, sizeof ms));
        return false;
    }
    if (s->dtype == NNC_DT_F32 && real_bytes == 4) memcpy(dst, s->data, (size_t)cnt * 4);
    else if (s->dtype == NNC_DT_F64 && real_bytes == 8) memcpy(dst, s->data, (size_t)cnt * 8);
    else if (s->dtype == NNC_DT_F32 && real_bytes == 8)
        for (int64_t i = 0; i < cnt; i++) ((double *)dst)[i] = ((const float *)s->data)[i];
    else if (s->dtype == NNC_DT_F64 && real_bytes == 4)
        for (int64_t i = 0; i < cnt; i++) ((float *)dst)[i] = (float)((const double *)s->data)[i];
    else if (s->dtype == NNC_DT_BF16 || s->dtype == NNC_DT_F16)   /* a half export, widened exactly */
        for (int64_t i = 0; i < cnt; i++) {
            uint16_t h = ((const uint16_t *)s->data)[i];
            float v = s->dtype == NNC_DT_BF16 ? nnc_bf16_to_f32(h) : nnc_f16_to_f32(h);
            if (real_bytes == 8) ((double *)dst)[i] = v;
            else ((float *)dst)[i] = v;
        }
    else {
        snprintf(err, n, "%s: tensor '%s' is %s, expected F32", path, name, nnc_dtype_name(s->dtype));
        return false;
    }
    return true;
}

#define STEP_MAX (1LL << 53)     /* more steps than any run takes; keeps step arithmetic exact */
#define EPOCH_MAX 1000000000LL
#define SAMPLES_MAX (1LL << 53)
#define BATCH_MAX (1LL << 31)

/* Metadata `key` as a decimal integer in [lo, hi]; absent leaves *v alone.  Digits only (no
 * sign, space or suffix): these fields are written by nnc_save, so anything else is damage. */
static bool meta_int(const nnc_st_file *f, const char *path, const char *key, unsigned long long lo,
                     unsigned long long hi, unsigned long long *v, char *err, size_t n) {
    const char *s = nnc_st_meta_get(f, key);
    if (!s) return true;
    unsigned long long x = 0;
    bool ok = *s != 0 && strlen(s) <= 20;
    for (const char *p = s; ok && *p; p++) {
        unsigned d = (unsigned)(*p - '0');
        ok = d <= 9 && x <= (ULLONG_MAX - d) / 10;
        x = x * 10 + d;
    }
    if (ok && x >= lo && x <= hi) {
        *v = x;
        return true;
    }
    snprintf(err, n, "%s: metadata %s is '%.40s', expected an integer in [%llu, %llu]", path, key, s, lo, hi);
    return false;
}

/* Step, epoch, position and seed.  Files written before the position was kept in samples hold
 * nnc_epoch_pos in batches of an unrecorded size: it is taken in batches of the current run. */
static bool load_position(ModelRef *lm, const nnc_st_file *f, const char *path, bool with_state, TrainPos *tp,
                          char *err, size_t n) {
    const nnc_model_abi *a = lm->abi;
    unsigned long long step = 0, ep = 0, samples = 0, batches = 0, seed = 0, batch = 0;
    if (!meta_int(f, path, "nnc_step", 0, STEP_MAX, &step, err, n) ||
        !meta_int(f, path, "nnc_epoch", 0, EPOCH_MAX, &ep, err, n) ||
        !meta_int(f, path, "nnc_epoch_samples", 0, SAMPLES_MAX, &samples, err, n) ||
        !meta_int(f, path, "nnc_epoch_pos", 0, SAMPLES_MAX / BATCH_MAX, &batches, err, n) ||
        !meta_int(f, path, "nnc_batch", 1, BATCH_MAX, &batch, err, n) ||
        !meta_int(f, path, "nnc_seed", 0, ULLONG_MAX, &seed, err, n))
        return false;
    if (with_state && nnc_st_meta_get(f, "nnc_step")) a->set_step(lm->m, (int64_t)step);
    if (!tp) return true;
    tp->epoch = (int)ep;
    tp->samples = nnc_st_meta_get(f, "nnc_epoch_samples") ? (long long)samples
                                                          : (long long)batches * (long long)a->batch_max;
    tp->seed = seed;
    const char *ls = nnc_st_meta_get(f, "nnc_epoch_loss_sum");
    char *end = NULL;
    tp->loss_sum = ls ? strtod(ls, &end) : 0;
    tp->has_loss_sum = ls && end != ls && !*end && isfinite(tp->loss_sum);
    return true;
}

/* Which of the model's optimizer state tensors the file lacks.  The rate is not counted (the
 * trainer sets it from the schedule before every epoch or step, so the file's value never
 * matters), nor gradient sums (never saved). */
static void count_states(const nnc_model_abi *a, const nnc_st_file *f, CkptInfo *info) {
    for (int i = 0; i < a->nstates; i++) {
        char name[512];
        snprintf(name, sizeof name, "optimizer.%s", a->states[i].name);
        if (a->states[i].role == NNC_ROLE_LR || a->states[i].role == NNC_ROLE_GRAD_SUM) continue;
        info->states++;
        if (nnc_st_find(f, name)) continue;
        if (!info->states_missing++) snprintf(info->first_missing, sizeof info->first_missing, "%s", name);
    }
}

bool checkpoint_load(ModelRef *lm, const char *path, bool with_state, TrainPos *tp, CkptInfo *info, char *err,
                     size_t n) {
    const nnc_model_abi *a = lm->abi;
    nnc_st_file *f = nnc_st_load(path, err, n);
    if (!f) return false;
    CkptInfo ignored;
    if (!info) info = &ignored;
    memset(info, 0, sizeof *info);
    count_states(a, f, info);
    info->has_hparams = hparams_read(&info->hparams, f);
    bool ok = true;
    for (int i = 0; ok && i < a->nparams; i++)
        ok = load_one(f, path, a->params[i].name, &a->params[i], a->param(lm->m, i), a->real_bytes, true, err, n);
    char why[512];
    if (ok && !params_finite_on_host(lm, why, sizeof why)) {   /* else: "loss nan", exit 0, or training on it */
        snprintf(err, n, "%s: %s: the checkpoint of a diverged model is not loaded", path, why);
        ok = false;
    }
    for (int i = 0; ok && with_state && i < a->nstates; i++) {
        if (a->states[i].role == NNC_ROLE_GRAD_SUM) continue;
        char name[512];
        snprintf(name, sizeof name, "optimizer.%s", a->states[i].name);
        ok = load_one(f, path, name, &a->states[i], a->state(lm->m, i), a->real_bytes, false, err, n);
    }
    if (tp) *tp = (TrainPos){0, 0, 0, false, 0};
    ok = ok && load_position(lm, f, path, with_state, tp, err, n);
    a->sync(lm->m, NNC_SYNC_TO_DEVICE);
    nnc_st_close(f);
    return ok;
}
