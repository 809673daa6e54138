/*
 * test_safetensors.c - nnc_st_save / nnc_st_load / nnc_st_parse: round trip
 * of every dtype (0-d and empty tensors too), the crc, refusal of truncated,
 * corrupted and bit-flipped files, the header validator, and that a failed
 * save leaves the previous checkpoint intact.
 */
#define _XOPEN_SOURCE 700

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include "check.h"
#include "safetensors.h"

#define NT 9
static uint8_t u8[5] = { 0, 1, 127, 128, 255 };
static int8_t i8[3] = { -128, 0, 127 };
static int16_t i16[4] = { -32768, -1, 1, 32767 };
static int32_t i32[2][3] = { { INT32_MIN, -1, 0 }, { 1, 2, INT32_MAX } };
static int64_t i64[2] = { INT64_MIN, INT64_MAX };
static float f32[2][2][2] = { { { 1.5f, -2 }, { 3, 4 } }, { { 5, 6 }, { 7, 1e-30f } } };
static double f64[3] = { 3.141592653589793, -0.0, 1e300 };
static float scalar = 42.0f;
static nnc_st_tensor ts[NT] = {
    { "u8", NNC_DT_U8, 1, { 5 }, u8 },
    { "layer.0/i8 \"quoted\" \xc3\xa9", NNC_DT_I8, 1, { 3 }, i8 },
    { "i16", NNC_DT_I16, 2, { 2, 2 }, i16 },
    { "i32", NNC_DT_I32, 2, { 2, 3 }, i32 },
    { "i64", NNC_DT_I64, 1, { 2 }, i64 },
    { "f32", NNC_DT_F32, 3, { 2, 2, 2 }, f32 },
    { "f64", NNC_DT_F64, 1, { 3 }, f64 },
    { "scalar", NNC_DT_F32, 0, { 0 }, &scalar },
    { "empty", NNC_DT_F64, 2, { 0, 4 }, NULL },
};
static const nnc_st_meta meta[2] = { { "step", "1000" }, { "note", "tab\there \"q\" \\ \xc3\xa9" } };

static size_t tensor_bytes(const nnc_st_tensor *t)
{
    size_t n = nnc_dtype_size(t->dtype);
    int i;
    for (i = 0; i < t->rank; i++)
        n *= (size_t)t->dims[i];
    return n;
}

/* f holds exactly ts[] in order, with data aligned to each dtype. */
static int same_as_saved(const nnc_st_file *f)
{
    int i, ok = nnc_st_count(f) == NT;
    for (i = 0; ok && i < NT; i++) {
        const nnc_st_tensor *t = nnc_st_get(f, i);
        size_t n = tensor_bytes(&ts[i]);
        ok = strcmp(t->name, ts[i].name) == 0 && t->dtype == ts[i].dtype &&
             t->rank == ts[i].rank &&
             memcmp(t->dims, ts[i].dims, (size_t)t->rank * sizeof t->dims[0]) == 0 && t->data &&
             (n == 0 || memcmp(t->data, ts[i].data, n) == 0) &&
             (uintptr_t)t->data % nnc_dtype_size(t->dtype) == 0 && nnc_st_find(f, ts[i].name) == t;
    }
    return ok;
}

static void test_round_trip(void)
{
    char err[512] = "";
    const char *path = check_path("rt.safetensors");
    nnc_st_file *f;
    unsigned char *buf;
    size_t len;
    uint64_t hlen = 0;
    int rc = nnc_st_save(path, ts, NT, meta, 2, err, sizeof err), i;
    CHECK(rc == 0, "save all dtypes %s", err);
    f = nnc_st_load(path, err, sizeof err);
    CHECK(f && same_as_saved(f), "load gives back every tensor, in order, aligned %s", err);
    CHECK(f && nnc_st_meta_get(f, "step") && strcmp(nnc_st_meta_get(f, "step"), "1000") == 0 &&
              strcmp(nnc_st_meta_get(f, "note"), meta[1].value) == 0,
          "metadata round trip, escapes included");
    CHECK(f && nnc_st_meta_get(f, "nnc_crc32") && strlen(nnc_st_meta_get(f, "nnc_crc32")) == 8,
          "nnc_crc32 recorded: %s", f ? nnc_st_meta_get(f, "nnc_crc32") : "?");
    CHECK(f && !nnc_st_find(f, "nope") && !nnc_st_meta_get(f, "nope") && !nnc_st_get(f, NT) &&
              !nnc_st_get(f, -1),
          "absent names and indices give NULL");
    nnc_st_close(f);
    buf = check_read(path, &len);
    for (i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    CHECK(hlen % 8 == 0 && buf[8] == '{',
          "header length %llu is a multiple of 8", (unsigned long long)hlen);
    f = nnc_st_parse(buf, len, "mem", err, sizeof err);
    memset(buf, 0xAA, len); /* parse must have copied what it keeps */
    free(buf);
    CHECK(f && same_as_saved(f), "parse from memory copies the data %s", err);
    nnc_st_close(f);
    rc = nnc_st_save(path, NULL, 0, NULL, 0, err, sizeof err);
    f = rc == 0 ? nnc_st_load(path, err, sizeof err) : NULL;
    CHECK(f && nnc_st_count(f) == 0, "an empty checkpoint round trips %s", err);
    nnc_st_close(f);
    nnc_st_close(NULL);
}

/* Every truncation and every single-bit flip in the data is refused. */
static void test_damage(void)
{
    char err[512] = "";
    const char *path = check_path("dmg.safetensors");
    unsigned char *buf;
    size_t len, cut, i, hlen;
    int trunc_ok = 1, flip_ok = 1, hdr_flip_safe = 1, rc;
    nnc_st_file *f;
    rc = nnc_st_save(path, ts, NT, meta, 2, err, sizeof err);
    buf = check_read(path, &len);
    hlen = (size_t)buf[0] | (size_t)buf[1] << 8;
    for (cut = 0; cut < len; cut++) {
        f = nnc_st_parse(buf, cut, "t", err, sizeof err);
        trunc_ok &= f == NULL && strncmp(err, "t: ", 3) == 0;
        nnc_st_close(f);
    }
    CHECK(rc == 0 && trunc_ok, "all %zu truncations are refused with a named error", len);
    for (i = 8 + hlen; i < len; i++) {
        int bit;
        for (bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1 << bit);
            f = nnc_st_parse(buf, len, "t", err, sizeof err);
            flip_ok &= f == NULL && strstr(err, "checksum mismatch") != NULL;
            nnc_st_close(f);
            buf[i] ^= (unsigned char)(1 << bit);
        }
    }
    CHECK(flip_ok, "all %zu single-bit flips in the data are caught by the crc", (len - 8 - hlen) * 8);
    for (i = 0; i < 8 + hlen; i++) { /* must not crash; most are refused */
        buf[i] ^= 0x10;
        f = nnc_st_parse(buf, len, "t", err, sizeof err);
        hdr_flip_safe &= f != NULL || err[0] != '\0';
        nnc_st_close(f);
        buf[i] ^= 0x10;
    }
    CHECK(hdr_flip_safe, "bit flips in the header never crash and always explain a refusal");
    buf[len - 1] ^= 1;
    check_write(path, buf, len);
    f = nnc_st_load(path, err, sizeof err);
    CHECK(f == NULL && strstr(err, "dmg.safetensors: checksum mismatch: header says ") &&
              strstr(err, ", data has ") && strstr(err, " (file corrupted?)"),
          "corrupted file: \"%s\"", err);
    check_write(path, buf, len - 3);
    f = nnc_st_load(path, err, sizeof err);
    CHECK(f == NULL && strstr(err, "run past the end of the") && strstr(err, "file truncated?"),
          "truncated file: \"%s\"", err);
    free(buf);
}

/* A file with the given header and `data` bytes of data (0..data-1). */
static nnc_st_file *header_file(const char *json, size_t data, char *err)
{
    unsigned char buf[4096];
    size_t h = strlen(json), i;
    for (i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, json, h);
    for (i = 0; i < data; i++)
        buf[8 + h + i] = (unsigned char)i;
    return nnc_st_parse(buf, 8 + h + data, "h.st", err, 512);
}

static void test_header_validation(void)
{
    static const struct {
        const char *json, *want, *what;
    } bad[] = {
        { "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}",
          "h.st: offset 22: tensor 'a': dtype 'F8_E4M3' is not supported", "unknown dtype" },
        { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
          "h.st: tensor 'a': shape [2] of F32 needs 8 bytes, but data_offsets [0, 4] hold 4",
          "size mismatch" },
        { "{\"\\u001b]2;x\\u0007\\n\":{\"dtype\":\"U4\",\"shape\":[2],\"data_offsets\":[0,2]}}",
          "h.st: offset 39: tensor '\\x1B]2;x\\x07\\x0A': dtype 'U4' is not supported",
          "a name with a terminal escape and a newline is shown escaped" },
        { "{\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
          "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\":{\"dtype\":\"U8\",\"shape\":[2]}}",
          "h.st: offset 131: tensor 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'... "
          "(119 bytes): expected keys", "a long name is cut to 64 characters" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
          "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
          "h.st: tensors 'a' and 'b' overlap in the data section", "overlap" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
          "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
          "h.st: tensor name 'a' appears twice", "duplicate name" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
          "data_offsets [8, 12] run past the end of the 8-byte data section", "out of range" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,0]}}",
          "data_offsets must be [begin, end] with 0 <= begin <= end", "reversed offsets" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[-4],\"data_offsets\":[0,4]}}",
          "shape[0] is not an integer in 0..2^63-1", "negative dim" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4.0],\"data_offsets\":[0,4]}}",
          "shape[0] is not an integer", "fractional dim" },
        { "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296,2],\"data_offsets\":[0,8]}}",
          "needs more than 2^64 bytes", "shape product overflows" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}",
          "shape must be an array of at most 8 dimensions", "rank 9" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"x\":1}}",
          "tensor 'a': unexpected or repeated key 'x'", "extra key" },
        { "{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", "expected keys dtype, shape and data_offsets",
          "missing key" },
        { "{\"__metadata__\":{\"k\":1}}", "__metadata__ value for 'k' must be a string",
          "non-string metadata" },
        { "{\"__metadata__\":{\"nnc_crc32\":\"XYZ\"}}",
          "metadata nnc_crc32 is 'XYZ', expected 8 lowercase hex digits", "bad crc text" },
        { "{\"__metadata__\":{\"nnc_crc32\":\"00000000\"}}",
          "h.st: checksum mismatch: header says 00000000, data has ", "crc of 8 data bytes" },
        { "{\"a\":true}", "h.st: offset 13: header: expected a string, number, array or object, "
                          "got 't'", "true is not allowed" },
        { "{\"a\":null}", "got 'n'", "null is not allowed" },
        { "{\"a\":[[[[[[[[[[1]]]]]]]]]]}", "expected a value nested less deeply", "depth limit" },
        { "{\"a\":{}", "expected ',' or '}', got end of header", "unclosed object" },
        { "{\"a\":\"x\\q\"}", "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u",
          "bad escape" },
        { "{\"a\\u0000b\":1}", "expected no \\u0000", "NUL in a name" },
        { "{\"\\ud800\":1}", "expected a low surrogate", "lone surrogate" },
        { "{\"a\x01\":1}", "expected no raw control characters in a string", "control character" },
        { "{\"a\":01}", "expected ',' or '}', got '1'", "leading zero" },
        { "{} x", "expected only padding after the header object", "junk after the header" },
        { "[]", "h.st: offset 8: header: expected '{' starting the header, got '['",
          "top level must be an object" },
    };
    char err[512] = "";
    size_t i;
    nnc_st_file *f;
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = header_file(bad[i].json, 8, err);
        CHECK_ERR(f ? 0 : -1, err, bad[i].want, bad[i].what);
        nnc_st_close(f);
    }
    f = header_file("{\"x\\u00e9\\ud83d\\ude00\\n\":{\"dtype\":\"BOOL\",\"shape\":[3],"
                    "\"data_offsets\":[1,4]}, \"z\":{\"dtype\":\"F32\",\"shape\":[],"
                    "\"data_offsets\":[4,8]}}   ",
                    8, err);
    CHECK(f && nnc_st_count(f) == 2 && nnc_st_find(f, "x\xc3\xa9\xf0\x9f\x98\x80\n") &&
              nnc_st_find(f, "x\xc3\xa9\xf0\x9f\x98\x80\n")->dtype == NNC_DT_U8 &&
              ((const uint8_t *)nnc_st_find(f, "x\xc3\xa9\xf0\x9f\x98\x80\n")->data)[0] == 1 &&
              (uintptr_t)nnc_st_find(f, "z")->data % 4 == 0,
          "escapes, surrogate pairs, BOOL as U8, misaligned data copied aligned, no crc %s", err);
    nnc_st_close(f);
}

static void test_length_field(void)
{
    unsigned char buf[16] = { 0 };
    char err[512] = "";
    nnc_st_file *f;
    buf[0] = 0x01;
    buf[4] = 0x01; /* 2^32 + 1 */
    f = nnc_st_parse(buf, sizeof buf, "h.st", err, sizeof err);
    CHECK_ERR(f ? 0 : -1, err, "h.st: header length 4294967297 exceeds the 100 MB limit",
              "header over 100 MB");
    buf[4] = 0;
    buf[0] = 100;
    f = nnc_st_parse(buf, sizeof buf, "h.st", err, sizeof err);
    CHECK_ERR(f ? 0 : -1, err, "h.st: truncated: header length is 100 but only 8 bytes follow it",
              "header longer than the file");
    f = nnc_st_parse(buf, 5, "h.st", err, sizeof err);
    CHECK_ERR(f ? 0 : -1, err, "h.st: truncated: expected an 8-byte header length, found 5 bytes",
              "5-byte file");
    f = nnc_st_load(check_path("none.safetensors"), err, sizeof err);
    CHECK_ERR(f ? 0 : -1, err, "none.safetensors: cannot open: No such file or directory",
              "missing file");
    f = nnc_st_load(check_tmpdir(), err, sizeof err);
    CHECK_ERR(f ? 0 : -1, err, "cannot read: not a regular file", "a directory");
}

static void test_save_errors(void)
{
    nnc_st_tensor dup[2] = { { "w", NNC_DT_U8, 1, { 1 }, u8 }, { "w", NNC_DT_U8, 1, { 1 }, u8 } };
    nnc_st_tensor odd[1] = { { "w", (nnc_dtype)42, 1, { 1 }, u8 } };
    nnc_st_meta reserved[1] = { { "nnc_crc32", "0" } };
    char err[512] = "";
    int rc = nnc_st_save(check_path("e.st"), dup, 2, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "tensor name 'w' used twice", "duplicate names refused");
    rc = nnc_st_save(check_path("e.st"), odd, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "tensor 'w': invalid dtype, rank, shape or data", "invalid dtype refused");
    rc = nnc_st_save(check_path("e.st"), ts, 1, reserved, 1, err, sizeof err);
    CHECK_ERR(rc, err, "'nnc_crc32' and 'nnc_meta_crc32' are reserved", "reserved metadata key refused");
    rc = nnc_st_save("/nonexistent-nnc-dir/x.safetensors", ts, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "/nonexistent-nnc-dir/x.safetensors: cannot create temporary file "
                       "/nonexistent-nnc-dir/x.safetensors.tmp.", "directory that does not exist");
}

/* No "*.tmp.*" left in the test directory. */
static int no_tmp_left(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -q '\\.tmp\\.'", check_tmpdir());
    return system(cmd) != 0;
}

/* ts[0] was saved at path: it must still load as exactly that. */
static int still_first(const char *path)
{
    char err[512] = "";
    nnc_st_file *f = nnc_st_load(path, err, sizeof err);
    int ok = f && nnc_st_count(f) == 1 && strcmp(nnc_st_get(f, 0)->name, "u8") == 0 &&
             memcmp(nnc_st_get(f, 0)->data, u8, sizeof u8) == 0;
    nnc_st_close(f);
    return ok;
}

static void test_atomic_save(void)
{
    static float big[100000];
    nnc_st_tensor second = { "big", NNC_DT_F32, 1, { 100000 }, big };
    const char *path = check_path("ckpt.safetensors"), *dir = check_path("ro");
    char err[512] = "", target[600];
    int rc, status = 0;
    pid_t pid;
    rc = nnc_st_save(path, ts, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && still_first(path), "first checkpoint saved %s", err);
    /* A save that dies mid-write (file size limit = disk full) in a child. */
    pid = fork();
    if (pid == 0) {
        struct rlimit rl = { 4096, 4096 };
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(3);
        rc = nnc_st_save(path, &second, 1, NULL, 0, err, sizeof err);
        printf("     child: %s\n", err);
        _exit(rc == -1 && strstr(err, "write failed, previous file left as it was") ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "a save that fails mid-write reports it");
    CHECK(still_first(path), "after the failed save the previous checkpoint is intact");
    CHECK(no_tmp_left(), "the temporary file was removed");
    /* the same to a new file: there was no previous file to leave */
    pid = fork();
    if (pid == 0) {
        struct rlimit rl = { 4096, 4096 };
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
            _exit(3);
        rc = nnc_st_save(check_path("new-big.st"), &second, 1, NULL, 0, err, sizeof err);
        printf("     child: %s\n", err);
        _exit(rc == -1 && strstr(err, "new-big.st: write failed, nothing saved: ") ? 0 : 1);
    }
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0,
          "a failed save to a new file says that nothing was saved, not that a previous file was kept");
    CHECK(access(check_path("new-big.st"), F_OK) != 0 && no_tmp_left(), "and leaves no file");
    /* the target is a directory: refused before anything is written */
    CHECK(mkdir(check_path("d.st"), 0755) == 0, "made a directory to save over");
    rc = nnc_st_save(check_path("d.st"), ts, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "d.st: is a directory, not a regular file; not replaced",
              "a directory is not saved over");
    CHECK(no_tmp_left(), "no temporary file left after a refused save");
    /* read-only directory (root ignores the mode, so only checkable as a user) */
    if (mkdir(dir, 0755) != 0)
        check_die("mkdir ro");
    snprintf(target, sizeof target, "%s/ckpt.safetensors", dir);
    rc = nnc_st_save(target, ts, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && chmod(dir, 0555) == 0, "checkpoint saved in a directory, then made read-only");
    if (access(dir, W_OK) == 0) {
        printf("skip - read-only directory check: running as root, which may write anyway\n");
    } else {
        rc = nnc_st_save(target, &second, 1, NULL, 0, err, sizeof err);
        CHECK_ERR(rc, err, "cannot create temporary file", "save into a read-only directory");
        CHECK(still_first(target), "the checkpoint in the read-only directory is intact");
    }
    if (chmod(dir, 0755) != 0)
        check_die("chmod");
}

/* Metadata is covered by its own crc: an edited value of the same length is refused. */
static void test_meta_crc(void)
{
    char err[512] = "";
    const char *path = check_path("meta.safetensors");
    unsigned char *buf;
    size_t len, i;
    nnc_st_file *f;
    int rc = nnc_st_save(path, ts, NT, meta, 2, err, sizeof err), edited = 0;
    buf = check_read(path, &len);
    for (i = 0; i + 6 < len && !edited; i++)
        if (memcmp(buf + i, "\"1000\"", 6) == 0) {
            buf[i + 1] = '9';
            edited = 1;
        }
    f = nnc_st_parse(buf, len, "m.st", err, sizeof err);
    CHECK(rc == 0 && edited && f == NULL && strstr(err, "m.st: metadata checksum mismatch: header says "),
          "an edited metadata value is caught by nnc_meta_crc32: %s", err);
    nnc_st_close(f);
    free(buf);
}

/* Saving through a symbolic link writes the link's target and keeps the link. */
static void test_symlink_save(void)
{
    char err[512] = "", link_path[600], real[600];
    struct stat st;
    int rc;
    if (mkdir(check_path("real"), 0755) != 0)
        check_die("mkdir real");
    snprintf(real, sizeof real, "%s", check_path("real/ck.st"));
    snprintf(link_path, sizeof link_path, "%s", check_path("ln.st"));
    if (symlink("real/ck.st", link_path) != 0)
        check_die("symlink");
    rc = nnc_st_save(link_path, ts, 1, NULL, 0, err, sizeof err); /* target does not exist yet */
    CHECK(rc == 0 && lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode) && still_first(real),
          "a save through a dangling relative link creates its target, link kept %s", err);
    rc = nnc_st_save(link_path, ts, NT, NULL, 0, err, sizeof err);
    nnc_st_file *f = nnc_st_load(real, err, sizeof err);
    CHECK(rc == 0 && lstat(link_path, &st) == 0 && S_ISLNK(st.st_mode) && f && nnc_st_count(f) == NT,
          "a second save replaces the target atomically, link kept %s", err);
    nnc_st_close(f);
}

/* Temporary files of killed saves are swept on the next save; nothing else is touched, and
 * a link planted at our own temporary name is not written through. */
static void test_tmp_sweep(void)
{
    char err[512] = "", dead[600], live[600], other[600], mine[600], victim[600];
    const char *path = check_path("sw.st");
    int status, rc;
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        check_die("fork");
    snprintf(dead, sizeof dead, "%s.tmp.%ld", path, (long)pid);        /* its process is gone */
    snprintf(live, sizeof live, "%s.tmp.%ld", path, (long)getppid());  /* still running */
    snprintf(other, sizeof other, "%s.tmp.x%ld", path, (long)pid);     /* not our pattern */
    check_write(dead, "x", 1);
    check_write(live, "x", 1);
    check_write(other, "x", 1);
    rc = nnc_st_save(path, ts, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && access(dead, F_OK) != 0, "a dead process's temporary file is removed %s", err);
    CHECK(access(live, F_OK) == 0 && access(other, F_OK) == 0,
          "a live process's temporary file and other names are kept");
    snprintf(mine, sizeof mine, "%s.tmp.%ld", path, (long)getpid());
    snprintf(victim, sizeof victim, "%s", check_path("victim"));
    check_write(victim, "keep", 4);
    if (symlink(victim, mine) != 0)
        check_die("symlink");
    rc = nnc_st_save(path, ts, NT, NULL, 0, err, sizeof err);
    size_t len;
    unsigned char *v = check_read(victim, &len);
    CHECK(rc == -1 && len == 4 && memcmp(v, "keep", 4) == 0,
          "a link at the temporary name is refused, its target untouched: %s", err);
    free(v);
    unlink(mine);
    unlink(live);
    unlink(other);
}

/* A save never replaces a FIFO or a device (rename(2) would: as root, /dev/null itself), also
 * through a link, and reading a FIFO is refused at once instead of waiting for a writer. */
static void test_special_targets(void)
{
    char err[512] = "", lnk[600];
    const char *fifo = check_path("fifo.st"), *dev = check_path("null.st");
    struct stat st;
    int rc;
    if (mkfifo(fifo, 0600) != 0)
        check_die("mkfifo");
    rc = nnc_st_save(fifo, ts, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "fifo.st: is a FIFO, not a regular file; not replaced", "a FIFO is not saved over");
    CHECK(lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode) && no_tmp_left(), "the FIFO is still there, no temporary left");
    CHECK_ERR(nnc_st_dest_check(fifo, err, sizeof err), err, "is a FIFO", "nnc_st_dest_check refuses a FIFO");
    snprintf(lnk, sizeof lnk, "%s", check_path("lnfifo.st"));
    if (symlink(fifo, lnk) != 0)
        check_die("symlink");
    rc = nnc_st_save(lnk, ts, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, "lnfifo.st: leads to ", "a link to a FIFO is not saved through");
    CHECK(strstr(err, "a FIFO, not a regular file") && lstat(fifo, &st) == 0 && S_ISFIFO(st.st_mode),
          "the message names the FIFO, which is still there: %s", err);
    CHECK(nnc_st_load(fifo, err, sizeof err) == NULL && strstr(err, "not a regular file"),
          "loading a FIFO is refused without waiting for a writer: %s", err);
    /* a character device of our own (needs root), else /dev/null, which only root could replace */
    if (mknod(dev, S_IFCHR | 0600, makedev(1, 3)) != 0)
        dev = "/dev/null";
    rc = nnc_st_save(dev, ts, 1, NULL, 0, err, sizeof err);
    CHECK_ERR(rc, err, ": is a character device, not a regular file; not replaced", "a device is not saved over");
    CHECK(lstat(dev, &st) == 0 && S_ISCHR(st.st_mode), "the device %s is still there", dev);
    CHECK(nnc_st_dest_check(check_path("new.st"), err, sizeof err) == 0, "a new file may be saved: %s", err);
}

/* A save replaces a file with one of the same permission bits (a private checkpoint, such as
 * the trainer's 0600 rescue copy, stays private); a new file gets 0666 less the umask. */
static void test_save_mode(void)
{
    char err[512] = "";
    const char *path = check_path("mode.st");
    struct stat st;
    mode_t old = umask(022);
    int rc = nnc_st_save(path, ts, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && stat(path, &st) == 0 && (st.st_mode & 0777) == 0644, "a new file is 0644 under umask 022: %o %s",
          (unsigned)(st.st_mode & 0777), err);
    if (chmod(path, 0600) != 0)
        check_die("chmod");
    rc = nnc_st_save(path, ts, NT, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && stat(path, &st) == 0 && (st.st_mode & 0777) == 0600, "a 0600 file stays 0600: %o %s",
          (unsigned)(st.st_mode & 0777), err);
    if (chmod(path, 0664) != 0)
        check_die("chmod");
    rc = nnc_st_save(path, ts, 1, NULL, 0, err, sizeof err);
    CHECK(rc == 0 && stat(path, &st) == 0 && (st.st_mode & 0777) == 0664, "a 0664 file stays 0664 (umask 022): %o %s",
          (unsigned)(st.st_mode & 0777), err);
    umask(old);
}

int main(void)
{
    test_round_trip();
    test_damage();
    test_meta_crc();
    test_symlink_save();
    test_tmp_sweep();
    test_header_validation();
    test_length_field();
    test_save_errors();
    test_atomic_save();
    test_special_targets();
    test_save_mode();
    return check_done();
}
