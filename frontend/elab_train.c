/* elab_train.c - the train section, read by the rows of train_tables.c: the calls of the
 * builtins only it may call (a data source, an optimizer, a schedule, the loss scaler), each
 * setting, the checks made once the whole model is read (a loss, data for every input, every
 * parameter used), and resolve_train_config, which owns the configuration from there on.
 *
 * Nothing here names a setting or a builtin: the tables do, so the parser, the suggestions and
 * every message that lists them cannot disagree. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elab_impl.h"
#include "train_tables.h"

/* Enum fields (Device, Precision, the kinds) are written through an int. */
_Static_assert(sizeof(Device) == sizeof(int) && sizeof(Precision) == sizeof(int) && sizeof(OptKind) == sizeof(int) &&
                   sizeof(SchedKind) == sizeof(int) && sizeof(SourceKind) == sizeof(int),
               "enums are ints");

/* x, already checked to fit, into the field at cfg + at. */
static void field_set(void *cfg, FieldType type, size_t at, double x) {
    char *p = (char *)cfg + at;
    switch (type) {
    case FIELD_DOUBLE: *(double *)p = x; break;
    case FIELD_BOOL: *(bool *)p = x != 0; break;
    case FIELD_INT: *(int *)p = (int)x; break;
    case FIELD_INT64: *(int64_t *)p = (int64_t)x; break;
    case FIELD_UINT64: *(uint64_t *)p = (uint64_t)x; break;
    case FIELD_STR:
    case FIELD_STRS: break;
    }
}

/* "a, b or c" (sep ", ", last " or "), or every item with sep alone (last NULL). */
static const char *join(Arena *a, const char *const *items, int n, const char *sep, const char *last) {
    Str s = {0};
    for (int i = 0; i < n; i++) str_printf(&s, "%s%s", i == 0 ? "" : i == n - 1 && last ? last : sep, items[i]);
    const char *r = arena_strdup(a, s.buf ? s.buf : "");
    str_free(&s);
    return r;
}

/* What a setting of a family takes, as "expected ..." ends: "sgd(...), adam(...) or adamw(...)". */
static const char *family_list(Elab *E, const Setting *st) {
    const TrainFamily *f = st->family;
    const char *items[16];
    int n = 0;
    for (int i = 0; i < f->n && n < 16; i++)
        items[n++] = f->fns[i].example ? f->fns[i].example : arena_printf(E->a, "%s(...)", f->fns[i].name);
    for (int i = 0; st->words && st->words[i] && n < 16; i++) items[n++] = st->words[i];
    return arena_printf(E->a, "%s%s", f->expect, join(E->a, items, n, ", ", " or "));
}

/* ---- a call of a train-section builtin, by its row ---------------------------------------- */

/* Is x what the argument's rule allows?  The message names the function and the argument. */
static bool arg_check(Elab *E, const char *fn, const ArgSpec *s, double x, SrcLoc at) {
    switch (s->rule) {
    case ARG_REAL: return check_range(E, fn, s->name, x, s->lo, s->lo_open, s->hi, s->hi_open, at);
    case ARG_FINITE: return check_finite(E, fn, s->name, x, at);
    case ARG_COUNT: return check_count(E, fn, s->name, x, s->hi, at);
    case ARG_INDEX:
        if (x == floor(x)) return check_range(E, fn, s->name, x, s->lo, false, s->hi, false, at);
        diag_error(E->d, at, "%s(): %s must be an integer", fn, s->name);
        return false;
    case ARG_BOOL:
        if (x == 0 || x == 1) return true;
        diag_error(E->d, at, "%s= takes true or false", s->name);
        return false;
    case ARG_FLAG:
    case ARG_PATH:
    case ARG_WORD:
    case ARG_PAIR:
    case ARG_NAMES: break;
    }
    return true;
}

/* The index of a string argument among its rule's words; -1 (reported) if it is none of them. */
static int arg_word(Elab *E, const char *fn, const ArgSpec *s, Value v, SrcLoc at) {
    int n = 0;
    while (s->words[n]) n++;
    for (int i = 0; v.k == V_STR && i < n; i++)
        if (!strcmp(v.str, s->words[i])) return i;
    const char *q[16];
    for (int i = 0; i < n && i < 16; i++) q[i] = arena_printf(E->a, "\"%s\"", s->words[i]);
    diag_error(E->d, at, "%s(): %s is %s, got %s", fn, s->name, join(E->a, q, n < 16 ? n : 16, ", ", " or "),
               v.k == V_STR ? arena_printf(E->a, "\"%s\"", v.str) : arena_printf(E->a, "a %s", kind_name(v.k)));
    return -1;
}

/* A pair argument, (a, b): two numbers, each within the argument's range, into x[0], x[1]. */
static bool pair_read(Elab *E, const char *fn, const ArgSpec *s, Value v, SrcLoc at, double x[2]) {
    if (v.k != V_TUPLE || v.nitems != 2 || v.items[0].k != V_NUM || v.items[1].k != V_NUM) {
        const char *got = v.k != V_TUPLE ? arena_printf(E->a, "a %s", kind_name(v.k))
            : v.nitems != 2              ? arena_printf(E->a, "%d values", v.nitems)
                                         : "values that are not all numbers";
        diag_error(E->d, at, "%s(): %s takes two numbers in parentheses, as (0.9, 0.95); got %s", fn, s->name, got);
        return false;
    }
    bool ok = true;
    for (int k = 0; k < 2; k++) {
        x[k] = v.items[k].num;
        char name[64];
        snprintf(name, sizeof name, "%s[%d]", s->name, k);
        ok &= check_range(E, fn, name, x[k], s->lo, s->lo_open, s->hi, s->hi_open, at);
    }
    return ok;
}

/* A list of names, ["bias", "norm"] (or one, "bias"): a NULL-terminated array in the arena. */
static const char **names_read(Elab *E, const char *fn, const ArgSpec *s, Value v, SrcLoc at) {
    int n = v.k == V_TUPLE ? v.nitems : 1;
    const Value *items = v.k == V_TUPLE ? v.items : &v;
    const char **list = arena_alloc(E->a, (size_t)(n + 1) * sizeof *list);
    for (int i = 0; i < n; i++) {
        if (items[i].k != V_STR || !items[i].str[0]) {
            diag_error(E->d, at, "%s(): %s is a list of names, as [\"bias\", \"norm\"] or [bias, norm]; got %s", fn,
                       s->name,
                       items[i].k == V_STR ? "an empty name" : arena_printf(E->a, "a %s", kind_name(items[i].k)));
            return NULL;
        }
        list[i] = items[i].str;
    }
    return list;
}

/* More positional arguments than f takes before its keyword-only ones: the message bind_args
 * gives for too many. */
static bool positional_fit(Elab *E, const TrainFn *f, Args *a, int n) {
    int npos = 0, given = 0;
    while (npos < n && !f->args[npos].kw_only) npos++;
    for (int i = 0; i < a->n; i++) {
        if (a->kw[i] || ++given <= npos) continue;
        diag_error(E->d, a->loc[i], "%s() takes at most %d argument%s", f->name, npos, npos == 1 ? "" : "s");
        return false;
    }
    return true;
}

/* f's arguments from the call: bound by position or keyword, each read as its rule takes it,
 * the written ones checked, then all stored (defaults for the rest, then the pairs written, so
 * betas = (...) wins over beta1's default).  Every mistake is reported; the row's own check runs
 * once each argument is valid. */
static bool call_args(Elab *E, const TrainFn *f, void *cfg, Args *a, SrcLoc loc) {
    const char *names[TRAIN_FN_MAX_ARGS] = {0};
    int n = 0, required = 0, ix[TRAIN_FN_MAX_ARGS];
    for (; n < TRAIN_FN_MAX_ARGS && f->args[n].name; n++) {
        names[n] = f->args[n].name;
        if (f->args[n].required) required = n + 1;
    }
    if (!positional_fit(E, f, a, n) || !bind_args(E, f->name, a, names, n, ix, required, loc)) return false;
    double x[TRAIN_FN_MAX_ARGS], pair[TRAIN_FN_MAX_ARGS][2];
    const char **names_of[TRAIN_FN_MAX_ARGS] = {0};
    SrcLoc at[TRAIN_FN_MAX_ARGS] = {{0}};
    bool ok = true;
    for (int i = 0; i < n; i++) {
        const ArgSpec *s = &f->args[i];
        x[i] = s->dflt;
        if (ix[i] < 0) continue;
        at[i] = a->loc[ix[i]];
        if (s->rule == ARG_PAIR) ok &= pair_read(E, f->name, s, a->v[ix[i]], at[i], pair[i]);
        else if (s->rule == ARG_NAMES) ok &= (names_of[i] = names_read(E, f->name, s, a->v[ix[i]], at[i])) != NULL;
        else if (s->rule == ARG_WORD) {
            x[i] = arg_word(E, f->name, s, a->v[ix[i]], at[i]);
            ok = ok && x[i] >= 0;
        } else if (s->rule != ARG_PATH) x[i] = num_arg(E, a, ix[i], s->dflt, &ok);
        else if (a->v[ix[i]].k == V_STR) *(const char **)((char *)cfg + s->at) = a->v[ix[i]].str;
        else {
            diag_error(E->d, at[i], "%s() expects a file path string", f->name);
            ok = false;
        }
    }
    if (!ok) return false;
    for (int i = 0; i < n; i++) /* every check reports */
        if (ix[i] >= 0 && !arg_check(E, f->name, &f->args[i], x[i], at[i])) ok = false;
    if (!ok) return false;
    for (int i = 0; i < n; i++)
        if (f->args[i].rule == ARG_NAMES) *(const char ***)((char *)cfg + f->args[i].at) = names_of[i];
        else if (f->args[i].rule != ARG_PAIR) field_set(cfg, f->args[i].type, f->args[i].at, x[i]);
    for (int i = 0; i < n; i++)
        if (f->args[i].rule == ARG_PAIR && ix[i] >= 0) {
            field_set(cfg, f->args[i].type, f->args[i].at, pair[i][0]);
            field_set(cfg, f->args[i].type, f->args[i].at2, pair[i][1]);
        }
    return !f->check || f->check(E, f, cfg, at, loc);
}

static Value train_call(Elab *E, const TrainFamily *fam, const TrainFn *f, Args *a, SrcLoc loc) {
    char *cfg = arena_alloc(E->a, fam->size);
    if (fam->init) memcpy(cfg, fam->init, fam->size);
    if (fam->kind_at != SIZE_MAX) *(int *)(cfg + fam->kind_at) = f->kind;
    *(SrcLoc *)(cfg + fam->loc_at) = loc;
    bool ok = f->read ? f->read(E, f, cfg, a, loc) : call_args(E, f, cfg, a, loc);
    return ok ? (Value){.k = (VKind)fam->value, .cfg = cfg} : verror;
}

bool train_builtin(Elab *E, const char *fn, Args *a, SrcLoc loc, Value *out) {
    for (int k = 0; k < train_nfamilies; k++)
        for (int i = 0; i < train_families[k]->n; i++)
            if (!strcmp(fn, train_families[k]->fns[i].name)) {
                *out = train_call(E, train_families[k], &train_families[k]->fns[i], a, loc);
                return true;
            }
    return false;
}

bool train_builtin_known(const char *fn) {
    for (int k = 0; k < train_nfamilies; k++)
        for (int i = 0; i < train_families[k]->n; i++)
            if (!strcmp(fn, train_families[k]->fns[i].name)) return true;
    return false;
}

const char *train_builtin_suggest(const char *fn, const char *best, int *best_d) {
    for (int k = 0; k < train_nfamilies; k++)
        for (int i = 0; i < train_families[k]->n; i++) best = closest(fn, train_families[k]->fns[i].name, best, best_d);
    return best;
}

/* ---- the settings ------------------------------------------------------------------------- */

static int named_tensor(Elab *E, const char *name, SrcLoc loc, const char *what) {
    Binding *b = env_find(E->globals, name);
    if (!b) {
        int bd = 3;
        diag_error(E->d, loc, "unknown name '%s'%s", name, did_you_mean(E, suggest_env(name, E->globals, NULL, &bd)));
        return -1;
    }
    if (b->v.k == V_ERROR) return -1; /* its definition failed and was reported there */
    if (b->v.k != V_TENSOR) {
        diag_error(E->d, loc, "%s '%s' must be a tensor, but it is a %s", what, name, kind_name(b->v.k));
        return -1;
    }
    return b->v.node;
}

static DataBind *bind_for(Elab *E, TrainConfig *t, const char *input, SrcLoc loc) {
    /* the input declared under the name, also where the model rebinds it (x = block(x)) */
    Binding *decl = env_find(E->declared, input);
    int node = decl && decl->v.k == V_TENSOR ? decl->v.node : named_tensor(E, input, loc, "data for");
    if (node < 0) return NULL;
    if (E->g->nodes[node].op != OP_INPUT) {
        diag_error(E->d, loc, "'%s' is not an input: data is bound to inputs", input);
        return NULL;
    }
    for (int i = 0; i < t->ndata; i++)
        if (t->data[i].node == node) return &t->data[i];
    t->data = xrealloc(t->data, (size_t)(t->ndata + 1) * sizeof *t->data);
    DataBind *d = &t->data[t->ndata++];
    memset(d, 0, sizeof *d);
    d->input = input;
    d->node = node;
    return d;
}

/* The scalar tensor NAME of 'minimize NAME' or 'metric NAME'; -1 (reported) if it is none. */
static int named_scalar(Elab *E, Stmt *s, const char *what) {
    int n = named_tensor(E, s->name2, s->loc2, arena_printf(E->a, "the %s", what));
    if (n < 0 || E->g->nodes[n].shape.rank == 0) return n;
    diag_error(E->d, s->loc2, "the %s must be a scalar, but '%s' is %s (reduce it with mean() or sum())", what,
               s->name2, tstr(E, n));
    return -1;
}

/* 'metric NAME = expr' (an expression's value) or 'metric NAME' (a scalar tensor's). */
static void setting_metric(Elab *E, Stmt *s) {
    if (!s->e) {
        int n = named_scalar(E, s, "metric");
        if (n >= 0) graph_add_out(E->g, s->name2, n);
        return;
    }
    Value v = eval(E, E->globals, s->e);
    int n = v.k == V_ERROR ? -1 : as_tensor(E, v, s->e->loc);
    if (n < 0) return;
    if (E->g->nodes[n].shape.rank != 0) {
        diag_error(E->d, s->e->loc, "a metric must be a scalar, got %s", tstr(E, n));
        return;
    }
    graph_add_out(E->g, s->name2, owned_output(E, n, s->e->loc));
}

/* An input a token stream feeds: i32 with the batch axis first; its row (T elements) is the
 * window, which a written block_size must equal.  T, or -1 (reported). */
static int64_t token_input(Elab *E, const DataSource *src, const char *input, SrcLoc loc) {
    int node = named_tensor(E, input, loc, "data for");
    if (node < 0) return -1;
    const Node *n = &E->g->nodes[node];
    int64_t T = shape_numel(n->shape, 1);
    if (n->op == OP_INPUT && (n->dtype != DT_I32 || shape_batch_axis(n->shape) != 0)) {
        diag_error(E->d, loc, "tokens() feeds i32 inputs whose first axis is the batch (i32[B, T]), but '%s' is %s",
                   input, tstr(E, node));
        return -1;
    }
    if (n->op == OP_INPUT && src->block && src->block != T) {
        diag_error(E->d, src->loc, "tokens(): block_size = %lld, but input '%s' is %s: a window is one of its rows",
                   (long long)src->block, input, tstr(E, node));
        return -1;
    }
    return T;
}

/* 'data x, y = tokens(...)': x the windows of the stream, y the tokens after each (nanoGPT's
 * get_batch, written once).  Each input gets the source, with its shift and its pair. */
static void setting_tokens(Elab *E, TrainConfig *t, const Setting *st, Stmt *s, const DataSource *src) {
    if (src->kind != SRC_TOKENS) {
        diag_error(E->d, s->loc3, "only tokens() feeds two inputs; write one '%s INPUT = ...' for each", st->name);
        return;
    }
    if (!s->name3) {
        diag_error(E->d, s->loc2,
                   "tokens() feeds two inputs, a window and the tokens after it: write '%s %s, y = "
                   "tokens(...)', as nanoGPT's get_batch gives x and y",
                   st->name, s->name2);
        return;
    }
    if (!strcmp(s->name2, s->name3)) {
        diag_error(E->d, s->loc3, "'%s' is named twice: tokens() feeds two inputs", s->name3);
        return;
    }
    int64_t tx = token_input(E, src, s->name2, s->loc2), ty = token_input(E, src, s->name3, s->loc3);
    if (tx > 0 && ty > 0 && tx != ty) {
        diag_error(E->d, s->loc3,
                   "'%s' and '%s' must have rows of the same length (windows of %lld tokens and "
                   "%lld)",
                   s->name2, s->name3, (long long)tx, (long long)ty);
        return;
    }
    const char *names[2] = {s->name2, s->name3};
    SrcLoc locs[2] = {s->loc2, s->loc3};
    for (int k = 0; k < 2 && tx > 0 && ty > 0; k++) {
        DataBind *d = bind_for(E, t, names[k], locs[k]); /* may move t->data: one at a time */
        if (!d) return;
        DataSource *to = (DataSource *)((char *)d + st->at);
        *to = *src;
        to->shift = k;
        to->pair = names[1 - k];
    }
}

/* 'data INPUT = source' and 'test INPUT = source'. */
static void setting_data(Elab *E, TrainConfig *t, const Setting *st, Stmt *s, Value v) {
    if (v.k != V_SOURCE) {
        if (v.k != V_ERROR) diag_error(E->d, s->e->loc, "expected %s", family_list(E, st));
        E->data_error = true;
        return;
    }
    if (s->name3 || v.src->kind == SRC_TOKENS) {
        setting_tokens(E, t, st, s, v.src);
        return;
    }
    DataBind *d = bind_for(E, t, s->name2, s->loc2);
    if (!d) return;
    *(DataSource *)((char *)d + st->at) = *v.src;
    if (v.src->scale_loc.line && E->g->nodes[d->node].dtype == DT_I32) /* it would be ignored */
        diag_error(E->d, v.src->scale_loc,
                   "scale applies to float inputs, but '%s' is i32: labels and "
                   "indices are read as the integers they are",
                   s->name2);
}

/* A finite number > 0 (clip_grad_norm = 1), unless the setting it excludes is set too. */
static void setting_positive(Elab *E, TrainConfig *t, const Setting *st, Stmt *s, Value v) {
    if (v.k != V_NUM || !(v.num > 0) || isinf(v.num)) {
        if (v.k == V_NUM)
            diag_error(E->d, s->e->loc, "%s must be a %snumber > 0, got %g", st->name, isinf(v.num) ? "finite " : "",
                       v.num);
        else diag_error(E->d, s->e->loc, "%s must be a number > 0", st->name);
        return;
    }
    const Setting *other = train_setting_named(st->excludes);
    if (*(double *)((char *)t + other->at) > 0) {
        const Setting *first = other < st ? other : st;
        diag_error(E->d, s->loc, "set %s or %s, not both", first->name, first == st ? other->name : st->name);
        return;
    }
    field_set(t, st->type, st->at, v.num);
}

/* A setting's value, already evaluated: checked against its kind and stored. */
static void setting_value(Elab *E, TrainConfig *t, const Setting *st, Stmt *s, Value v) {
    SrcLoc at = s->e->loc;
    if (st->kind == SET_DATA) {
        setting_data(E, t, st, s, v);
        return;
    }
    /* reported where it failed; after an unknown word (device = tpu) the words it takes are said too */
    if (v.k == V_ERROR && !(st->kind == SET_DEVICE && s->e->k == E_IDENT)) return;
    switch (st->kind) {
    case SET_INT: /* checked before any conversion: epochs = 1e12 must not wrap to 0 */
        if (v.k == V_NUM && v.num >= st->lo && v.num <= st->hi && v.num == floor(v.num))
            field_set(t, st->type, st->at, v.num);
        else diag_error(E->d, at, "'%s' must be an integer from %.0f to %.0f", st->name, st->lo, st->hi);
        break;
    case SET_BOOL:
        if (v.k == V_NUM && (v.num == 0 || v.num == 1)) field_set(t, st->type, st->at, v.num);
        else diag_error(E->d, at, "'%s' is true or false", st->name);
        break;
    case SET_POSITIVE: setting_positive(E, t, st, s, v); break;
    case SET_DEVICE:
        if (v.k == V_DEVICE) {
            field_set(t, FIELD_INT, st->at, v.num);
            t->device_auto = false;
        } else {
            const char *items[8] = {"cpu", "cuda", "cuda(k)"};
            int n = 3;
            while (n < 8 && st->words && st->words[n - 3]) items[n] = st->words[n - 3], n++;
            diag_error(E->d, at, "%s is %s", st->name, join(E->a, items, n, ", ", " or "));
        }
        break;
    case SET_CALL:
        if (v.k == (VKind)st->family->value) memcpy((char *)t + st->at, v.cfg, st->family->size);
        else diag_error(E->d, at, "expected %s", family_list(E, st));
        break;
    case SET_WORD:
    case SET_DATA:
    case SET_LOSS:
    case SET_METRIC: break;
    }
}

/* The index of the word s's value is, or -1: precision = bf16, loss_scale = none. */
static int setting_word(const Setting *st, Stmt *s) {
    for (int i = 0; st->words && st->words[i]; i++)
        if (s->e && s->e->k == E_IDENT && !strcmp(s->e->str, st->words[i])) return i;
    return -1;
}

static int setting_words(const Setting *st) {
    int n = 0;
    while (st->words && st->words[n]) n++;
    return n;
}

/* The form st is written in: 'minimize NAME', 'metric NAME [= expr]', 'data INPUT = source', or
 * 'KEY = value' for the rest. */
static bool setting_form(Elab *E, const Setting *st, Stmt *s) {
    const char *k = st->name;
    if (s->name3 && st->kind != SET_DATA) {
        diag_error(E->d, s->loc3, "unexpected '%s': only data and test name two inputs (for tokens())", s->name3);
        return false;
    }
    switch (st->kind) {
    case SET_LOSS:
        if (s->name2 && !s->e) return true;
        diag_error(E->d, s->loc, "write '%s NAME' with the name of a scalar tensor", k);
        return false;
    case SET_METRIC:
        if (s->name2) return true;
        diag_error(E->d, s->loc, "write '%s NAME = expr', naming the metric, or '%s NAME' for a scalar tensor", k, k);
        return false;
    case SET_DATA:
        if (!s->name2) diag_error(E->d, s->loc, "write '%s INPUT = source', naming the input it feeds", k);
        else if (!s->e) diag_error(E->d, s->loc, "'%s %s' needs a value: '%s %s = ...'", k, s->name2, k, s->name2);
        return s->name2 && s->e;
    case SET_INT:
    case SET_BOOL:
    case SET_POSITIVE:
    case SET_WORD:
    case SET_DEVICE:
    case SET_CALL: break;
    }
    if (s->name2) diag_error(E->d, s->loc, "unexpected '%s' after '%s'", s->name2, k);
    return !s->name2 && s->e;
}

static void setting_unknown(Elab *E, Stmt *s) {
    const char *names[32];
    int n = 0;
    for (int i = 0; i < train_nsettings && n < 32; i++) names[n++] = train_settings[i].name;
    int bd = 3;
    const char *best = suggest_list(s->name, names, (size_t)n, NULL, &bd);
    diag_error(E->d, s->loc, "unknown setting '%s'%s (%s)", s->name, did_you_mean(E, best),
               join(E->a, names, n, ", ", NULL));
}

/* A word or names argument may be written without quotes, as precision's words are: no_decay =
 * [bias, norm] and interval = step read the names as spelled, not as values of the model (whose
 * parameter may well be called bias). */
static void words_unquoted(const Setting *st, Expr *e) {
    if (st->kind != SET_CALL || e->k != E_CALL || e->a->k != E_IDENT) return;
    const TrainFn *f = NULL;
    for (int i = 0; i < st->family->n; i++)
        if (!strcmp(st->family->fns[i].name, e->a->str)) f = &st->family->fns[i];
    for (Arg *x = f ? e->args : NULL; x; x = x->next) {
        int i = x->kw ? train_fn_arg(f, x->kw) : -1;
        if (i < 0 || (f->args[i].rule != ARG_NAMES && f->args[i].rule != ARG_WORD)) continue;
        if (x->e->k == E_IDENT) x->e->k = E_STR;
        for (Arg *y = x->e->k == E_TUPLE ? x->e->args : NULL; y; y = y->next)
            if (y->e->k == E_IDENT) y->e->k = E_STR;
    }
}

static void train_setting(Elab *E, TrainConfig *t, Stmt *s) {
    const Setting *st = train_setting_named(s->name);
    if (!st) {
        setting_unknown(E, s);
        return;
    }
    if (st->kind == SET_LOSS) E->saw_minimize = true; /* even if it fails: no "needs 'minimize'" */
    if (!setting_form(E, st, s)) return;
    int w = setting_word(st, s);
    if (st->kind == SET_LOSS) {
        int n = named_scalar(E, s, "loss");
        if (n >= 0) E->g->loss = n;
    } else if (st->kind == SET_METRIC) {
        setting_metric(E, s);
    } else if (st->kind == SET_WORD) { /* a word, not a value: precision = bf16, as torch.autocast(dtype=...) */
        if (w >= 0) field_set(t, FIELD_INT, st->at, w);
        else diag_error(E->d, s->e->loc, "%s is %s", st->name, join(E->a, st->words, setting_words(st), ", ", " or "));
    } else if (st->kind == SET_DEVICE && w >= 0) { /* device = auto: the driver probes for a GPU */
        t->device_auto = true;
    } else if (w >= 0) { /* loss_scale = none: its config, off */
        memset((char *)t + st->at, 0, st->family->size);
        *(SrcLoc *)((char *)t + st->at + st->family->loc_at) = s->e->loc;
    } else {
        words_unquoted(st, s->e);
        E->in_train = 1;
        Value v = eval(E, E->globals, s->e);
        E->in_train = 0;
        setting_value(E, t, st, s, v);
    }
}

/* Every setting's default, then the section's settings in order (the last one written wins). */
void read_train(Elab *E, Stmt *prog) {
    TrainConfig *t = &E->m->train;
    for (int i = 0; i < train_nsettings; i++) {
        const Setting *st = &train_settings[i];
        if (st->kind == SET_INT || st->kind == SET_BOOL) field_set(t, st->type, st->at, st->dflt);
        if (st->kind == SET_CALL && st->dflt_cfg) memcpy((char *)t + st->at, st->dflt_cfg, st->family->size);
    }
    for (Stmt *s = prog; s; s = s->next) {
        if (s->k != S_TRAIN) continue;
        if (t->present) {
            diag_error(E->d, s->loc, "a model has one train section");
            continue;
        }
        t->present = true;
        t->loc = s->loc;
        for (Stmt *x = s->body; x && !E->over_budget && !diag_stopped(E->d); x = x->next) train_setting(E, t, x);
    }
}

/* A parameter (or buffer) that nothing uses is a mistake.  One used only by an output or a metric is
 * allowed, as in PyTorch: it gets no gradient (grad None), so the optimizer skips it and it
 * keeps its initial value. */
void check_params_used(Elab *E) {
    Graph *g = E->g;
    if (g->loss < 0) return;
    bool *live = xcalloc((size_t)g->n, 1);
    live[g->loss] = true;
    for (int i = 0; i < g->nouts; i++) live[g->outs[i].node] = true;
    for (int i = g->n - 1; i >= 0; i--)
        if (live[i])
            for (int j = 0; j < g->nodes[i].nin; j++) live[g->nodes[i].in[j]] = true;
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].op == OP_PARAM && !live[i])
            diag_error(E->d, g->nodes[i].loc, "%s '%s' is never used (by the loss, an output or a metric)",
                       g->nodes[i].frozen ? "buffer" : "parameter", g->nodes[i].name);
    free(live);
}

/* A set (training or test) that tokens() feeds takes every input from that one call: its
 * windows have no counterpart in another file, nor in another stream. */
static void check_token_sets(Elab *E, const TrainConfig *t) {
    for (int test = 0; test < 2; test++) {
        const DataSource *tok = NULL;
        for (int i = 0; i < t->ndata && !tok; i++) {
            const DataSource *s = test ? &t->data[i].test : &t->data[i].train;
            if (s->kind == SRC_TOKENS) tok = s;
        }
        for (int i = 0; tok && i < t->ndata; i++) {
            const DataSource *s = test ? &t->data[i].test : &t->data[i].train;
            if (s->kind == SRC_NONE ||
                (s->kind == SRC_TOKENS && s->loc.line == tok->loc.line && s->loc.col == tok->loc.col))
                continue;
            diag_error(E->d, s->loc,
                       "input '%s' is fed beside the token stream of %s:%d:%d: a %s set that "
                       "tokens() feeds takes all its inputs from that call",
                       t->data[i].input, tok->loc.file, tok->loc.line, tok->loc.col, test ? "test" : "training");
        }
    }
}

/* Whether no_decay's name nd selects the trainable parameter p (OptConfig.no_decay: the kinds of
 * minGPT's configure_optimizers, else Hugging Face's `any(nd in name for nd in no_decay)`). */
static bool no_decay_selects(const char *nd, const Node *p) {
    size_t n = strlen(p->name);
    if (!strcmp(nd, "norm")) return p->layer == PARAM_NORM;
    if (!strcmp(nd, "embedding")) return p->layer == PARAM_EMBEDDING;
    if (!strcmp(nd, "bias")) return n >= 4 && !strcmp(p->name + n - 4, "bias");
    return strstr(p->name, nd) != NULL;
}

/* Why nd selected nothing, and what there is to select. */
static const char *no_decay_nothing(Elab *E, const char *nd) {
    if (!strcmp(nd, "norm")) return "no layer_norm or batch_norm takes a parameter as its weight or bias";
    if (!strcmp(nd, "embedding")) return "no embedding reads a parameter as its table";
    Str s = {0};
    str_printf(&s, "no trainable parameter's name %s it; they are", strcmp(nd, "bias") ? "contains" : "ends in");
    int shown = 0;
    for (int i = 0; i < E->g->n && shown < 8; i++) {
        const Node *p = &E->g->nodes[i];
        if (p->op == OP_PARAM && !p->frozen) str_printf(&s, "%s %s", shown++ ? "," : "", p->name);
    }
    const char *r = arena_strdup(E->a, shown == 8 ? arena_printf(E->a, "%s, ...", s.buf) : shown ? s.buf : "none");
    str_free(&s);
    return r;
}

/* The optimizer's no_decay group, marked on its parameters (Node.no_decay).  Each name must
 * select a trainable parameter: one that selects none is a typo, or a recipe for another model,
 * and would leave weight decay where the user took it away. */
static void resolve_no_decay(Elab *E, const OptConfig *o) {
    for (int k = 0; o->no_decay && o->no_decay[k]; k++) {
        int hits = 0;
        for (int i = 0; i < E->g->n; i++) {
            Node *p = &E->g->nodes[i];
            if (p->op != OP_PARAM || p->frozen || !no_decay_selects(o->no_decay[k], p)) continue;
            p->no_decay = true;
            hits++;
        }
        if (!hits)
            diag_error(E->d, o->no_decay_loc, "no_decay: \"%s\" selects no parameter: %s", o->no_decay[k],
                       no_decay_nothing(E, o->no_decay[k]));
    }
}

void check_train(Elab *E) {
    TrainConfig *t = &E->m->train;
    if (!t->present) return;
    check_token_sets(E, t);
    resolve_no_decay(E, &t->opt);
    if (!E->saw_minimize) diag_error(E->d, t->loc, "the train section needs 'minimize LOSS'");
    for (int i = 0; i < E->g->n; i++) {
        Node *n = &E->g->nodes[i];
        if (n->op != OP_INPUT) continue;
        DataBind *d = NULL;
        for (int j = 0; j < t->ndata; j++)
            if (t->data[j].node == i) d = &t->data[j];
        if ((!d || d->train.kind == SRC_NONE) && !E->data_error)
            diag_error(E->d, n->loc, "input '%s' has no training data: add 'data %s = ...' to the train section",
                       n->name, n->name);
    }
}

/* ---- the final configuration -------------------------------------------------------------- */

/* --momentum: for an optimizer that has one, with torch.optim.SGD's rule for Nesterov. */
static bool override_momentum(TrainConfig *t, double momentum, char *err, size_t n) {
    const TrainFn *f = train_optimizer(t->opt.kind);
    if (train_fn_arg(f, "momentum") < 0) {
        char with[128] = "";
        for (int i = 0; i < train_optimizers.n; i++)
            if (train_fn_arg(&train_optimizers.fns[i], "momentum") >= 0)
                snprintf(with + strlen(with), sizeof with - strlen(with), "%s%s", with[0] ? " or " : "",
                         train_optimizers.fns[i].name);
        snprintf(err, n, "--momentum: applies to %s; this model uses %s", with, f->name);
        return false;
    }
    if (t->opt.nesterov && momentum <= 0) {
        snprintf(err, n, "--momentum: this model's %s uses nesterov, which needs a momentum > 0, got %g", f->name,
                 momentum);
        return false;
    }
    t->opt.momentum = momentum;
    return true;
}

/* A relative data path is read from the model file's folder, as a Makefile's include or a config
 * file's paths are, so a model runs from any directory.  Without a folder (a pipe) it stays
 * relative to the current directory. */
static void resolve_data_paths(Model *m, const char *dir) {
    TrainConfig *t = &m->train;
    for (int i = 0; i < t->ndata; i++)
        for (int k = 0; k < 2; k++) {
            DataSource *s = k ? &t->data[i].test : &t->data[i].train;
            if (!s->path || s->path[0] == '/') continue;
            s->written = s->path;
            s->from_cwd = !dir;
            if (dir && strcmp(dir, "."))
                s->path = arena_printf(m->g->arena, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", s->path);
        }
}

bool resolve_train_config(Model *m, const TrainOverrides *o, int world, const char *data_dir, char *err, size_t n) {
    TrainConfig *t = &m->train;
    if (o->has_epochs) t->epochs = (int)o->epochs;
    if (o->has_batch) t->batch = o->batch;
    if (o->has_seed) t->seed = (uint64_t)o->seed;
    if (o->has_lr) t->opt.lr = o->lr;
    if (o->has_precision) t->precision = o->precision;
    if (o->has_data_dev) t->data_on_device = o->data_dev;
    if (o->has_clip) {
        t->clip_norm = o->clip_norm;
        t->clip_value = 0;
    }
    if (o->has_momentum && !override_momentum(t, o->momentum, err, n)) return false;
    /* what follows from the settings, the overrides included */
    if (!t->scaler.loc.line) /* loss_scale not written: GradScaler's defaults, on exactly with f16 */
        t->scaler = (ScalerConfig){
            .on = t->precision == PREC_F16, .init = 65536, .growth = 2, .backoff = 0.5, .interval = 2000};
    t->opt.lr_state = t->sched.kind != SCHED_NONE;
    /* the compile-time batch bounds every call; under data parallelism each process's share */
    m->g->batch_max = (int)(world > 1 && t->present ? (t->batch + world - 1) / world : t->batch);
    resolve_data_paths(m, data_dir);
    return true;
}
