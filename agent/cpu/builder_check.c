/* builder_check.c - the source check every build does first
 * (kla_builder_check, kla_builder.h): a scanner of the preprocessor's
 * view of the source (line splices, comments, literals, directives) that
 * refuses what could make the compiler or the assembler read a file, and
 * the lexical forms on which readers may disagree.
 */
#include "kla_builder.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kl_util.h"

/* The source after line splices (a backslash, optional blanks, a
 * newline: as gcc takes them), with the physical line of every byte. */
typedef struct {
    char *t;
    int *ln;
    size_t n;
    char *msg;
    size_t cap;
    kl_buf_t lits; /* the decoded bytes of every string literal, in order */
    int *lit_ln;   /* the line of each byte of lits */
    size_t lit_cap;
} s_scan_t;

static bool s_hspace(char c)
{
    return c == ' ' || c == '\t' || c == '\f' || c == '\v' || c == '\r';
}

static bool s_idstart(char c)
{
    unsigned char u = (unsigned char)c;
    return (u >= 'a' && u <= 'z') || (u >= 'A' && u <= 'Z') || u == '_' ||
           u == '$' || u >= 0x80;
}

static bool s_digit(char c)
{
    return c >= '0' && c <= '9';
}

static bool s_idchar(char c)
{
    return s_idstart(c) || s_digit(c);
}

static int s_refuse(s_scan_t *s, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int s_refuse(s_scan_t *s, size_t at, const char *fmt, ...)
{
    int line = at <= s->n ? s->ln[at] : 1;
    int k = snprintf(s->msg, s->cap, "line %d: ", line);
    if (k >= 0 && (size_t)k < s->cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->msg + k, s->cap - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* Trigraphs are refused rather than read (whether the compiler replaces
 * them depends on -std: a reader that guessed wrong could take a string
 * for a comment). */
static int s_scan_init(s_scan_t *s, const char *src, size_t len)
{
    s->t = kl_xmalloc(len + 1);
    s->ln = kl_xmalloc((len + 1) * sizeof(int));
    size_t o = 0;
    int line = 1;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '?' && i + 2 < len && src[i + 1] == '?' && src[i + 2] &&
            strchr("=(/)'<!>-", src[i + 2])) {
            s->n = o;
            s->ln[o] = line;
            return s_refuse(s, o, "trigraph ??%c: trigraphs are refused",
                            src[i + 2]);
        }
        if (c == '\\') {
            size_t j = i + 1;
            while (j < len && s_hspace(src[j]))
                j++;
            if (j < len && src[j] == '\n') {
                line++;
                i = j;
                continue;
            }
        }
        s->t[o] = c ? c : ' ';
        s->ln[o++] = line;
        if (c == '\n')
            line++;
    }
    s->t[o] = '\0';
    s->ln[o] = line;
    s->n = o;
    return 0;
}

/* Skips blanks and comments from i; a // comment up to its newline. */
static size_t s_skip(const s_scan_t *s, size_t i)
{
    const char *t = s->t;
    for (;;) {
        if (i < s->n && s_hspace(t[i])) {
            i++;
        } else if (i + 1 < s->n && t[i] == '/' && t[i + 1] == '*') {
            const char *e = strstr(t + i + 2, "*/");
            i = e ? (size_t)(e - t) + 2 : s->n;
        } else if (i + 1 < s->n && t[i] == '/' && t[i + 1] == '/') {
            while (i < s->n && t[i] != '\n')
                i++;
        } else {
            return i;
        }
    }
}

static void s_lit_put(s_scan_t *s, char c, int line)
{
    if (s->lits.len + 1 > s->lit_cap) {
        s->lit_cap = s->lit_cap ? 2 * s->lit_cap : 256;
        s->lit_ln = kl_xrealloc(s->lit_ln, s->lit_cap * sizeof(int));
    }
    s->lit_ln[s->lits.len] = line;
    kl_buf_append(&s->lits, &c, 1);
}

/* A string (q '"') or character (q '\'') literal from its opening quote
 * at i to its closing one or the end of the line; a string's decoded
 * bytes go to s->lits. Returns the index after it. */
static size_t s_literal(s_scan_t *s, size_t i, char q)
{
    const char *t = s->t;
    int line = s->ln[i];
    for (i++; i < s->n && t[i] != q && t[i] != '\n'; i++) {
        char c = t[i];
        if (c == '\\' && i + 1 < s->n && t[i + 1] != '\n') {
            char d = t[++i];
            int v = 0, k = 0;
            switch (d) {
            case 'n':
                c = '\n';
                break;
            case 't':
                c = '\t';
                break;
            case 'x':
                while (i + 1 < s->n && kl_hexval(t[i + 1]) >= 0)
                    v = (v * 16 + kl_hexval(t[++i])) & 0xff;
                c = (char)v;
                break;
            case 'u':
            case 'U':
                for (k = d == 'u' ? 4 : 8;
                     k > 0 && i + 1 < s->n && kl_hexval(t[i + 1]) >= 0; k--)
                    i++;
                c = (char)0x80;
                break;
            default:
                if (d >= '0' && d <= '7') {
                    v = d - '0';
                    for (k = 1; k < 3 && i + 1 < s->n && t[i + 1] >= '0' &&
                                t[i + 1] <= '7';
                         k++)
                        v = (v * 8 + (t[++i] - '0')) & 0xff;
                    c = (char)v;
                } else {
                    c = d; /* \\ \" \' \? and the rest as themselves */
                }
            }
        }
        if (q == '"')
            s_lit_put(s, c, line);
    }
    return i < s->n && t[i] == q ? i + 1 : i;
}

/* Whether an #include name may be compiled: not empty, not absolute, no
 * ".." component, no blank, backslash or control character. */
static bool s_name_ok(const char *p, size_t n)
{
    if (n == 0 || p[0] == '/')
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\\' || s_hspace(p[i]) || (unsigned char)p[i] < 0x20)
            return false;
    for (size_t i = 0; i <= n;) {
        size_t e = i;
        while (e < n && p[e] != '/')
            e++;
        if (e - i == 2 && p[i] == '.' && p[i + 1] == '.')
            return false;
        i = e + 1;
    }
    return true;
}

static bool s_word(const char *t, size_t i, size_t e, const char *w)
{
    return e - i == strlen(w) && memcmp(t + i, w, e - i) == 0;
}

/* A header name at k ('<' or '"') up to its closing character on the
 * same line: its end (the closing character) in *end, or false. */
static bool s_header(const s_scan_t *s, size_t k, size_t *end)
{
    char close = s->t[k] == '<' ? '>' : '"';
    size_t m = k + 1;
    while (m < s->n && s->t[m] != close && s->t[m] != '\n')
        m++;
    if (m >= s->n || s->t[m] != close)
        return false;
    *end = m;
    return true;
}

#define S_ONLY_SYSTEM                                                          \
    "only system headers may be included (no absolute paths, no ..)"

/* The directive whose '#' (or "%:") is at h and ends before i. Returns
 * where scanning goes on (past a header name, which is not C text), or
 * (size_t)-1 with the refusal in s->msg. */
static size_t s_directive(s_scan_t *s, size_t h, size_t i)
{
    const char *t = s->t;
    size_t j = s_skip(s, i);
    if (j < s->n && s_digit(t[j])) { /* GNU line marker: # 12 "file" */
        size_t k = j;
        while (k < s->n && s_digit(t[k]))
            k++;
        k = s_skip(s, k);
        if (k < s->n && t[k] != '\n') {
            s_refuse(s, h,
                     "# %.*s followed by a file name: line markers "
                     "with a file name are refused",
                     (int)(k - j > 20 ? 20 : k - j), t + j);
            return (size_t)-1;
        }
        return k;
    }
    if (j >= s->n || !s_idstart(t[j]))
        return j;
    size_t e = j;
    while (e < s->n && s_idchar(t[e]))
        e++;
    if (s_word(t, j, e, "include")) {
        size_t k = s_skip(s, e), m;
        if (k < s->n && (t[k] == '<' || t[k] == '"')) {
            if (!s_header(s, k, &m)) {
                s_refuse(s, h, "#include %c...: the name is not closed", t[k]);
                return (size_t)-1;
            }
            if (!s_name_ok(t + k + 1, m - k - 1)) {
                s_refuse(s, h, "#include %.*s: " S_ONLY_SYSTEM,
                         (int)(m - k + 1 > 200 ? 200 : m - k + 1), t + k);
                return (size_t)-1;
            }
            return m + 1;
        }
        int shown = (int)strcspn(t + k, "\n");
        s_refuse(s, h,
                 "#include %.*s: computed includes are refused (name "
                 "a system header: #include <name>)",
                 shown > 60 ? 60 : shown, t + k);
        return (size_t)-1;
    }
    if (s_word(t, j, e, "include_next") || s_word(t, j, e, "import") ||
        s_word(t, j, e, "embed")) {
        s_refuse(s, h,
                 "#%.*s: refused (only #include <name> of system "
                 "headers)",
                 (int)(e - j), t + j);
        return (size_t)-1;
    }
    if (s_word(t, j, e, "line")) {
        size_t k = s_skip(s, e);
        while (k < s->n && s_digit(t[k]))
            k++;
        k = s_skip(s, k);
        if (k < s->n && t[k] != '\n') {
            s_refuse(s, h,
                     "#line with a file name or a macro: refused "
                     "(#line NUMBER only)");
            return (size_t)-1;
        }
        return k;
    }
    return e;
}

/* __has_include and its kin: the identifier spans [i, e). */
static size_t s_has_include(s_scan_t *s, size_t i, size_t e)
{
    const char *t = s->t;
    if (!s_word(t, i, e, "__has_include") &&
        !s_word(t, i, e, "__has_include_next") &&
        !s_word(t, i, e, "__has_embed"))
        return e; /* __has_builtin, __has_attribute, ... */
    if (s_word(t, i, e, "__has_include_next") ||
        s_word(t, i, e, "__has_embed")) {
        s_refuse(s, i, "%.*s: refused", (int)(e - i), t + i);
        return (size_t)-1;
    }
    size_t k = s_skip(s, e), m;
    while (k < s->n && t[k] == '\n') /* #if spans no lines, a call may */
        k = s_skip(s, k + 1);
    if (k >= s->n || t[k] != '(')
        return e; /* #ifdef __has_include: the name alone */
    k = s_skip(s, k + 1);
    if (k < s->n && (t[k] == '<' || t[k] == '"') && s_header(s, k, &m)) {
        if (!s_name_ok(t + k + 1, m - k - 1)) {
            s_refuse(s, i, "__has_include(%.*s): " S_ONLY_SYSTEM,
                     (int)(m - k + 1 > 200 ? 200 : m - k + 1), t + k);
            return (size_t)-1;
        }
        return m + 1;
    }
    s_refuse(s, i, "__has_include with a macro: refused (name the header)");
    return (size_t)-1;
}

/* Assembler directives that read files or make text that could: after a
 * '.' in the C text (a stringified asm template) they are refused by
 * name; in string literals (their decoded bytes, all literals one after
 * another, since adjacent literals join) any ".inc" prefix is. */
static const char *const s_asm_words[] = {"incbin", "include", "inc",
                                          "macro",  "irp",     "irpc"};
static const char *const s_asm_lits[] = {".inc", ".macro", ".irp"};

#define S_ASM_WHY                                                              \
    "the assembler may not read files (no .incbin, .include, .macro or "       \
    ".irp in a candidate)"

static int s_check_lits(s_scan_t *s)
{
    const char *p = s->lits.data;
    size_t n = s->lits.len;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '.')
            continue;
        for (size_t w = 0; w < sizeof s_asm_lits / sizeof *s_asm_lits; w++) {
            size_t m = strlen(s_asm_lits[w]);
            if (i + m <= n && strncasecmp(p + i, s_asm_lits[w], m) == 0) {
                size_t e = i + 1;
                while (e < n && e - i < 16 && s_idchar(p[e]))
                    e++;
                snprintf(s->msg, s->cap, "line %d: %.*s in a string: %s",
                         s->lit_ln[i], (int)(e - i), p + i, S_ASM_WHY);
                return -1;
            }
        }
    }
    return 0;
}

static int s_scan(s_scan_t *s)
{
    const char *t = s->t;
    size_t i = 0;
    while (i < s->n) {
        char c = t[i];
        if (c == '/' && i + 1 < s->n && (t[i + 1] == '*' || t[i + 1] == '/')) {
            i = s_skip(s, i);
        } else if (c == '"' || c == '\'') {
            i = s_literal(s, i, c);
        } else if (s_idstart(c)) {
            size_t e = i;
            while (e < s->n && s_idchar(t[e]))
                e++;
            if (e < s->n && t[e] == '"' && t[e - 1] == 'R' &&
                (e - i == 1 || s_word(t, i, e, "LR") || s_word(t, i, e, "uR") ||
                 s_word(t, i, e, "UR") || s_word(t, i, e, "u8R")))
                return s_refuse(s, i, "raw string literal: refused");
            if (e - i > 6 && strncmp(t + i, "__has_", 6) == 0) {
                i = s_has_include(s, i, e);
                if (i == (size_t)-1)
                    return -1;
            } else {
                i = e;
            }
        } else if (s_digit(c) ||
                   (c == '.' && i + 1 < s->n && s_digit(t[i + 1]))) {
            size_t e = i + 1; /* a pp-number */
            while (e < s->n &&
                   (s_idchar(t[e]) || t[e] == '.' ||
                    ((t[e] == '+' || t[e] == '-') && strchr("eEpP", t[e - 1]))))
                e++;
            if (e < s->n && t[e] == '\'')
                return s_refuse(s, e, "digit separator: refused");
            i = e;
        } else if (c == '.') {
            size_t j = s_skip(s, i + 1), e = j;
            while (e < s->n && s_idchar(t[e]))
                e++;
            for (size_t w = 0; w < sizeof s_asm_words / sizeof *s_asm_words;
                 w++)
                if (s_word(t, j, e, s_asm_words[w]))
                    return s_refuse(s, i, ".%s: %s", s_asm_words[w], S_ASM_WHY);
            i++;
        } else if (c == '#' || (c == '%' && i + 1 < s->n && t[i + 1] == ':')) {
            i = s_directive(s, i, i + (c == '#' ? 1 : 2));
            if (i == (size_t)-1)
                return -1;
        } else {
            i++;
        }
    }
    return 0;
}

int kla_builder_check(const char *source, size_t len, char *msg, size_t n)
{
    char dummy[8];
    s_scan_t s = {.msg = n ? msg : dummy, .cap = n ? n : sizeof dummy};
    s.msg[0] = '\0';
    int rc = s_scan_init(&s, source, len);
    if (rc == 0)
        rc = s_scan(&s);
    if (rc == 0)
        rc = s_check_lits(&s);
    free(s.t);
    free(s.ln);
    free(s.lit_ln);
    kl_buf_free(&s.lits);
    return rc;
}
