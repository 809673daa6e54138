/* tensorboard.c - TensorBoard event files without TensorFlow or a protobuf library (see
 * tensorboard.h for the format).  An Event is encoded by hand into a byte buffer: the three
 * messages it needs have five fields between them, so a general encoder would be larger than
 * this file.  Records go through a 64 KiB stdio buffer; the trainer flushes at every epoch and
 * at most every few seconds, so a running TensorBoard follows the run. */
#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    unsigned char *p;
    size_t len, cap;
    bool oom;
} Bytes;

struct TbWriter {
    FILE *f;
    char *path;
    int64_t step;
    Bytes summary; /* the Summary message of the event being built */
    Bytes event; /* the Event around it */
    int err; /* errno of the first failed write, or 0 */
};

/* ---- CRC-32C: the reflected polynomial 0x82F63B78, a byte at a time from a table ---- */

static uint32_t crc_table[256];

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t tb_crc32c(uint32_t crc, const void *p, size_t n) {
    if (!crc_table[1]) crc_table_init();
    const unsigned char *b = p;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ b[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* TFRecord stores CRCs rotated and offset, so that a CRC of data holding CRCs stays strong. */
static uint32_t masked_crc(const void *p, size_t n) {
    uint32_t c = tb_crc32c(0, p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf's wire format: varints, fixed-width little-endian numbers, length-prefixed bytes ---- */

static void put(Bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void put_varint(Bytes *b, uint64_t v) {
    unsigned char c[10];
    size_t n = 0;
    do {
        c[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, c, n);
}

static void put_le(Bytes *b, uint64_t v, int bytes) {
    unsigned char c[8];
    for (int i = 0; i < bytes; i++) c[i] = (unsigned char)(v >> (8 * i));
    put(b, c, (size_t)bytes);
}

enum { WIRE_VARINT = 0, WIRE_I64 = 1, WIRE_LEN = 2, WIRE_I32 = 5 };

static void put_key(Bytes *b, int field, int wire) { put_varint(b, (uint64_t)(field << 3 | wire)); }

static void put_len(Bytes *b, int field, const void *p, size_t n) {
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
    put(b, p, n);
}

static double wall_time(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Event { wall_time = 1; step = 2; file_version = 3 | summary = 5 }, framed as a record. */
static bool write_event(TbWriter *w, int64_t step, int field, const void *what, size_t n) {
    Bytes *e = &w->event;
    e->len = 0;
    double t = wall_time();
    uint64_t bits;
    memcpy(&bits, &t, sizeof bits);
    put_key(e, 1, WIRE_I64);
    put_le(e, bits, 8);
    put_key(e, 2, WIRE_VARINT);
    put_varint(e, (uint64_t)step);
    put_len(e, field, what, n);
    if (e->oom || w->summary.oom) {
        if (!w->err) w->err = ENOMEM;
        return false;
    }
    unsigned char head[12];
    for (int i = 0; i < 8; i++) head[i] = (unsigned char)((uint64_t)e->len >> (8 * i));
    uint32_t hc = masked_crc(head, 8), dc = masked_crc(e->p, e->len);
    for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(hc >> (8 * i));
    unsigned char tail[4] = {(unsigned char)dc, (unsigned char)(dc >> 8), (unsigned char)(dc >> 16),
                             (unsigned char)(dc >> 24)};
    errno = 0;
    if (fwrite(head, 1, 12, w->f) != 12 || fwrite(e->p, 1, e->len, w->f) != e->len || fwrite(tail, 1, 4, w->f) != 4) {
        if (!w->err) w->err = errno ? errno : EIO;
        return false;
    }
    return true;
}

/* mkdir -p, as SummaryWriter's os.makedirs(exist_ok=True): the directories nnc makes get the
 * umask's permissions, like every file it writes where it is asked to. */
static bool make_dirs(const char *dir, char *err, size_t n) {
    char *p = strdup(dir);
    if (!p) return snprintf(err, n, "out of memory"), false;
    for (char *s = p + 1;; s++) {
        if (*s && *s != '/') continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            snprintf(err, n, "--tensorboard %s: cannot create directory '%s': %s", dir, p, strerror(errno));
            free(p);
            return false;
        }
        *s = c;
        if (!c) break;
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, n, "--tensorboard %s: not a directory", dir);
        return false;
    }
    return true;
}

/* events.out.tfevents.<seconds>.<host>.<pid>, the name SummaryWriter gives (TensorBoard reads
 * every file whose name holds "tfevents"), created new: never someone else's file or link. */
static FILE *create_file(const char *dir, char **path, char *err, size_t n) {
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    for (char *h = host; *h; h++)
        if (*h == '/') *h = '_';
    size_t len = strlen(dir) + strlen(host) + 96;
    *path = malloc(len);
    if (!*path) return snprintf(err, n, "out of memory"), NULL;
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) { /* two runs in one second in one process (a library) */
        char again[16] = "";
        if (k) snprintf(again, sizeof again, ".%d", k);
        snprintf(*path, len, "%s/events.out.tfevents.%lld.%s.%ld%s", dir, (long long)time(NULL), host, (long)getpid(),
                 again);
        fd = open(*path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        snprintf(err, n, "--tensorboard %s: cannot create %s: %s", dir, *path, strerror(errno));
        if (fd >= 0) close(fd);
        free(*path);
        *path = NULL;
    }
    return f;
}

TbWriter *tb_open(const char *dir, char *err, size_t n) {
    if (!make_dirs(dir, err, n)) return NULL;
    TbWriter *w = calloc(1, sizeof *w);
    if (!w) return snprintf(err, n, "out of memory"), NULL;
    if (!(w->f = create_file(dir, &w->path, err, n))) {
        free(w);
        return NULL;
    }
    setvbuf(w->f, NULL, _IOFBF, 1 << 16);
    static const char version[] = "brain.Event:2";
    if (!write_event(w, 0, 3, version, sizeof version - 1) || !tb_flush(w)) {
        snprintf(err, n, "--tensorboard %s: cannot write %s: %s", dir, w->path, strerror(w->err));
        tb_close(w, NULL, 0);
        return NULL;
    }
    return w;
}

void tb_begin(TbWriter *w, int64_t step) {
    w->step = step;
    w->summary.len = 0;
}

/* Summary { repeated Value value = 1 }, Value { string tag = 1; float simple_value = 2 } */
void tb_scalar(TbWriter *w, const char *tag, double value) {
    size_t n = strlen(tag), tag_bytes = 1 + (n < 128 ? 1 : n < 16384 ? 2 : 3) + n;
    float f = (float)value;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (n >= 1u << 21) n = 0; /* no tag is 2 MiB long; keep the length above true */
    put_key(&w->summary, 1, WIRE_LEN);
    put_varint(&w->summary, tag_bytes + 5);
    put_len(&w->summary, 1, tag, n);
    put_key(&w->summary, 2, WIRE_I32);
    put_le(&w->summary, bits, 4);
}

bool tb_end(TbWriter *w) {
    if (w->err) return false;
    if (!w->summary.len && !w->summary.oom) return true;
    return write_event(w, w->step, 5, w->summary.p, w->summary.len);
}

bool tb_flush(TbWriter *w) {
    errno = 0;
    if (fflush(w->f) != 0 && !w->err) w->err = errno ? errno : EIO;
    return !w->err;
}

bool tb_close(TbWriter *w, char *err, size_t n) {
    if (!w) return true;
    tb_flush(w);
    errno = 0;
    if (fclose(w->f) != 0 && !w->err) w->err = errno ? errno : EIO;
    bool ok = !w->err;
    if (!ok && err) snprintf(err, n, "%s: %s", w->path, strerror(w->err));
    free(w->summary.p);
    free(w->event.p);
    free(w->path);
    free(w);
    return ok;
}

const char *tb_path(const TbWriter *w) { return w->path; }
const char *tb_error(const TbWriter *w) { return w->err ? strerror(w->err) : ""; }
