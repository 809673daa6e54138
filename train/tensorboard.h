/* tensorboard.h - TensorBoard event files (what PyTorch's SummaryWriter writes), in plain C.
 *
 *   TbWriter *w = tb_open("runs/mlp", err, sizeof err);    // runs/mlp/events.out.tfevents.<time>.<host>.<pid>
 *   tb_begin(w, step);                                    // one Event at a step
 *   tb_scalar(w, "train/loss", 0.81);                     // any number of scalars in it
 *   tb_end(w);
 *   if (!tb_close(w, err, sizeof err)) ...                // false: a write failed, err says which and why
 *
 * A file is a TFRecord stream: each record is its length (uint64, little-endian), the masked
 * CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.  The data is a protobuf
 * `Event` (wall_time = 1: double, step = 2: int64, file_version = 3: string, summary = 5), the
 * first one carrying file_version "brain.Event:2", the others a `Summary` of `Value`s
 * (tag = 1: string, simple_value = 2: float). */
#ifndef NNC_TENSORBOARD_H
#define NNC_TENSORBOARD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct TbWriter TbWriter;

/* Creates `dir` (and its parents) if needed and a new event file in it; NULL with err filled. */
TbWriter *tb_open(const char *dir, char *err, size_t n);
void tb_begin(TbWriter *w, int64_t step);
void tb_scalar(TbWriter *w, const char *tag, double value);
/* Writes the event begun by tb_begin (nothing if it holds no scalar); false once a write failed. */
bool tb_end(TbWriter *w);
/* Hands what is buffered to the file, so a running TensorBoard sees it; false once a write failed. */
bool tb_flush(TbWriter *w);
/* Flushes, closes and frees w; false if any write failed, with err ("PATH: reason") filled. */
bool tb_close(TbWriter *w, char *err, size_t n);
const char *tb_path(const TbWriter *w);
/* Why the first failed write failed (strerror), or "". */
const char *tb_error(const TbWriter *w);

/* CRC-32C (Castagnoli), as TFRecord checks records, of n bytes continuing from crc (0 to start). */
uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n);
#endif
