#include "kl_util.h"
#include "kl_err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void s_oom(size_t n)
{
    fprintf(stderr, "kiln: out of memory allocating %zu bytes\n", n);
    abort();
}

void *kl_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        s_oom(n);
    return p;
}

void *kl_xcalloc(size_t count, size_t n)
{
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (!p)
        s_oom(count * n);
    return p;
}

void *kl_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        s_oom(n);
    return q;
}

char *kl_xstrdup(const char *s)
{
    return kl_xstrndup(s, strlen(s));
}

char *kl_xstrndup(const char *s, size_t n)
{
    char *p = kl_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *kl_xasprintf(const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *p = kl_xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    return p;
}

static void s_buf_reserve(kl_buf_t *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = kl_xrealloc(b->data, cap);
    b->cap = cap;
}

void kl_buf_append(kl_buf_t *b, const char *s, size_t n)
{
    s_buf_reserve(b, n);
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void kl_buf_puts(kl_buf_t *b, const char *s)
{
    kl_buf_append(b, s, strlen(s));
}

void kl_buf_put_xml(kl_buf_t *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&':
            kl_buf_puts(b, "&amp;");
            break;
        case '<':
            kl_buf_puts(b, "&lt;");
            break;
        case '>':
            kl_buf_puts(b, "&gt;");
            break;
        case '"':
            kl_buf_puts(b, "&quot;");
            break;
        case '\'':
            kl_buf_puts(b, "&#39;");
            break;
        default:
            if ((unsigned char)*s < 0x20 && *s != '\t' && *s != '\n')
                kl_buf_append(b, " ", 1);
            else
                kl_buf_append(b, s, 1);
        }
    }
}

void kl_buf_printf(kl_buf_t *b, const char *fmt, ...)
{
    va_list ap, ap2;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    s_buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

char *kl_buf_take(kl_buf_t *b)
{
    char *p = b->data ? b->data : kl_xstrdup("");
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

void kl_buf_free(kl_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* MurmurHash3 x64_128 (public domain algorithm by Austin Appleby). */
static inline uint64_t s_rotl64(uint64_t x, int r)
{
    return (x << r) | (x >> (64 - r));
}

static inline uint64_t s_fmix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return k;
}

static inline uint64_t s_load64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void kl_hash128(const void *data, size_t n, uint8_t out[16])
{
    const uint8_t *p = data;
    const size_t nblocks = n / 16;
    uint64_t h1 = 0, h2 = 0;
    const uint64_t c1 = 0x87c37b91114253d5ULL, c2 = 0x4cf5ad432745937fULL;

    for (size_t i = 0; i < nblocks; i++) {
        uint64_t k1 = s_load64(p + i * 16), k2 = s_load64(p + i * 16 + 8);
        k1 *= c1;
        k1 = s_rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
        h1 = s_rotl64(h1, 27);
        h1 += h2;
        h1 = h1 * 5 + 0x52dce729;
        k2 *= c2;
        k2 = s_rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        h2 = s_rotl64(h2, 31);
        h2 += h1;
        h2 = h2 * 5 + 0x38495ab5;
    }
    const uint8_t *tail = p + nblocks * 16;
    uint64_t k1 = 0, k2 = 0;
    switch (n & 15) {
    case 15:
        k2 ^= (uint64_t)tail[14] << 48; /* fall through */
    case 14:
        k2 ^= (uint64_t)tail[13] << 40; /* fall through */
    case 13:
        k2 ^= (uint64_t)tail[12] << 32; /* fall through */
    case 12:
        k2 ^= (uint64_t)tail[11] << 24; /* fall through */
    case 11:
        k2 ^= (uint64_t)tail[10] << 16; /* fall through */
    case 10:
        k2 ^= (uint64_t)tail[9] << 8; /* fall through */
    case 9:
        k2 ^= (uint64_t)tail[8];
        k2 *= c2;
        k2 = s_rotl64(k2, 33);
        k2 *= c1;
        h2 ^= k2;
        /* fall through */
    case 8:
        k1 ^= (uint64_t)tail[7] << 56; /* fall through */
    case 7:
        k1 ^= (uint64_t)tail[6] << 48; /* fall through */
    case 6:
        k1 ^= (uint64_t)tail[5] << 40; /* fall through */
    case 5:
        k1 ^= (uint64_t)tail[4] << 32; /* fall through */
    case 4:
        k1 ^= (uint64_t)tail[3] << 24; /* fall through */
    case 3:
        k1 ^= (uint64_t)tail[2] << 16; /* fall through */
    case 2:
        k1 ^= (uint64_t)tail[1] << 8; /* fall through */
    case 1:
        k1 ^= (uint64_t)tail[0];
        k1 *= c1;
        k1 = s_rotl64(k1, 31);
        k1 *= c2;
        h1 ^= k1;
    }
    h1 ^= (uint64_t)n;
    h2 ^= (uint64_t)n;
    h1 += h2;
    h2 += h1;
    h1 = s_fmix64(h1);
    h2 = s_fmix64(h2);
    h1 += h2;
    h2 += h1;
    for (int i = 0; i < 8; i++) {
        out[i] = (uint8_t)(h1 >> (8 * i));
        out[8 + i] = (uint8_t)(h2 >> (8 * i));
    }
}

void kl_hex128(const uint8_t key[16], char out[33])
{
    static const char d[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        out[2 * i] = d[key[i] >> 4];
        out[2 * i + 1] = d[key[i] & 15];
    }
    out[32] = '\0';
}

int kl_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int kl_unhex128(const char *hex, uint8_t key[16])
{
    if (!hex || strlen(hex) != 32)
        return KL_ERR_INVAL;
    for (int i = 0; i < 16; i++) {
        int hi = kl_hexval(hex[2 * i]), lo = kl_hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return KL_ERR_INVAL;
        key[i] = (uint8_t)(hi << 4 | lo);
    }
    return KL_OK;
}

uint64_t kl_hash64(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t s_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void kl_rng_seed(kl_rng_t *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = s_splitmix(&seed);
}

uint64_t kl_rng_next(kl_rng_t *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = s_rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = s_rotl64(s[3], 45);
    return result;
}

uint64_t kl_rng_below(kl_rng_t *rng, uint64_t n)
{
    /* Rejection sampling keeps the result exactly uniform. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do {
        r = kl_rng_next(rng);
    } while (r >= limit);
    return r % n;
}

double kl_rng_double(kl_rng_t *rng)
{
    return (double)(kl_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
}

double kl_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t kl_unix_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int s_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kl_percentile(const double *v, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    double *c = kl_xmalloc(n * sizeof *c);
    memcpy(c, v, n * sizeof *c);
    qsort(c, n, sizeof *c, s_cmp_double);
    double pos = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - (double)lo;
    double r = c[lo] + (c[hi] - c[lo]) * frac;
    free(c);
    return r;
}

double kl_median(const double *v, size_t n)
{
    return kl_percentile(v, n, 50.0);
}

int kl_read_file(const char *path, char **out, size_t *len, char *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return kl_seterr(err, errno == ENOENT ? KL_ERR_NOTFOUND : KL_ERR_IO,
                         "%s: %s", path, strerror(errno));
    kl_buf_t b = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        kl_buf_append(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        kl_buf_free(&b);
        return kl_seterr(err, KL_ERR_IO, "%s: read error", path);
    }
    if (len)
        *len = b.len;
    *out = kl_buf_take(&b);
    return KL_OK;
}

int kl_write_file(const char *path, const void *data, size_t n, char *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return kl_seterr(err, KL_ERR_IO, "%s: %s", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    int rc = fclose(f);
    if (w != n || rc != 0)
        return kl_seterr(err, KL_ERR_IO, "%s: write failed: %s", path,
                         strerror(errno));
    return KL_OK;
}

int kl_mkdirs(const char *path, char *err)
{
    char *p = kl_xstrdup(path);
    for (char *s = p + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int rc =
                kl_seterr(err, KL_ERR_IO, "mkdir %s: %s", p, strerror(errno));
            free(p);
            return rc;
        }
        *s = '/';
    }
    int rc = KL_OK;
    if (mkdir(p, 0755) != 0 && errno != EEXIST)
        rc = kl_seterr(err, KL_ERR_IO, "mkdir %s: %s", p, strerror(errno));
    free(p);
    return rc;
}
