/* atomic_file.h - files replaced whole or not at all: written beside the destination under a
 * temporary name, made durable and renamed over it (io/safetensors.c's checkpoints).
 * Private to io/. */
#ifndef NNC_ATOMIC_FILE_H
#define NNC_ATOMIC_FILE_H
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* tmp created for writing, O_EXCL | O_NOFOLLOW: with the permission bits `old` when it will
 * replace a file (replaces: 1), else 0666 less the umask.  NULL with errno set. */
FILE *atomic_file_tmp_create(const char *tmp, int replaces, mode_t old);
/* fsync of the directory holding path, so that a rename survives a power cut (best effort). */
void atomic_file_dir_sync(const char *path);
/* The file a write to path replaces: path, or the file its symbolic links lead to (heap). */
char *atomic_file_target(const char *path);
/* 0 when target is a regular file or nothing; -1 with err filled for anything else. */
int atomic_file_target_check(const char *path, const char *target, char *err, size_t errlen);
/* Removes the "<path>.tmp.<pid>" files of writers that died. */
void atomic_file_tmp_sweep(const char *path);
#endif
