/* main.c - the nnc command: parse a model, run the pipeline, then emit, build or train.
 *
 *   nnc MODEL.nn [options]      see usage() below, or `nnc --help`
 *
 * The order is always: read flags -> load the model (diagnostics) -> apply overrides to the
 * train section -> run the passes -> one of: --emit, --stats, -o (AOT), train/eval. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../io/cache.h"
#include "../io/data.h"
#include "../train/train.h"
#include "check.h"
#include "compile.h"
#include "plot.h"
#include "profile.h"

#ifndef NNC_VERSION
#define NNC_VERSION "0.1.0"
#endif

typedef struct {
    const char *model;
    const char *target, *emit, *dump_after, *out_dir;
    const char *save, *load, *metrics, *eval_out;
    const char *check_against;  /* --check-against cpu */
    double check_tol;
    double bucket_mb;           /* --bucket-mb: data parallel's gradient buckets (0: 25) */
    bool dist_mpi;              /* --dist-backend mpi: GPU gradients through the host, not NCCL */
    bool dist_given;            /* --dist-backend was given */
    bool data_parallel;         /* --data-parallel: the data-parallel step even in one process */
    int save_half;              /* --save-dtype: 0, NNC_DT_BF16 or NNC_DT_F16 */
    long threads, bench, save_every;
    long profile; /* --profile [N]: N steps with every launch timed (0: no profile) */
    long log_every; /* --log-every N */
    const char *tensorboard; /* --tensorboard DIR */
    TrainOverrides over;        /* --epochs, --batch, --seed, --lr, --momentum, --clip-grad-norm */
    bool eval, stats, no_fuse, quiet, no_cache, strict, tf32, f64, verify, check_numerics, resume, verbose;
    bool fresh_optimizer;       /* --resume-fresh-optimizer */
    const char *cache_cmd; /* --cache-info or --cache-clear: a command of its own */
} Cli;

/* Errors in flags: "nnc: error: --flag: ..." and exit 1.  The command-line fuzz target
 * (tests/fuzz/fuzz_cli.c) compiles this file with its own cli_error, which returns to the
 * fuzzer instead of exiting. */
#ifndef cli_error
#define cli_error nnc_fatal
#endif

static void usage(FILE *f) {
    fputs("usage: nnc MODEL.nn [options]\n"
          "\n"
          "Compiles a .nn model and trains it (the train section says on what data, how long\n"
          "and with which optimizer).\n"
          "\n"
          "compile and inspect:\n"
          "  --target cpu|cuda|auto device to run on (default: the model's train section, else cpu);\n"
          "                         auto: cuda when a GPU and its driver are there, else cpu (one line\n"
          "                         on stderr says which)\n"
          "  --emit ir|c|cuda|ptx   print the graph after every pass, or the generated code, and exit\n"
          "  --emit dot             draw the step for Graphviz (nnc m.nn --emit dot | dot -Tpng -o m.png)\n"
          "  --dump-after=PASS      print the graph after one pass and exit: parse autocast autograd\n"
          "                         allreduce optimizer placement copies fuse schedule plan horizontal\n"
          "                         (or all)\n"
          "  --stats                print kernels, library calls, bytes moved and planned memory; exit\n"
          "  --no-fuse              one kernel per op (to compare against fused code)\n"
          "  --strict-devices       error on any CPU/GPU crossing not written as to(x, device)\n"
          "  -o DIR                 ahead of time: write DIR/NAME.c, NAME.h and libNAME.a; exit\n"
          "  --f64                  compute in double precision (for gradient checks)\n"
          "\n"
          "train and evaluate (override the train section):\n"
          "  --epochs N  --batch N  --lr X  --momentum X  --seed N\n"
          "  --precision P          f32, bf16 or f16: matrix products (and what follows them) in\n"
          "                         half precision, as torch.autocast; f32 master weights\n"
          "  --clip-grad-norm X     clip_grad_norm = X in place of the file's clipping (0: none);\n"
          "                         --metrics then reports each step's grad_norm\n"
          "  --data-on-device W     auto, true or false: keep the training set in the GPU's memory\n"
          "                         and gather each batch there (auto: when it fits in a quarter\n"
          "                         of the GPU's free memory)\n"
          "  --save FILE            write parameters and optimizer state (safetensors) at the end\n"
          "                         (and on Ctrl-C or SIGTERM, which stop at the end of the current\n"
          "                         step, or of its epoch's records at an epoch's last step; exit\n"
          "                         status 130 or 143)\n"
          "  --save-every N         also write FILE every N steps (written atomically)\n"
          "  --save-dtype T         f32 (default), or bf16/f16: FILE holds the parameters rounded to\n"
          "                         T and no optimizer state (an export PyTorch loads; not resumable)\n"
          "  --resume               continue from FILE if it exists: same parameters, optimizer\n"
          "                         state, data order and position; ends bit-identical.  A FILE\n"
          "                         without optimizer state (an export, a PyTorch file) is refused;\n"
          "                         a warning names each hyperparameter that differs from FILE's\n"
          "  --resume-fresh-optimizer  with --resume: take FILE's parameters and position only, and\n"
          "                         start the optimizer fresh (zero state, step 0)\n"
          "  --check-numerics       stop at the first kernel that produces NaN or Inf, naming its\n"
          "                         op and model line (like torch.autograd.detect_anomaly)\n"
          "  --check-against cpu    with --target cuda: run every launch of every step again on the\n"
          "                         CPU from the inputs CUDA gave it, and stop at the first value that\n"
          "                         differs by more than its op's rounding allows (a bound worked out\n"
          "                         from the op and its inputs), naming the op, its model line, the\n"
          "                         element and the tolerance\n"
          "  --check-tol X          every such tolerance times X (default 1: the bound itself)\n"
          "  --load FILE            start from a checkpoint\n"
          "  --eval                 forward only, on the test data (or the training data), no gradients\n"
          "  --eval-out FILE        with --eval: write the per-sample outputs (logits, ...) for the\n"
          "                         whole set, and the loss and metrics as metadata (safetensors)\n"
          "  --metrics FILE         one JSON object per step and per epoch\n"
          "  --bench N              time N training steps on one batch, print JSON, exit\n"
          "  --profile [N]          time every launch of the training step, the median of N steps\n"
          "                         (default 20) on one batch, with its bytes, FLOPs and rates\n"
          "                         against the device's ceilings and its model line; print the\n"
          "                         table sorted by time and exit (CUDA: without CUDA graphs)\n"
          "  --threads N            threads for kernels and products (default: one per core that\n"
          "                         other processes leave free, rechecked every 200 ms; under\n"
          "                         mpirun, the cores over the processes on the machine)\n"
          "  --quiet                no progress output\n"
          "  --log-every N          a plain progress line every N steps, and only the epoch lines\n"
          "                         of epochs in which such a step fell (and the last one)\n"
          "  --tensorboard DIR      write TensorBoard event files into DIR (loss, test loss, metrics,\n"
          "                         learning rate, loss scale, step time; per step and per epoch)\n"
          "  --no-cache             do not use the compiled-kernel cache\n"
          "                         (default $XDG_CACHE_HOME/nnc or ~/.cache/nnc)\n"
          "  --cache-info           (alone) print where the cache is, its entries and their sizes\n"
          "  --cache-clear          (alone) remove nnc's entries from the cache, and nothing else\n"
          "                         (compiled code is kept under NNC_CACHE_MAX bytes, default 1G;\n"
          "                         decompressed data under NNC_DATA_CACHE_MAX, default 2G)\n"
          "  --tf32                 allow TF32 tensor-core math on CUDA\n"
          "  --verbose              say what the target chose when the model loads (on CUDA: cuDNN or\n"
          "                         im2col + cuBLAS for each convolution, its algorithm and workspace)\n"
          "\n"
          "several processes (mpirun -np N nnc MODEL.nn ...: data parallel, as DDP):\n"
          "  each process takes its share of every batch (--batch stays the global batch), the\n"
          "  gradients are averaged over them; process 0 prints and writes metrics and checkpoints\n"
          "  --bucket-mb X          gradients exchanged in buckets of about X MiB (default 25)\n"
          "  --dist-backend B       with --target cuda: nccl (default, when libnccl.so.2 is found)\n"
          "                         sums gradients on the GPUs; mpi sums them through host memory\n"
          "  --data-parallel        the data-parallel step (allreduce nodes) without mpirun: one\n"
          "                         process, to measure what the exchange costs\n"
          "  --version, --help\n"
          "\n"
          "nnc plot RUN.jsonl... -o CURVES.html|.svg   the curves of --metrics files, as a page\n",
          f);
}

static void version(void) {
    printf("nnc %s\ntargets: cpu", NNC_VERSION);
#ifdef NNC_HAVE_CUDA
    printf(", cuda");
#else
    printf(" (built without the CUDA toolkit: no cuda target)");
#endif
    printf("\nblas: %s\n", NNC_BLAS_LIB);
    const char *mpi = comm_library();
    if (mpi) printf("parallel: %s (mpirun -np N nnc ...: data-parallel training)\n", mpi);
    else printf("parallel: none (built without MPI: mpirun cannot share a run between processes)\n");
}

static const char *flag_value(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (*i + 1 >= argc) cli_error("%s needs a value", name);
    return argv[++*i];
}

/* A flag that takes one of `words` (NULL-terminated): its index, or -1 after an error naming
 * them ("--precision: expected f32, bf16 or f16, got 'x'"). */
static int flag_word(const char *flag, const char *v, const char *const *words) {
    int n = 0;
    while (words[n]) n++;
    for (int w = 0; w < n; w++)
        if (!strcmp(v, words[w])) return w;
    char list[256] = "";
    for (int w = 0; w < n; w++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                 w == 0          ? ""
                     : w + 1 < n ? ", "
                                 : " or ",
                 words[w]);
    cli_error("%s: expected %s, got '%s'", flag, list, v);
    return -1;
}

/* Every numeric flag is range-checked where it is read: a value that would wrap (--epochs
 * 4294967296), truncate or mean nothing (--lr nan) is an error, never silently replaced. */
static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end || errno == ERANGE || x < lo || x > hi)
        cli_error("%s: expects an integer from %ld to %ld, got '%s'", flag, lo, hi, v);
    return x;
}

static unsigned long long parse_seed(const char *flag, const char *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!isdigit((unsigned char)*v) || *end || errno == ERANGE)
        cli_error("%s: expects an integer from 0 to %llu, got '%s'", flag, (unsigned long long)UINT64_MAX, v);
    return x;
}

/* A finite number >= 0: what torch.optim accepts for lr and momentum. */
static double parse_rate(const char *flag, const char *v) {
    char *end;
    double x = strtod(v, &end);
    if (*v == 0 || *end) cli_error("%s: expects a number, got '%s'", flag, v);
    if (!isfinite(x) || x < 0) cli_error("%s: must be a finite number >= 0, got '%s'", flag, v);
    return x;
}

/* The flag's name without "=value", for messages. */
static const char *flag_name(Arena *a, const char *arg) {
    const char *eq = strchr(arg, '=');
    return eq ? arena_printf(a, "%.*s", (int)(eq - arg), arg) : arg;
}

/* "out/" and "out//" name the folder "out": the paths nnc prints under it then read as usual. */
static const char *trim_slashes(Arena *a, const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    return arena_printf(a, "%.*s", (int)n, dir);
}

static bool is_flag(const char *arg, const char *name) {
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (arg[n] == 0 || arg[n] == '=');
}

/* ---- flags that cannot go together -------------------------------------------------------------
 * A command does one thing: train (the default), --eval, --bench, print (--emit, --dump-after,
 * --stats) or build (-o).  Two of them, or a flag the chosen one would ignore (--save with
 * --eval: nothing trained to save), is an error that says what each does: nnc never drops a
 * flag silently.  The train section's overrides that are compiled into the step (--batch,
 * --lr, --precision, ...) apply to printing and building too. */
enum { RUN_TRAIN = 1, RUN_EVAL = 2, RUN_BENCH = 4, RUN_PRINT = 8, RUN_BUILD = 16, RUN_ANY = 7 };

typedef struct {
    const char *flag;   /* as the user wrote it: "--emit c" */
    const char *does;   /* "prints the generated code and exits" */
    unsigned mode;      /* RUN_*: one for an action, the actions it applies to for a flag */
    const char *hint;   /* what to do instead, or NULL */
} CliFlag;

static const char *emit_does(const char *what) {
    return !strcmp(what, "ir") ? "prints the graph after every pass and exits"
         : !strcmp(what, "dot") ? "prints the step for Graphviz and exits" : "prints the generated code and exits";
}

/* The action flags given, in a fixed order; returns how many. */
static int cli_actions(const Cli *c, Arena *a, CliFlag *act) {
    int n = 0;
    if (c->emit) act[n++] = (CliFlag){arena_printf(a, "--emit %s", c->emit), emit_does(c->emit), RUN_PRINT, NULL};
    if (c->dump_after)
        act[n++] = (CliFlag){"--dump-after", "prints the graph after one pass and exits", RUN_PRINT, NULL};
    if (c->stats)
        act[n++] = (CliFlag){"--stats", "prints the compiled step's kernels, traffic and memory and exits", RUN_PRINT, NULL};
    if (c->out_dir)
        act[n++] = (CliFlag){"-o", "writes a library (DIR/NAME.c, NAME.h, libNAME.a) and exits", RUN_BUILD, NULL};
    if (c->eval) act[n++] = (CliFlag){"--eval", "evaluates the model without training it", RUN_EVAL, NULL};
    if (c->bench) act[n++] = (CliFlag){"--bench", "times training steps on one batch and exits", RUN_BENCH, NULL};
    if (c->profile)
        act[n++] = (CliFlag){"--profile", "times every launch of a training step and exits", RUN_BENCH, NULL};
    return n;
}

static void cli_conflict(const CliFlag *a, const CliFlag *b, const char *hint) {
    cli_error("%s and %s cannot be used together: %s %s, and %s %s (%s)", a->flag, b->flag, a->flag, a->does, b->flag,
              b->does, hint ? hint : "drop one of them");
}

static void check_combinations(const Cli *c, Arena *a) {
    CliFlag act[7];
    int nact = cli_actions(c, a, act);
    if (nact > 1) {
        bool code_and_lib = c->emit && !strcmp(c->emit, "c") && c->out_dir;
        cli_conflict(&act[0], &act[1],
                     code_and_lib ? "-o DIR also writes that code, to DIR/NAME.c" : "run nnc once for each");
    }
    CliFlag train = {"", "", RUN_TRAIN, NULL};
    const CliFlag *action = nact ? &act[0] : &train;
    const unsigned update = RUN_TRAIN | RUN_BENCH | RUN_PRINT | RUN_BUILD;   /* compiled into the step */
    const CliFlag flags[] = {
        {c->save ? "--save" : NULL, "writes the parameters a training run ends with", RUN_TRAIN,
         c->eval          ? "to evaluate a checkpoint: --load FILE --eval"
             : c->bench   ? "train without --bench to save"
             : c->profile ? "train without --profile to save"
                          : NULL},
        {c->load ? "--load" : NULL, "starts a run from a checkpoint", RUN_ANY, NULL},
        {c->metrics ? "--metrics" : NULL, "records the steps of a training or evaluation run", RUN_TRAIN | RUN_EVAL,
         c->bench         ? "--bench prints its timings as JSON on stdout"
             : c->profile ? "--profile prints its table on stdout"
                          : NULL},
        {c->over.has_epochs ? "--epochs" : NULL, "sets how many epochs training runs", RUN_TRAIN, NULL},
        {c->over.has_seed ? "--seed" : NULL, "seeds the parameters of a run", RUN_ANY,
         c->out_dir ? "a library's parameters come from NAME_init(m, seed)" : NULL},
        {c->threads > 0 ? "--threads" : NULL, "sets the threads a run computes with", RUN_ANY, NULL},
        {c->check_against ? "--check-against" : NULL, "compares the targets while the model runs", RUN_ANY, NULL},
        {c->over.has_lr ? "--lr" : NULL, "changes the update of a training step", update, NULL},
        {c->over.has_momentum ? "--momentum" : NULL, "changes the update of a training step", update, NULL},
        {c->over.has_clip ? "--clip-grad-norm" : NULL, "changes the update of a training step", update, NULL},
    };
    for (size_t i = 0; i < NNC_COUNTOF(flags); i++)
        if (flags[i].flag && !(flags[i].mode & action->mode)) cli_conflict(action, &flags[i], flags[i].hint);
    if (c->check_tol != -1 && !c->check_against)
        cli_error("--check-tol sets the tolerance of --check-against: add --check-against cpu");
}

/* --profile, --profile=N or --profile N: the value is optional, so the next word is its value
 * when it starts as a number does, or when the model was named already and it is not a flag
 * (so `--profile ten` says what --profile takes). */
static long parse_profile(int argc, char **argv, int *i, bool have_model) {
    const char *a = argv[*i], *v = NULL;
    if (a[9] == '=') v = a + 10;
    else if (*i + 1 < argc) {
        const char *next = argv[*i + 1];
        bool number =
            isdigit((unsigned char)next[0]) || ((next[0] == '-' || next[0] == '+') && isdigit((unsigned char)next[1]));
        if (number || (have_model && next[0] != '-')) v = argv[++*i];
    }
    return v ? parse_long("--profile", v, 1, 100000) : 20;
}

static void parse_args(int argc, char **argv, Cli *c, Arena *ar) {
    c->threads = -1;
    c->check_tol = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *f = flag_name(ar, a);
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "--version")) { version(); exit(0); }
        else if (is_flag(a, "--target")) c->target = flag_value(argc, argv, &i, "--target");
        else if (is_flag(a, "--emit")) c->emit = flag_value(argc, argv, &i, "--emit");
        else if (is_flag(a, "--dump-after")) c->dump_after = flag_value(argc, argv, &i, "--dump-after");
        else if (is_flag(a, "-o")) c->out_dir = trim_slashes(ar, flag_value(argc, argv, &i, "-o"));
        else if (is_flag(a, "--save")) c->save = flag_value(argc, argv, &i, "--save");
        else if (is_flag(a, "--load")) c->load = flag_value(argc, argv, &i, "--load");
        else if (is_flag(a, "--metrics")) c->metrics = flag_value(argc, argv, &i, "--metrics");
        else if (is_flag(a, "--epochs")) {
            c->over.epochs = parse_long(f, flag_value(argc, argv, &i, f), 0, INT_MAX);
            c->over.has_epochs = true;
        } else if (is_flag(a, "--batch")) {
            c->over.batch = parse_long(f, flag_value(argc, argv, &i, f), 1, INT_MAX);
            c->over.has_batch = true;
        } else if (is_flag(a, "--seed")) {
            c->over.seed = parse_seed(f, flag_value(argc, argv, &i, f));
            c->over.has_seed = true;
        } else if (is_flag(a, "--threads")) c->threads = parse_long(f, flag_value(argc, argv, &i, f), 1, 4096);
        else if (is_flag(a, "--bench")) c->bench = parse_long(f, flag_value(argc, argv, &i, f), 1, INT_MAX);
        else if (is_flag(a, "--profile")) c->profile = parse_profile(argc, argv, &i, c->model != NULL);
        else if (is_flag(a, "--log-every")) c->log_every = parse_long(f, flag_value(argc, argv, &i, f), 1, LONG_MAX);
        else if (is_flag(a, "--tensorboard")) c->tensorboard = flag_value(argc, argv, &i, "--tensorboard");
        else if (!strcmp(a, "--data-parallel")) c->data_parallel = true;
        else if (is_flag(a, "--dist-backend")) {
            const char *v = flag_value(argc, argv, &i, f);
            if (strcmp(v, "nccl") && strcmp(v, "mpi")) cli_error("--dist-backend: expected nccl or mpi, got '%s'", v);
            c->dist_mpi = !strcmp(v, "mpi");
            c->dist_given = true;
        } else if (is_flag(a, "--bucket-mb")) {
            c->bucket_mb = parse_rate(f, flag_value(argc, argv, &i, f));
            if (!(c->bucket_mb > 0 && c->bucket_mb <= 65536)) cli_error("--bucket-mb: expects a size in MiB in (0, 65536], got %g", c->bucket_mb);
        }
        else if (is_flag(a, "--lr")) {
            c->over.lr = parse_rate(f, flag_value(argc, argv, &i, f));
            c->over.has_lr = true;
        } else if (is_flag(a, "--precision")) {
            static const char *const precisions[] = {"f32", "bf16", "f16", NULL}; /* Precision's order */
            int w = flag_word("--precision", flag_value(argc, argv, &i, f), precisions);
            if (w >= 0) c->over.precision = (Precision)w;
            c->over.has_precision = true;
        } else if (is_flag(a, "--data-on-device")) {
            static const char *const modes[] = {"auto", "true", "false", NULL}; /* DataOnDevice's order */
            int w = flag_word("--data-on-device", flag_value(argc, argv, &i, f), modes);
            if (w >= 0) c->over.data_dev = (DataOnDevice)w;
            c->over.has_data_dev = true;
        } else if (is_flag(a, "--momentum")) {
            c->over.momentum = parse_rate(f, flag_value(argc, argv, &i, f));
            c->over.has_momentum = true;
        } else if (is_flag(a, "--clip-grad-norm")) {
            c->over.clip_norm = parse_rate(f, flag_value(argc, argv, &i, f));
            c->over.has_clip = true;
        } else if (!strcmp(a, "--eval")) c->eval = true;
        else if (is_flag(a, "--eval-out")) c->eval_out = flag_value(argc, argv, &i, "--eval-out");
        else if (!strcmp(a, "--check-numerics")) c->check_numerics = true;
        else if (is_flag(a, "--check-against")) c->check_against = flag_value(argc, argv, &i, "--check-against");
        else if (is_flag(a, "--check-tol")) c->check_tol = parse_rate(f, flag_value(argc, argv, &i, f));
        else if (!strcmp(a, "--resume")) c->resume = true;
        else if (!strcmp(a, "--resume-fresh-optimizer")) c->fresh_optimizer = true;
        else if (is_flag(a, "--save-dtype")) {
            const char *v = flag_value(argc, argv, &i, f);
            if (!strcmp(v, "f32")) c->save_half = 0;
            else if (!strcmp(v, "bf16")) c->save_half = NNC_DT_BF16;
            else if (!strcmp(v, "f16")) c->save_half = NNC_DT_F16;
            else cli_error("--save-dtype: expected f32, bf16 or f16, got '%s'", v);
        } else if (is_flag(a, "--save-every")) c->save_every = parse_long(f, flag_value(argc, argv, &i, f), 1, LONG_MAX);
        else if (!strcmp(a, "--stats")) c->stats = true;
        else if (!strcmp(a, "--no-fuse")) c->no_fuse = true;
        else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) c->quiet = true;
        else if (!strcmp(a, "--no-cache")) c->no_cache = true;
        else if (!strcmp(a, "--cache-info") || !strcmp(a, "--cache-clear")) {
            if (argc != 2) cli_error("%s is a command of its own: nnc %s (without a model or other flags)", a, a);
            c->cache_cmd = a;
            return;
        } else if (!strcmp(a, "--strict-devices")) c->strict = true;
        else if (!strcmp(a, "--tf32")) c->tf32 = true;
        else if (!strcmp(a, "--verbose")) c->verbose = true;
        else if (!strcmp(a, "--f64")) c->f64 = true;
        else if (!strcmp(a, "--verify-ir")) c->verify = true;
        else if (a[0] == '-' && a[1]) cli_error("unknown option '%s' (see nnc --help)", a);
        else if (c->model) cli_error("one model at a time: got '%s' and '%s'", c->model, a);
        else c->model = a;
    }
    if (!c->model) {
        usage(stderr);
        exit(2);
    }
    if (c->emit && strcmp(c->emit, "ir") && strcmp(c->emit, "dot") && strcmp(c->emit, "c") && strcmp(c->emit, "cuda") &&
        strcmp(c->emit, "ptx"))
        cli_error("--emit takes ir, dot, c, cuda or ptx, not '%s'", c->emit);
    if (c->target && strcmp(c->target, "cpu") && strcmp(c->target, "cuda") && strcmp(c->target, "auto"))
        cli_error("--target takes cpu, cuda or auto, not '%s'", c->target);
    if (c->dump_after && !pipeline_has_pass(c->dump_after))
        cli_error("--dump-after: unknown pass '%s' (passes: %s)", c->dump_after, pipeline_pass_names);
    if (c->check_against && strcmp(c->check_against, "cpu"))
        cli_error("--check-against takes cpu (the reference target), not '%s'", c->check_against);
    if (c->profile && (c->check_against || c->check_numerics))
        cli_error("--profile times the step as it normally runs, and %s adds work to every launch: run nnc once "
                  "for each",
                  c->check_against ? "--check-against" : "--check-numerics");
    if (c->check_against && (!c->target || strcmp(c->target, "cuda")))
        cli_error("--check-against cpu compares the cuda target with the cpu: add --target cuda");
    check_combinations(c, ar);
    if (c->check_tol == -1) c->check_tol = 1; /* the default: the numerics' bound itself */
    else if (!(c->check_tol > 0 && c->check_tol < INFINITY))
        cli_error("--check-tol expects a number > 0, got %g", c->check_tol);
    if (c->eval_out && !c->eval) cli_error("--eval-out writes what --eval computes: add --eval");
    if (c->fresh_optimizer && !c->resume)
        cli_error("--resume-fresh-optimizer changes what --resume takes from the checkpoint: add --resume");
}

static void print_stats(const Program *p) {
    for (int k = 0; k < ENTRY_COUNT; k++) {
        const Entry *e = &p->entry[k];
        if (!e->nlaunch) continue;
        int kernels = 0, calls = 0, copies = 0, peer = 0;
        int64_t rd = 0, wr = 0, copied = 0, peered = 0;
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            if (L->kind == L_GEMM) calls++;
            else if (L->kind == L_COPY) {
                const Node *r = &p->g->nodes[L->root];
                bool gpus = DEV_IS_GPU(r->dev) && DEV_IS_GPU(p->g->nodes[r->in[0]].dev);
                *(gpus ? &peer : &copies) += 1;
                *(gpus ? &peered : &copied) += 4 * shape_numel(r->shape, p->g->batch_max);
            } else if (L->kind != L_COLLECTIVE) kernels++;
            for (int j = 0; j < L->nins; j++) rd += 4 * shape_numel(p->g->nodes[L->ins[j]].shape, p->g->batch_max);
            for (int j = 0; j < L->nouts; j++) wr += 4 * shape_numel(p->g->nodes[L->outs[j]].shape, p->g->batch_max);
        }
        printf("%-10s %3d kernels %3d library calls  reads %10" PRId64 " B  writes %10" PRId64
               " B  activations %9" PRId64 " B planned, %9" PRId64 " B unplanned\n",
               e->name, kernels, calls, rd, wr, 4 * e->act_total, 4 * e->naive_elems);
        int runs = 0, in_runs = 0;
        for (int i = 0; i < e->nlaunch; i++) {
            runs += e->launches[i].hcount && e->launches[i].hfirst == i;
            in_runs += e->launches[i].hcount > 0;
        }
        if (runs)
            printf("%-10s %3d kernels in %d run%s of independent launches, each of which a target may run as one\n", "",
                   in_runs, runs, runs == 1 ? "" : "s");
        if (copies)
            printf("%-10s %3d host<->device copies, %" PRId64 " B per call\n", "", copies, copied);
        if (peer)
            printf("%-10s %3d device<->device copies, %" PRId64 " B per call\n", "", peer, peered);
        int reduces = 0;
        int64_t reduced = 0;
        for (int i = 0; i < e->nlaunch; i++) {
            const Launch *L = &e->launches[i];
            if (L->kind != L_COLLECTIVE || p->g->nodes[L->root].op != OP_ALLREDUCE_START) continue;
            reduces++;
            reduced += 4 * shape_numel(p->g->nodes[L->root].shape, p->g->batch_max);
        }
        if (reduces && k == ENTRY_TRAIN)
            printf("%-10s %3d gradients allreduced in %d bucket%s, %" PRId64 " B per process per step\n", "", reduces,
                   p->nbuckets, p->nbuckets == 1 ? "" : "s", reduced);
    }
    printf("parameters %" PRId64 " B  optimizer state %" PRId64 " B\n", 4 * p->param_elems, 4 * p->state_elems);
    graph_print_notes(p->g, stdout, ""); /* lowering choices: an attention composed of ops, and why */
}

/* Debian's OpenBLAS picks its kernels from a CPU table that misses some AVX-512 machines
 * (seen: AMD EPYC run as Haswell, other VMs as Prescott/SSE3).  Where the processor has what
 * OpenBLAS's SkylakeX kernels need and the user has not chosen, choose them: 1.7-1.9x faster
 * GEMMs here (docs/benchmarks.md).  Must run before the BLAS is loaded. */
static void choose_blas_kernels(void) {
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        setenv("OPENBLAS_CORETYPE", "SkylakeX", 0);
}

/* The trainer's view of a tiered start (Backend.upgrade): swapping in the faster build. */
typedef struct {
    const Backend *be;
    LoadedModel *lm;
    uint64_t seed;
} Upgrade;

static bool upgrade_ref(ModelRef *ref, bool wait, char *err, size_t n) {
    Upgrade *u = ref->upgrade_ctx;
    bool swapped = u->be->upgrade(u->lm, u->seed, wait, err, n);
    ref->abi = u->lm->abi;
    ref->m = u->lm->m;
    if (!u->lm->tier) ref->upgrade = NULL;
    return swapped;
}

/* The largest model text nnc reads.  Shipped models are a few KB, and the front end stops a
 * model at 20,000 operations anyway; the bound keeps /dev/zero or `yes |` from eating memory. */
#define MODEL_TEXT_MAX (16 << 20)

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* The model's text, NUL-terminated; exits with a message naming the file on any failure.  A
 * regular file, or a pipe (nnc <(gen) or ... | nnc /dev/stdin), read up to MODEL_TEXT_MAX.
 * A device, a directory or a socket is refused before reading: /dev/zero and /dev/urandom
 * never end.  The FIFO is opened without blocking, so one with no writer reads as empty
 * instead of waiting for one forever. */
static char *read_model_file(const char *path, size_t *len, bool *regular) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) nnc_fatal("%s: cannot read: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
        nnc_fatal("%s: is %s, not a model file (give the path of a .nn file)", path, file_kind(st.st_mode));
    if (S_ISREG(st.st_mode) && st.st_size > MODEL_TEXT_MAX)
        nnc_fatal("%s: is %lld bytes, larger than any model (the limit is %d MiB)", path, (long long)st.st_size,
                  MODEL_TEXT_MAX >> 20);
    if (fcntl(fd, F_SETFL, 0) != 0) nnc_fatal("%s: cannot read: %s", path, strerror(errno));   /* now block */
    size_t n = 0, cap = 65536;
    char *text = xmalloc(cap);
    for (;;) {
        if (cap - n < 2) text = xrealloc(text, cap *= 2);
        ssize_t r = read(fd, text + n, cap - n - 1);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) nnc_fatal("%s: cannot read: %s", path, strerror(errno));
        if (r == 0 || (n += (size_t)r) > MODEL_TEXT_MAX) break;
    }
    close(fd);
    if (n > MODEL_TEXT_MAX)
        nnc_fatal("%s: is more than %d MiB, larger than any model (is it a model file?)", path, MODEL_TEXT_MAX >> 20);
    if (n == 0 && S_ISFIFO(st.st_mode)) nnc_fatal("%s: a pipe that gave no text (nothing was written to it)", path);
    text[n] = 0;
    *len = n;
    *regular = S_ISREG(st.st_mode);
    return text;
}

/* The folder of the model file, where its relative data paths are read from ("." for "m.nn"). */
static const char *model_dir(Arena *a, const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return ".";
    while (slash > path && slash[-1] == '/') slash--; /* "a//m.nn" */
    return slash == path ? "/" : arena_printf(a, "%.*s", (int)(slash - path), path);
}

/* Whether the model has an output that is not one number (what --eval-out writes; the
 * trainer averages the scalars into the metrics). */
static bool has_tensor_output(const Graph *g) {
    for (int i = 0; i < g->nouts; i++)
        if (shape_numel(g->nodes[g->outs[i].node].shape, 2) != 1) return true;
    return false;
}

/* After the passes: emit, print stats, build ahead of time, or train.  `ref` is the CPU
 * reference of --check-against, compiled from the same text. */
static int act(const Cli *c, Compiled *cp, Compiled *ref, double t_process, Comm *comm) {
    Program *p = &cp->p;
    const Model *m = cp->m;
    int rank = comm_rank(comm);
    if (rank != 0 && (c->emit || c->dump_after || c->stats || c->out_dir)) return 0;   /* process 0 shows it */
    /* --dump-after is an inspection flag like --emit ir: it prints the graph and exits */
    if (c->dump_after && p->dump_skipped)
        nnc_fatal("--dump-after=%s: the %s pass did not run on this model, so there is no graph after it to print: %s",
                  c->dump_after, c->dump_after, p->dump_skipped);
    if ((c->emit && !strcmp(c->emit, "ir")) || (c->dump_after && !c->emit)) return 0;
    if (c->emit && !strcmp(c->emit, "dot")) {
        program_print_dot(p, stdout);
        return 0;
    }
    const Backend *be = cp->be;
    char err[8192];
    if (!be) nnc_fatal("--target cuda: this nnc was built without the CUDA toolkit (see nnc --version)");
    long threads = c->threads;
    if (threads <= 0 && comm) threads = comm_threads(comm);   /* the processes on a machine share its cores */
    if (threads > 0) {
        char t[32];
        snprintf(t, sizeof t, "%ld", threads);
        setenv("OMP_NUM_THREADS", t, 1); /* OpenMP's and the pool's (include/nnc_pool.h) */
    }
    if (c->f64 && m->train.precision != PREC_F32)
        nnc_fatal("--f64 computes everything in double precision; it cannot be combined with precision %s",
                  m->train.precision == PREC_BF16 ? "bf16" : "f16");
    BuildOpts bo = {.f64 = c->f64,
                    .cache_dir = compile_cache_dir(&cp->arena, !c->no_cache),
                    .tf32 = c->tf32,
                    .verbose = c->verbose,
                    .check_numerics = c->check_numerics,
                    .device = comm_local_rank(comm),
                    .tiered = !comm && !ref && !c->profile, /* one process: the others would each build alike */
                    .launch_access = c->profile > 0}; /* the CPU times each launch through it */
    if (c->emit) {
        bool wants_cpu = !strcmp(c->emit, "c");
        if (wants_cpu != (p->target == DEV_CPU)) nnc_fatal("--emit %s needs --target %s", c->emit, wants_cpu ? "cpu" : "cuda");
        Str out = {0};
        if (!strcmp(c->emit, "ptx")) {
            if (!be->emit_asm) nnc_fatal("--emit ptx: this target has no assembly to show");
            if (!be->emit_asm(p, &bo, &out, err, sizeof err)) nnc_fatal("--emit ptx: %s", err);
        } else
            be->render(p, &bo, &out);
        fputs(out.buf, stdout);
        str_free(&out);
        return 0;
    }
    if (c->stats) {
        print_stats(p);
        return 0;
    }
    if (c->out_dir) {
        if (!be->build_library) nnc_fatal("-o builds CPU libraries; use --target cpu");
        if (!be->build_library(p, &bo, c->out_dir, err, sizeof err)) nnc_fatal("%s", err);
        const char *mn = model_c_name(p);
        printf("wrote %s/%s.c, %s/%s.h, %s/lib%s.a\n", c->out_dir, mn, c->out_dir, mn, c->out_dir, mn);
        return 0;
    }
    if (!m->train.present) nnc_fatal("%s has no train section: nothing to run (use --emit, --stats or -o)", c->model);
    if (c->eval_out && !has_tensor_output(m->g) && rank == 0) /* the file is then its metadata alone */
        fprintf(stderr,
                "nnc: warning: --eval-out %s: %s declares no per-sample output (output NAME = ..., e.g. "
                "output probs = softmax(logits)), so the file will hold no tensor, only the loss and metrics "
                "as metadata\n",
                c->eval_out, c->model);
    /* data parallel: process 0 builds (or finds) the code first, the others then find it cached */
    LoadedModel *lm = rank == 0 ? compile_load(cp, &bo, err, sizeof err) : NULL;
    int built = rank != 0 || lm != NULL;
    if (comm) comm_bcast_int(comm, &built);
    if (!built) {
        if (rank == 0) fprintf(stderr, "nnc: error: %s\n", err);
        comm_mark_agreed(comm);
        return 1;
    }
    if (rank != 0) lm = compile_load(cp, &bo, err, sizeof err);
    if (!lm) nnc_fatal("%s", err);
    if (ref) { /* --check-against cpu: the reference runs launch by launch */
        BuildOpts cbo = bo;
        cbo.launch_access = true;
        LoadedModel *cpu = compile_load(ref, &cbo, err, sizeof err);
        if (!cpu) nnc_fatal("--check-against cpu: %s", err);
        lm = check_pair(be, lm, p, &bo, ref->be, cpu, &ref->p, &cbo, c->check_tol, err, sizeof err);
        if (!lm) nnc_fatal("%s", err);
    }
    TrainOpts to = {.epochs = m->train.epochs,
                    .seed = m->train.seed,
                    .shuffle = m->train.shuffle,
                    .quiet = c->quiet,
                    .verbose = c->verbose,
                    .progress = isatty(2) && !c->quiet,
                    .metrics_path = c->metrics,
                    .log_every = c->log_every,
                    .tensorboard = c->tensorboard,
                    .save_half = c->save_half,
                    .save_path = c->save,
                    .load_path = c->load,
                    .eval_only = c->eval,
                    .eval_out = c->eval_out,
                    .bench_steps = (int)(c->bench ? c->bench : c->profile),
                    .source_file = c->model,
                    .t_process = t_process,
                    .save_every = c->save_every,
                    .resume = c->resume,
                    .fresh_optimizer = c->fresh_optimizer,
                    .cache_dir = bo.cache_dir,
                    .comm = comm,
                    .global_batch = m->train.batch,
                    .no_write = rank != 0};
    if (rank != 0) {   /* process 0 prints and writes for the run */
        to.quiet = true;
        to.progress = false;
        to.tensorboard = NULL;
        to.metrics_path = NULL;   /* --eval-out stays: every process must shard evaluation alike */
    }
    Profile *prof = NULL;
    if (c->profile) {
        if (!(prof = profile_new(be, lm, p, &bo, (int)c->profile, stdout, err, sizeof err))) nnc_fatal("%s", err);
        to.profile = profile_hook(prof);
    }
    Upgrade up = {be, lm, to.seed};
    ModelRef mr = {lm->abi, lm->m, lm->tier ? upgrade_ref : NULL, &up, compile_tables(cp, &bo)};
    int rc = train_run(&m->train, &mr, &to);
    if (ref) check_pair_finish(lm, c->quiet ? NULL : stderr);
    else be->unload(lm);
    profile_free(prof);
    return rc;
}

/* "117.0 KiB": a size as people read it. */
static const char *size_text(uint64_t b, char buf[32]) {
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double x = (double)b;
    while (x >= 1024 && u < 4) x /= 1024, u++;
    snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", x, unit[u]);
    return buf;
}

/* nnc --cache-info / --cache-clear: the cache directory a run would use, as entries. */
static int cache_command(const char *cmd) {
    static const char *const kinds[CACHE_KINDS] = {"compiled CPU code", "CUDA cubins", "decompressed data"};
    char *dir = cache_default_dir(), err[1024], b1[32], b2[32];
    if (!dir) nnc_fatal("%s: there is no cache directory (set XDG_CACHE_HOME or HOME)", cmd);
    bool clear = !strcmp(cmd, "--cache-clear");
    CacheReport r;
    if (!(clear ? cache_clear(dir, &r, err, sizeof err) : cache_report(dir, &r, err, sizeof err))) nnc_fatal("%s", err);
    int entries = 0;
    uint64_t bytes = 0;
    for (int k = 0; k < CACHE_KINDS; k++) entries += r.kind[k].entries, bytes += r.kind[k].bytes;
    if (clear) {
        if (r.missing) printf("nothing to remove: %s does not exist\n", dir);
        else printf("removed %d entr%s (%s) from %s\n", entries, entries == 1 ? "y" : "ies", size_text(bytes, b1), dir);
    } else {
        printf("cache %s%s\n", dir, r.missing ? " (not created yet: nothing cached)" : "");
        if (r.unsafe) printf("  not used: %s; runs compile in a private temporary directory\n", r.unsafe);
        for (int k = 0; k < CACHE_KINDS; k++)
            printf("  %-18s %5d entr%-3s %10s\n", kinds[k], r.kind[k].entries, r.kind[k].entries == 1 ? "y" : "ies",
                   size_text(r.kind[k].bytes, b1));
        printf("  %-18s %5d entr%-3s %10s\n", "total", entries, entries == 1 ? "y" : "ies", size_text(bytes, b1));
        printf("limits: compiled code %s (NNC_CACHE_MAX), data %s (NNC_DATA_CACHE_MAX); the least recently used "
               "go first\n",
               size_text(r.code_max, b1), size_text(r.data_max, b2));
    }
    if (r.others)
        printf("%d file%s there %s not nnc's: left alone\n", r.others, r.others == 1 ? "" : "s",
               r.others == 1 ? "is" : "are");
    if (r.temporaries)
        printf("%d file%s being written by a running nnc: left alone\n", r.temporaries, r.temporaries == 1 ? "" : "s");
    free(dir);
    return 0;
}

/* Every process of a data-parallel run compiles the same text and fails the same way: process
 * 0 says why, and all leave the job together. */
static void compile_or_exit(Compiled *cp, const CompileOpts *o, char *src, Comm *comm) {
    char err[1024];
    if (compile_model(cp, o, err, sizeof err)) return;
    if (comm_rank(comm) == 0) {
        if (err[0]) fprintf(stderr, "nnc: error: %s\n", err);
        else fprintf(stderr, "%d error%s\n", cp->diag.errors ? cp->diag.errors : 1, cp->diag.errors > 1 ? "s" : "");
    }
    compile_free(cp);
    free(src);
    comm_mark_agreed(comm);
    comm_finish(comm, 1);
    exit(1);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "plot")) return plot_main(argc - 1, argv + 1); /* a model named plot: ./plot */
    double t_process = train_now();
    choose_blas_kernels();
    Cli c = {0};
    Arena arena = {0};
    parse_args(argc, argv, &c, &arena);
    if (c.cache_cmd) {
        int rc = cache_command(c.cache_cmd);
        arena_free(&arena);
        return rc;
    }
    char cerr[512];
    Comm *comm = comm_init(&argc, &argv, cerr, sizeof cerr);   /* NULL: not under mpirun */
    if (!comm && cerr[0]) nnc_fatal("%s", cerr);
    if (!comm && c.data_parallel) comm = comm_solo();
    if (comm && c.profile)
        nnc_fatal("--profile times the step of one process: run it without mpirun and --data-parallel");
    if (!comm && (c.bucket_mb || c.dist_given))
        nnc_fatal("%s applies to data-parallel training, and this is one process: run under mpirun -np N, or add "
                  "--data-parallel", c.bucket_mb ? "--bucket-mb" : "--dist-backend");
    comm_allow_device_sums(comm, !c.dist_mpi);
    FILE *quiet_diag = comm_rank(comm) != 0 ? fopen("/dev/null", "w") : NULL;   /* process 0 reports */
    if ((c.save_every || c.resume) && !c.save)
        nnc_fatal("--save-every and --resume need --save FILE (the checkpoint they write and read)");
    if (c.save_half && (!c.save || c.resume || c.save_every))
        nnc_fatal("--save-dtype %s writes --save FILE's parameters in half precision, without the optimizer state: "
                  "it needs --save, and a run cannot --resume or --save-every from such a file (save f32 "
                  "checkpoints, and export at the end)", c.save_half == NNC_DT_BF16 ? "bf16" : "f16");
    size_t len;
    bool regular;
    char *src = read_model_file(c.model, &len, &regular);
    if (strlen(src) != len) nnc_fatal("%s: contains a NUL byte at offset %zu: not a model file", c.model, strlen(src));
    /* --check-numerics checks every op's output, so it compiles one kernel per op */
    CompileOpts o = {.file = c.model,
                     .source = src,
                     .diag_out = quiet_diag ? quiet_diag : stderr,
                     .target = c.target,
                     .data_dir = regular ? model_dir(&arena, c.model) : NULL,
                     .over = c.over,
                     .fuse = !c.no_fuse && !c.check_numerics && !c.check_against,
                     .strict_devices = c.strict,
                     .keep_values = c.check_against != NULL,
                     .dump_after = c.dump_after,
                     .dump = comm_rank(comm) == 0 ? stdout : NULL,
                     .data_parallel = comm != NULL,
                     .world = comm_size(comm),
                     .bucket_bytes = (int64_t)(c.bucket_mb * 1048576)};
    if (c.emit && !strcmp(c.emit, "ir")) o.dump_after = "all";
    Compiled cp, ref;
    compile_or_exit(&cp, &o, src, comm);
    if (cp.device_note[0] && !c.quiet && comm_rank(comm) == 0) fprintf(stderr, "nnc: %s\n", cp.device_note);
    if (c.check_against) {   /* the same model again, compiled for the CPU as the reference */
        CompileOpts ro = o;
        ro.target = "cpu";
        ro.dump_after = NULL;
        ro.strict_devices = false;
        compile_or_exit(&ref, &ro, src, comm);
    }
    int rc = act(&c, &cp, c.check_against ? &ref : NULL, t_process, comm);
    if (c.check_against) compile_free(&ref);
    compile_free(&cp);
    arena_free(&arena);
    free(src);
    if (quiet_diag) fclose(quiet_diag);
    comm_finish(comm, rc);
    return rc;
}
