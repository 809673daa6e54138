/* train_tables.h - the train section's vocabulary as tables (train_tables.c): its settings, and
 * the builtins only it may call (data sources, optimizers, learning-rate schedules, the loss
 * scaler), each with its arguments, their defaults and the rules their values follow.
 *
 * elab_train.c reads a section by these rows, and everything that names them is made from
 * them: the "did you mean" lists, the messages that list what is allowed ("unknown setting",
 * "expected sgd(...), adam(...) or adamw(...)"), the driver's messages about an override
 * (resolve_train_config), and the check that docs/language.md shows every row with its
 * arguments and defaults (tests/ir/test_train_config.c).
 *
 * To add an optimizer: its OptKind (ir/config.h), its row in train_optimizers (train_tables.c),
 * its update rule (passes/optimizer.c), its line in docs/language.md.  A data source: its
 * SourceKind, its row in train_sources, its reader (a case of train/dataset.c's load_source over
 * a reader in io/), its line in docs/language.md. */
#ifndef NNC_TRAIN_TABLES_H
#define NNC_TRAIN_TABLES_H
#include <stddef.h>

#include "../ir/config.h"

struct Elab;
struct Args;

/* What an argument's value must be.  Only a value the user wrote is checked (every default
 * passes its own rule), and a message names the function, the argument and the rule. */
typedef enum {
    ARG_REAL, /* a number in [lo, hi], an end open where lo_open / hi_open; hi = INFINITY: no bound */
    ARG_FINITE, /* any finite number */
    ARG_COUNT, /* a whole number from 1 to hi */
    ARG_INDEX, /* a whole number from lo to hi ("must be an integer" first): a column */
    ARG_FLAG, /* a number, true unless 0 (nesterov = true) */
    ARG_BOOL, /* true or false exactly; not written: -1 (csv's header: detect it) */
    ARG_PATH, /* a string: a file's path */
    ARG_WORD, /* a string, one of `words`: stored as its index (tokens' dtype = "uint16", interval = "step") */
    ARG_PAIR, /* two numbers (a, b), each as ARG_REAL's lo and hi, stored at `at` and `at2` (betas = (0.9, 0.95)) */
    ARG_NAMES, /* a string or a list of strings, stored as a NULL-terminated array (no_decay = ["bias"]) */
} ArgRule;

/* The C type of the field a value is stored in. */
typedef enum { FIELD_DOUBLE, FIELD_BOOL, FIELD_INT, FIELD_INT64, FIELD_UINT64, FIELD_STR, FIELD_STRS } FieldType;

typedef struct {
    const char *name; /* as written: "weight_decay" */
    ArgRule rule;
    FieldType type;
    size_t at; /* offsetof its field in the builtin's config */
    size_t at2; /* ARG_PAIR: the second number's field */
    bool required; /* required arguments come first */
    bool kw_only; /* only by keyword, as Python's arguments after `*` (the last ones) */
    double dflt; /* the value when it is not written */
    double lo, hi; /* ARG_REAL, ARG_INDEX; ARG_COUNT: hi */
    bool lo_open, hi_open; /* ARG_REAL */
    const char *const *words; /* ARG_WORD: the strings it takes, NULL-terminated */
} ArgSpec;

#define TRAIN_FN_MAX_ARGS 8

/* A builtin the train section may call: `adam(lr = 1e-3, ...)` makes an OptConfig. */
typedef struct TrainFn {
    const char *name; /* "adam" */
    int kind; /* its OptKind, SchedKind or SourceKind */
    const char *torch; /* what it is in PyTorch ("torch.optim.Adam"), or NULL */
    const char *example; /* how "expected ..." shows it; NULL: "adam(...)" */
    ArgSpec args[TRAIN_FN_MAX_ARGS]; /* ends at the first without a name */
    /* Reads the call instead of args[], where its arguments are not a fixed list (randn(n, d...)). */
    bool (*read)(struct Elab *E, const struct TrainFn *f, void *cfg, struct Args *a, SrcLoc loc);
    /* The rules between arguments, once each one is valid (SGD's Nesterov needs a momentum);
     * at[i]: where args[i] was written (line 0: it was not). */
    bool (*check)(struct Elab *E, const struct TrainFn *f, void *cfg, const SrcLoc *at, SrcLoc loc);
} TrainFn;

/* The builtins whose calls make one kind of value: every optimizer makes an OptConfig. */
typedef struct {
    int value; /* the elaborator's VKind of that value */
    const char *expect; /* how "expected ..." begins for a setting that takes one */
    size_t size; /* the config a call fills: its size, */
    size_t kind_at, loc_at; /* its kind (SIZE_MAX: none) and the call's location */
    const void *init; /* what a call starts from, before its arguments (NULL: zeros) */
    const TrainFn *fns;
    int n;
} TrainFamily;

extern const TrainFamily train_sources, train_optimizers, train_schedules, train_scalers;
extern const TrainFamily *const train_families[]; /* the four, in that order */
extern const int train_nfamilies;

/* How a setting is written and what its value must be. */
typedef enum {
    SET_INT, /* KEY = n: a whole number in [lo, hi] (batch = 64) */
    SET_BOOL, /* KEY = true | false (shuffle) */
    SET_POSITIVE, /* KEY = x: a number > 0 (clip_grad_norm) */
    SET_WORD, /* KEY = word, one of `words`, not evaluated; stored as its index (precision = bf16) */
    SET_DEVICE, /* KEY = cpu | cuda | cuda(k), or one of `words` (auto: TrainConfig.device_auto) */
    SET_CALL, /* KEY = a call of one of `family`'s builtins, or one of `words` (loss_scale = none) */
    SET_DATA, /* KEY INPUT = source: `at` is the DataBind side (train or test) */
    SET_LOSS, /* KEY NAME: the scalar to minimize */
    SET_METRIC, /* KEY NAME, or KEY NAME = expr: a scalar reported on the test set */
} SettingKind;

typedef struct {
    const char *name; /* "batch" */
    SettingKind kind;
    FieldType type;
    size_t at; /* its field in TrainConfig (SET_DATA: in DataBind) */
    double lo, hi; /* SET_INT */
    double dflt; /* SET_INT, SET_BOOL: the value when it is not written */
    const TrainFamily *family; /* SET_CALL */
    const void *dflt_cfg; /* SET_CALL: the config when it is not written (NULL: zeros) */
    const char *const *words; /* SET_WORD, SET_CALL: the words it takes, NULL-terminated */
    const char *excludes; /* a setting it cannot go with */
} Setting;

extern const Setting train_settings[];
extern const int train_nsettings;

/* The row of an optimizer, a setting; NULL if there is none. */
const TrainFn *train_optimizer(OptKind k);
const Setting *train_setting_named(const char *name);
/* The index of args[] named `name` in f, or -1. */
int train_fn_arg(const TrainFn *f, const char *name);
#endif
