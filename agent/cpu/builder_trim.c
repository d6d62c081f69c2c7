/* builder_trim.c - the trimming of the compiler's messages
 * (kla_builder_trim, kla_builder.h): only the diagnostics about the
 * candidate's own source are kept, those about other files counted.
 */
#include "kla_builder.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "kl_util.h"

static bool s_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool s_prefix(const char *l, size_t n, const char *p)
{
    size_t m = strlen(p);
    return n >= m && memcmp(l, p, m) == 0;
}

/* The length of FILE when l starts "FILE:LINE:" or "FILE:LINE," (gcc,
 * clang, as), else 0. */
static size_t s_loc_file(const char *l, size_t n)
{
    for (size_t i = 1; i + 1 < n; i++) {
        if (l[i] != ':' || !s_digit(l[i + 1]))
            continue;
        size_t j = i + 1;
        while (j < n && s_digit(l[j]))
            j++;
        if (j < n && (l[j] == ':' || l[j] == ','))
            return i;
    }
    return 0;
}

/* Whether a located line is a diagnostic ("...: error: ..."), not a
 * quoted line that looks like one. */
static bool s_severity(const char *l, size_t n)
{
    static const char *const sev[] = {
        ": error: ",       ": warning: ", ": note: ",
        ": fatal error: ", ": Error: ",   ": Warning: "};
    for (size_t i = 0; i < sizeof sev / sizeof *sev; i++)
        if (memmem(l, n, sev[i], strlen(sev[i])))
            return true;
    return false;
}

/* Files whose messages are the candidate's too: the compiler's own
 * assembler output (cc*.s), the command line. */
static bool s_own_other(const char *f, size_t n)
{
    if ((n == 14 && memcmp(f, "<command-line>", 14) == 0) ||
        (n == 10 && memcmp(f, "<built-in>", 10) == 0))
        return true;
    size_t b = n;
    while (b > 0 && f[b - 1] != '/')
        b--;
    return n - b > 4 && f[b] == 'c' && f[b + 1] == 'c' && f[n - 2] == '.' &&
           f[n - 1] == 's';
}

/* "PROGRAM: ..." from the driver, cc1, the assembler, the linker, bwrap;
 * "compilation terminated."; clang's "N errors generated." */
static bool s_tool_line(const char *l, size_t n)
{
    if (s_prefix(l, n, "compilation terminated"))
        return true;
    size_t k = 0;
    while (k < n && s_digit(l[k]))
        k++;
    if (k > 0 && k < n && l[k] == ' ' &&
        (s_prefix(l + k + 1, n - k - 1, "error") ||
         s_prefix(l + k + 1, n - k - 1, "warning")))
        return true;
    for (k = 0; k < n && l[k] != ':' && l[k] != ' '; k++)
        ;
    if (k == 0 || k + 1 >= n || l[k] != ':' || l[k + 1] != ' ')
        return false;
    size_t b = k;
    while (b > 0 && l[b - 1] != '/')
        b--;
    static const char *const names[] = {
        "cc1",    "cc1plus", "collect2", "ld",   "ld.bfd",      "ld.gold",
        "ld.lld", "lld",     "as",       "lto1", "lto-wrapper", "bwrap",
        "gcc",    "cc",      "clang",    "c99",  "c11"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (k - b == strlen(names[i]) && memcmp(l + b, names[i], k - b) == 0)
            return true;
    /* gcc-12, clang-16, x86_64-linux-gnu-gcc-12, ... */
    for (size_t i = b; i + 3 <= k; i++)
        if ((i == b || l[i - 1] == '-') &&
            (memcmp(l + i, "gcc", 3) == 0 ||
             (i + 5 <= k && memcmp(l + i, "clang", 5) == 0)))
            return true;
    return false;
}

/* Appends line l (n bytes) to out with src_path as "candidate.c" and dir
 * removed. */
static void s_put_line(kl_buf_t *out, const char *l, size_t n, const char *src,
                       const char *dir)
{
    size_t sn = strlen(src), dn = dir ? strlen(dir) : 0;
    for (size_t i = 0; i < n;) {
        if (sn && i + sn <= n && memcmp(l + i, src, sn) == 0) {
            kl_buf_puts(out, "candidate.c");
            i += sn;
        } else if (dn && i + dn <= n && memcmp(l + i, dir, dn) == 0) {
            i += dn;
        } else {
            kl_buf_append(out, l + i, 1);
            i++;
        }
    }
    kl_buf_append(out, "\n", 1);
}

size_t kla_builder_trim(const char *raw, size_t n, const char *src_path,
                        const char *dir, char *out, size_t cap, int *omitted)
{
    kl_buf_t b = {0};
    size_t sn = strlen(src_path);
    int dropped = 0;
    bool keep = true; /* lines go with the last message's file */
    for (size_t i = 0; i < n;) {
        const char *l = raw + i;
        const char *nl = memchr(l, '\n', n - i);
        size_t len = nl ? (size_t)(nl - l) : n - i;
        i += len + (nl ? 1 : 0);
        size_t f;
        if (len > sn && memcmp(l, src_path, sn) == 0 && l[sn] == ':') {
            keep = true; /* the candidate's: "SRC:3:5: error: ..." */
        } else if (s_prefix(l, len, "In file included from ") ||
                   (len > 0 && l[0] == ' ' &&
                    s_prefix(l + strspn(l, " "), len - strspn(l, " "),
                             "from "))) {
            keep = false; /* an include chain: an other file's message */
            continue;
        } else if (len > 0 && (l[0] == ' ' || l[0] == '\t')) {
            /* quoted source, caret, fix-it: the last message's */
        } else if ((f = s_loc_file(l, len)) > 0) {
            keep = s_own_other(l, f);
            if (!keep && s_severity(l, len))
                dropped++;
        } else if (memmem(l, len, ": In ", 5) || memmem(l, len, ": At ", 5) ||
                   memmem(l, len, ": Assembler messages:", 21)) {
            size_t c = (size_t)((const char *)memchr(l, ':', len) - l);
            keep = s_own_other(l, c);
        } else if (s_tool_line(l, len)) {
            keep = true;
        }
        if (keep)
            s_put_line(&b, l, len, src_path, dir);
    }
    char tail[80] = "";
    if (dropped > 0)
        snprintf(tail, sizeof tail,
                 "(%d message%s about other files "
                 "omitted)\n",
                 dropped, dropped == 1 ? "" : "s");
    size_t tn = strlen(tail), len = b.len;
    if (cap == 0) {
        kl_buf_free(&b);
        return 0;
    }
    if (tn >= cap)
        tn = 0;
    if (len + tn > cap - 1)
        len = cap - 1 - tn;
    if (len)
        memcpy(out, b.data, len);
    memcpy(out + len, tail, tn);
    out[len + tn] = '\0';
    kl_buf_free(&b);
    if (omitted)
        *omitted = dropped;
    return len + tn;
}
