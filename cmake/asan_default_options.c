/* asan_default_options.c - linked into every executable of a -DNNC_SANITIZE=ON build.
 *
 * intercept_tls_get_addr=0: up to LLVM 16 (clang 14 here) the sanitizers' __tls_get_addr
 * interceptor takes a dynamic TLS block at an address 16 mod 4096 for one with a pre-2.25
 * glibc header and records the two words before it as the block's range.  A generated model
 * dlopens OpenMP and OpenBLAS, whose small TLS blocks come from ASan's 16-byte size class,
 * where 1 address in 128 is 16 mod 4096 and the two words before it are ASan's chunk header;
 * LeakSanitizer's tracer then faults scanning that range at exit ("Tracer caught signal 11")
 * and a clean run fails, depending on allocation order only (tests/unit/lsan_tls.c).  Turning
 * the guess off costs the scan of dynamic TLS as a root: nnc keeps no heap pointer only there.
 * ASAN_OPTIONS is parsed after these defaults and can still override them. */
const char *__asan_default_options(void);

const char *__asan_default_options(void) { return "intercept_tls_get_addr=0"; }
