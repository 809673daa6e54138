/* lsan_tls_lib.c - a dlopen'ed library with one thread-local variable, like the OpenMP and
 * OpenBLAS runtimes a generated model pulls in: its TLS block is malloc'ed by glibc on the
 * first access through __tls_get_addr.  Used by lsan_tls.c. */
long *lsan_tls_var(void);

static __thread long var;

long *lsan_tls_var(void) { return &var; }
