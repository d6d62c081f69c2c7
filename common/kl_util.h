/* kl_util.h - memory, hashing, random numbers and clocks shared by every
 * part of kiln. */
#ifndef KL_UTIL_H
#define KL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Allocation that aborts (with a message on stderr) on out-of-memory, so
 * callers never check. What they return is freed with free(). */
void *kl_xmalloc(size_t n);
void *kl_xcalloc(size_t count, size_t n);
void *kl_xrealloc(void *p, size_t n);
char *kl_xstrdup(const char *s);
char *kl_xstrndup(const char *s, size_t n);
/* printf into a fresh heap string. */
char *kl_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A growable string buffer; kl_buf_t b = {0} is a valid empty buffer. The
 * contents are always NUL-terminated once anything was appended. */
typedef struct {
    char *data;
    size_t len;
    size_t cap;
} kl_buf_t;
void kl_buf_append(kl_buf_t *b, const char *s, size_t n);
void kl_buf_puts(kl_buf_t *b, const char *s);
/* Appends s escaped for XML/HTML text and attributes (&, <, >, " and ');
 * control characters other than tab and newline become spaces. */
void kl_buf_put_xml(kl_buf_t *b, const char *s);
void kl_buf_printf(kl_buf_t *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the string to the caller (who frees it) and resets the buffer. */
char *kl_buf_take(kl_buf_t *b);
void kl_buf_free(kl_buf_t *b);

/* 128-bit hash (MurmurHash3 x64_128, seed 0) of n bytes into out[16].
 * Stable across machines and runs: it names workloads and traces on disk. */
void kl_hash128(const void *data, size_t n, uint8_t out[16]);
/* Lower-case hex of a 16-byte key into out (33 bytes, NUL-terminated). */
void kl_hex128(const uint8_t key[16], char out[33]);
/* The value of one hex digit (either case), -1 for anything else. */
int kl_hexval(char c);
/* Parses 32 hex digits into key; returns 0 or KL_ERR_INVAL. */
int kl_unhex128(const char *hex, uint8_t key[16]);
/* 64-bit FNV-1a, for hash tables and cache names. */
uint64_t kl_hash64(const void *data, size_t n);

/* Deterministic PRNG (xoshiro256**), seeded through splitmix64. The same
 * seed gives the same sequence on every machine. */
typedef struct {
    uint64_t s[4];
} kl_rng_t;
void kl_rng_seed(kl_rng_t *rng, uint64_t seed);
uint64_t kl_rng_next(kl_rng_t *rng);
/* Uniform in [0, n); n > 0. */
uint64_t kl_rng_below(kl_rng_t *rng, uint64_t n);
/* Uniform in [0, 1). */
double kl_rng_double(kl_rng_t *rng);

/* Clocks. kl_now_s: monotonic seconds. kl_unix_us: wall-clock microseconds
 * since the epoch. */
double kl_now_s(void);
uint64_t kl_unix_us(void);

/* Statistics over n doubles (the array is not modified). */
double kl_median(const double *v, size_t n);
double kl_percentile(const double *v, size_t n, double p); /* p in [0,100] */

/* Reads a whole file into a NUL-terminated heap buffer; *len (optional)
 * receives its size. Returns 0 or KL_ERR_IO with a message in err. */
int kl_read_file(const char *path, char **out, size_t *len, char *err);
/* Writes n bytes to path (created with mode 0644, truncated). */
int kl_write_file(const char *path, const void *data, size_t n, char *err);
/* mkdir -p; returns 0 or KL_ERR_IO with a message. */
int kl_mkdirs(const char *path, char *err);

#endif
