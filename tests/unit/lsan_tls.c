/* lsan_tls.c - LeakSanitizer survives a dynamic TLS block at an address 16 mod 4096 (sanitizer
 * build only).
 *
 * Up to LLVM 16 the __tls_get_addr interceptor takes such a block for one with a pre-2.25
 * glibc header and records the two words before it, here ASan's chunk header, as the block's
 * range; at exit LeakSanitizer's tracer faults scanning it ("Tracer caught signal 11") and the
 * process fails though nothing leaked.  The sanitizer stage used to run single-threaded to
 * dodge it by allocation luck; cmake/asan_default_options.c turns the interceptor's guess off
 * (intercept_tls_get_addr=0).
 *
 * Each child steps ASan's 16-byte size class (where an 8-byte TLS block is allocated) so that
 * the block lands K chunks further on, for K = 0..7 (dlopen allocates a few small chunks of its
 * own first), touches the variable and exits normally, which runs the leak check.  The test
 * fails if a child that got a block at 16 mod 4096 did not exit cleanly, and also if no child
 * got one (then it would check nothing).
 *
 *   lsan_tls LIB.so */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK 32   /* an 8-byte malloc in ASan: 16 bytes of header, 16 of user memory */

static void *steps[4096];   /* static: reachable, so the leak check has nothing to report */

/* In the child: returns the TLS block's address modulo 4096, or -1. */
static long place_block(const char *lib, int k) {
    uintptr_t want = (uintptr_t)(4096 - 16 - CHUNK * k);
    for (int n = 0; n < 4096; n++) {
        steps[n] = malloc(8);
        if ((uintptr_t)steps[n] % 4096 == want) break;
    }
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) return -1;
    long *(*get)(void) = (long *(*)(void))dlsym(h, "lsan_tls_var");
    if (!get) return -1;
    long *v = get();
    *v = 1;
    return (long)((uintptr_t)v % 4096);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: lsan_tls LIB.so\n");
        return 2;
    }
    int hits = 0, failed = 0;
    for (int k = 0; k < 8; k++) {
        int fd[2];
        if (pipe(fd) != 0) return 2;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 2;
        if (pid == 0) {
            close(fd[0]);
            long at = place_block(argv[1], k);
            if (write(fd[1], &at, sizeof at) != (ssize_t)sizeof at) _exit(3);
            close(fd[1]);
            exit(0);   /* exit, not _exit: the leak check runs here */
        }
        close(fd[1]);
        long at = -1;
        if (read(fd[0], &at, sizeof at) != (ssize_t)sizeof at) at = -1;
        close(fd[0]);
        int st = 0;
        waitpid(pid, &st, 0);
        int clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (at == 16) {
            hits++;
            failed += !clean;
        }
        printf("%s - K=%d: TLS block at %ld mod 4096, child %s\n", at == 16 && !clean ? "FAIL" : "ok  ", k, at,
               clean ? "exited cleanly" : "failed");
    }
    if (hits == 0) {
        printf("FAIL - no child got a TLS block at 16 mod 4096: the test checked nothing\n");
        return 1;
    }
    printf("%d of %d blocks at 16 mod 4096 survived the leak check\n", hits - failed, hits);
    return failed ? 1 : 0;
}
