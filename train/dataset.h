/* dataset.h - the arrays a model's inputs are fed from, loaded per the train section. */
#ifndef NNC_DATASET_H
#define NNC_DATASET_H
#include "../include/nnc_abi.h"
#include "../ir/config.h"

/* A token stream's windows (tokens()): sample j is the window of T tokens starting at
 * offsets[j], this epoch's random starts (dataset_windows_draw), or, before any draw, at j * T
 * (the windows in file order: the test set, shuffle = false).  Either way a set holds
 * (ntok - 1) / T windows, so that an epoch reads about every token once. */
typedef struct {
    int32_t *tokens;
    int64_t ntok, T;
    int64_t *offsets;
    const char *path;
    size_t data_off, width; /* token i lies at byte data_off + i * width of the file */
} TokenStream;

typedef struct {
    const char *name;       /* the input it feeds */
    int dtype; /* what the model reads: NNC_TYPE_F32 or NNC_TYPE_I32 */
    int64_t row_elems;      /* elements per sample */
    void *data;             /* n * row_elems: f32, i32, or u8 when `bytes` */
    bool bytes;             /* 8-bit samples kept as they are and scaled per batch */
    float scale;
    char *cache_path;       /* malloc'd: where to cache these 8-bit samples once all loaded, or NULL */
    void *map;              /* data lies in this mapped cache entry (munmap, not free), or NULL */
    size_t map_len;
    const TokenStream *stream; /* the samples are windows of this stream (data NULL), from */
    int64_t shift; /* token `shift` of each window on: 0 the window, 1 the next tokens */
} Column;

typedef struct {
    Column *cols;           /* in the order of the model's inputs */
    int ncols;
    int64_t n;              /* samples */
    struct CacheWriter *writer;   /* the decompressed samples being cached in the background */
    TokenStream *stream; /* the token stream tokens() feeds every column from, or NULL */
} Dataset;

/* Loads the train (test = false) or test sources of every input of `model` (its tables: the
 * inputs' shapes and types and what their values must be), as the train section binds them;
 * false with `err` set.  Safe to call for the train and the test set from two threads at once.
 * Decompressed .gz samples go into the data cache from a background thread, which dataset_free
 * joins. */
bool dataset_load(const TrainConfig *t, const nnc_model_abi *model, bool test, uint64_t seed, const char *cache_dir,
                  Dataset *d, char *err, size_t n);
void dataset_free(Dataset *d);
/* The size of an ABI dimension d over a batch of `batch` rows (a negative d is the batch axis times -d). */
static inline int64_t tensor_dim(int64_t d, int64_t batch) { return d < 0 ? -d * batch : d; }
/* "f32[B,784]": a tensor's type and shape as a model declares it, `batch` for its batch axis
 * ("B*32" where it is merged with others). */
const char *tensor_shape_str(const nnc_tensor_info *t, const char *batch, char *buf, size_t n);
/* Copies samples idx[0..rows) of every column into bufs[c] (each row_elems * rows). */
void dataset_gather(const Dataset *d, const int64_t *idx, int64_t rows, void **bufs);
/* Points ptrs[c] at sample `first` of every column, when no column needs converting (8-bit
 * samples do) and no windows were drawn; false otherwise.  The rows that follow are the batch,
 * in order. */
bool dataset_direct(const Dataset *d, int64_t first, void **ptrs);
/* Shuffling a token stream: epoch `epoch`'s windows at random starts, sample p's from Philox
 * block p of stream WINDOWS_KEY + epoch under the seed (nanoGPT's torch.randint(len - T)).
 * False, drawing nothing, when the set has no token stream (the trainer permutes it instead). */
#define DATASET_WINDOWS_KEY 0x57494E444F57ULL /* "WINDOW" */
bool dataset_windows_draw(Dataset *d, uint64_t seed, int epoch);
#endif
