/* builder.c - compile cache and build gate of kiln-agent: the source
 * check, the sandboxed compile, the trimming of its messages and the
 * checked cache (kla_builder.h).
 *
 * Locks, not actors, here: the gate must stop compilers synchronously
 * before the runner forks a timed child (a message round trip through the
 * actor would put the builder threads' scheduling on the timing path), and
 * builder threads sit inside blocking compiles where they cannot read a
 * socket. The mutexes guard small tables only and are never held across a
 * compile or a fork.
 */
#include "kla_builder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_log.h"
#include "kl_util.h"
#include "kla_jail.h"

/* ---- gate ------------------------------------------------------------ */

struct kla_gate_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closed, aborted;
    double closed_total, closed_since;
    pid_t *groups; /* process groups of running compilers */
    int n, cap;
};

void kla_gate_new(kla_gate_t **out)
{
    kla_gate_t *g = kl_xcalloc(1, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
}

void kla_gate_destroy(kla_gate_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_gate_t *g = *self_p;
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g->groups);
    free(g);
    *self_p = NULL;
}

static void s_signal_all(kla_gate_t *g, int sig)
{
    for (int i = 0; i < g->n; i++)
        kill(-g->groups[i], sig);
}

void kla_gate_pause(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    if (!g->closed) {
        g->closed = true;
        g->closed_since = kl_now_s();
        s_signal_all(g, SIGSTOP);
    }
    pthread_mutex_unlock(&g->mu);
}

void kla_gate_resume(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->closed) {
        g->closed = false;
        g->closed_total += kl_now_s() - g->closed_since;
        s_signal_all(g, SIGCONT);
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
}

void kla_gate_abort(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->aborted = true;
    s_signal_all(g, SIGKILL);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

double kla_gate_closed_s(kla_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    double t = g->closed_total;
    if (g->closed)
        t += kl_now_s() - g->closed_since;
    pthread_mutex_unlock(&g->mu);
    return t;
}

/* Waits while the gate is closed. Returns -1 when aborted. */
static int s_gate_enter(kla_gate_t *g, double *waited)
{
    *waited = 0;
    if (!g)
        return 0;
    double t0 = kl_now_s();
    pthread_mutex_lock(&g->mu);
    while (g->closed && !g->aborted)
        pthread_cond_wait(&g->cv, &g->mu);
    int rc = g->aborted ? -1 : 0;
    pthread_mutex_unlock(&g->mu);
    *waited = kl_now_s() - t0;
    return rc;
}

/* Registers a running compiler; one that starts while the gate closed
 * again is stopped at once, one that starts after an abort is killed. */
static void s_gate_register(kla_gate_t *g, pid_t pgid)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    if (g->n == g->cap) {
        g->cap = g->cap ? 2 * g->cap : 8;
        g->groups = kl_xrealloc(g->groups, (size_t)g->cap * sizeof(pid_t));
    }
    g->groups[g->n++] = pgid;
    if (g->aborted)
        kill(-pgid, SIGKILL);
    else if (g->closed)
        kill(-pgid, SIGSTOP);
    pthread_mutex_unlock(&g->mu);
}

static void s_gate_unregister(kla_gate_t *g, pid_t pgid)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < g->n; i++)
        if (g->groups[i] == pgid) {
            g->groups[i] = g->groups[--g->n];
            break;
        }
    pthread_mutex_unlock(&g->mu);
}

static double s_gate_closed(kla_gate_t *g)
{
    return g ? kla_gate_closed_s(g) : 0.0;
}

/* ---- the source check ------------------------------------------------ */

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

static int s_hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
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
                while (i + 1 < s->n && s_hexval(t[i + 1]) >= 0)
                    v = (v * 16 + s_hexval(t[++i])) & 0xff;
                c = (char)v;
                break;
            case 'u':
            case 'U':
                for (k = d == 'u' ? 4 : 8;
                     k > 0 && i + 1 < s->n && s_hexval(t[i + 1]) >= 0; k--)
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

/* ---- trimming the compiler's messages -------------------------------- */

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

/* ---- builder --------------------------------------------------------- */

enum { S_BUILDING, S_OK, S_FAILED };

typedef struct s_entry {
    uint8_t key[16];
    int state;
    unsigned long gen; /* tells a new entry from a freed one's address */
    uint8_t sum[16];   /* S_OK: kl_hash128 of the library's bytes */
    char *log;         /* S_FAILED */
    struct s_entry *next;
} s_entry_t;

#define S_BUCKETS 1024
#define S_RAW_MAX (64u << 10) /* compiler stderr kept before trimming */
#define S_IN_DIR "/build"     /* the per-compile directory, inside */
#define S_SRC "candidate.c"
#define S_OUT "out.so"
#define S_OUT_FD "/proc/self/fd/4" /* the output, inside the sandbox */

struct kla_builder_s {
    char *workdir, *cc, *cflags;
    char **flags;
    int nflags;
    int timeout_ms;
    kla_cores_t cores;
    bool pin;
    kla_gate_t *gate;
    size_t max_file;
    struct rlimit lim_as, lim_cpu, lim_fsize, lim_nproc, lim_core;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    s_entry_t *buckets[S_BUCKETS];
    unsigned long gen;
    unsigned compiles;
};

static void s_limit(struct rlimit *r, unsigned long long cur,
                    unsigned long long max)
{
    r->rlim_cur = (rlim_t)cur;
    r->rlim_max = (rlim_t)max;
}

int kla_builder_new(kla_builder_t **out, const kla_builder_config_t *cfg,
                    char *err)
{
    *out = NULL;
    struct stat st;
    if (!cfg->workdir || stat(cfg->workdir, &st) != 0 || !S_ISDIR(st.st_mode))
        return kl_seterr(err, KL_ERR_IO, "build workdir %s: not a directory",
                         cfg->workdir ? cfg->workdir : "(none)");
    if (access(cfg->workdir, W_OK) != 0)
        return kl_seterr(err, KL_ERR_IO, "build workdir %s: %s", cfg->workdir,
                         strerror(errno));
    if (cfg->cc && !*cfg->cc)
        return kl_seterr(err, KL_ERR_INVAL, "compiler name is empty");
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        kl_warn("build workdir %s may be written by group or others (mode "
                "%03o): the libraries cached there are the agent's alone "
                "only in a directory of mode 0700",
                cfg->workdir, (unsigned)(st.st_mode & 0777));
    kla_builder_t *b = kl_xcalloc(1, sizeof *b);
    b->workdir = kl_xstrdup(cfg->workdir);
    const char *cc = cfg->cc ? cfg->cc : "cc";
    char real[PATH_MAX];
    /* "./my-cc" means the agent's directory, not the sandbox's /build */
    if (cc[0] != '/' && strchr(cc, '/') && realpath(cc, real))
        cc = real;
    b->cc = kl_xstrdup(cc);
    b->cflags =
        kl_xstrdup(cfg->cflags ? cfg->cflags : "-O3 -march=native -fopenmp");
    b->timeout_ms = cfg->timeout_ms > 0 ? cfg->timeout_ms : 60000;
    if (cfg->cores && cfg->cores->n > 0) {
        b->cores = *cfg->cores;
        b->pin = true;
    }
    b->gate = cfg->gate;
    unsigned long long mem =
                           cfg->max_mem_bytes ? cfg->max_mem_bytes : 2ull << 30,
                       fsz = cfg->max_file_bytes ? cfg->max_file_bytes
                                                 : 256ull << 20,
                       cpu = (unsigned long long)b->timeout_ms / 1000 + 2;
    b->max_file = (size_t)fsz;
    s_limit(&b->lim_as, mem, mem);
    s_limit(&b->lim_fsize, fsz, fsz);
    s_limit(&b->lim_cpu, cpu, cpu + 3); /* SIGXCPU, then SIGKILL */
    unsigned long long np =
        cfg->max_procs > 0 ? (unsigned)cfg->max_procs : 1024;
    s_limit(&b->lim_nproc, np, np);
    s_limit(&b->lim_core, 0, 0);
    char *copy = kl_xstrdup(b->cflags), *save = NULL;
    for (char *t = strtok_r(copy, " \t\n", &save); t;
         t = strtok_r(NULL, " \t\n", &save)) {
        b->flags =
            kl_xrealloc(b->flags, (size_t)(b->nflags + 1) * sizeof(char *));
        b->flags[b->nflags++] = kl_xstrdup(t);
    }
    free(copy);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    *out = b;
    return KL_OK;
}

void kla_builder_destroy(kla_builder_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kla_builder_t *b = *self_p;
    for (int i = 0; i < S_BUCKETS; i++)
        for (s_entry_t *e = b->buckets[i], *next; e; e = next) {
            next = e->next;
            free(e->log);
            free(e);
        }
    for (int i = 0; i < b->nflags; i++)
        free(b->flags[i]);
    free(b->flags);
    free(b->workdir);
    free(b->cc);
    free(b->cflags);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
    *self_p = NULL;
}

unsigned kla_builder_compiles(kla_builder_t *b)
{
    pthread_mutex_lock(&b->mu);
    unsigned n = b->compiles;
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void s_key(kla_builder_t *b, const char *src, size_t len,
                  uint8_t key[16])
{
    kl_buf_t buf = {0};
    kl_buf_append(&buf, src, len);
    kl_buf_append(&buf, "\0", 1);
    kl_buf_puts(&buf, b->cc);
    kl_buf_append(&buf, "\0", 1);
    for (int i = 0; i < b->nflags; i++) {
        kl_buf_puts(&buf, b->flags[i]);
        kl_buf_append(&buf, " ", 1);
    }
    kl_hash128(buf.data, buf.len, key);
    kl_buf_free(&buf);
}

/* Reads the compiler's stderr until EOF, keeping the first S_RAW_MAX
 * bytes, until the deadline (which moves on while the gate is closed).
 * Returns 1 when the deadline passed. */
static int s_drain(kla_builder_t *b, int fd, char *log, size_t *len,
                   double start, double closed0)
{
    for (;;) {
        double deadline =
            start + b->timeout_ms / 1000.0 + (s_gate_closed(b->gate) - closed0);
        double left = deadline - kl_now_s();
        if (left <= 0)
            return 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int ms = left > 0.2 ? 200 : (int)(left * 1000) + 1;
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno != EINTR)
            return 0;
        if (rc <= 0)
            continue;
        char chunk[4096];
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        size_t keep = (size_t)n;
        if (*len + keep > S_RAW_MAX)
            keep = S_RAW_MAX - *len;
        memcpy(log + *len, chunk, keep);
        *len += keep;
    }
}

/* What the child needs; everything is made before the fork. */
typedef struct {
    char **argv; /* argv[0] is looked up on the agent's PATH */
    int errfd;   /* becomes stderr */
    int keep[3]; /* >= 0: become fds 3, 4, 5 (bwrap --file 3 ...) */
    bool drop;   /* kla_jail_drop_root */
} s_child_t;

static void s_child_fail(const char *msg)
{
    (void)!write(2, msg, strlen(msg));
    _exit(126);
}

static void s_close_from(int fd)
{
    if (close_range((unsigned)fd, ~0u, 0) == 0)
        return;
    struct rlimit r;
    int hi = getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < 65536
                 ? (int)r.rlim_cur
                 : 65536;
    for (int i = fd; i < hi; i++)
        close(i);
}

/* Forks the compiler (or bwrap) in its own process group, without a
 * terminal, stderr into c->errfd, c->keep as fds 3.., every other
 * descriptor closed, under the builder's limits. Between fork and exec
 * only system calls: other threads may hold locks. */
static pid_t s_spawn(kla_builder_t *b, const s_child_t *c)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* the agent blocks SIGTERM */
    signal(SIGPIPE, SIG_DFL);
    kla_jail_detach_tty();
    /* copies above the targets first, so no dup2 overwrites a source */
    int e = fcntl(c->errfd, F_DUPFD_CLOEXEC, 10), k[3], n = 0;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (e < 0 || null < 0)
        _exit(126);
    for (int i = 0; i < 3; i++) {
        k[i] = c->keep[i] >= 0 ? fcntl(c->keep[i], F_DUPFD_CLOEXEC, 10) : -1;
        if (c->keep[i] >= 0 && k[i] < 0)
            _exit(126);
    }
    /* dup2 clears close-on-exec on the copies the compiler keeps */
    if (dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(e, 2) < 0)
        _exit(126);
    for (int i = 0; i < 3; i++)
        if (k[i] >= 0) {
            if (dup2(k[i], 3 + i) < 0)
                _exit(126);
            n = i + 1;
        }
    s_close_from(3 + n);
    if (c->drop && kla_jail_drop_root() != 0)
        s_child_fail("cannot become uid 65534 for the compiler\n");
    if (setrlimit(RLIMIT_AS, &b->lim_as) != 0 ||
        setrlimit(RLIMIT_CPU, &b->lim_cpu) != 0 ||
        setrlimit(RLIMIT_FSIZE, &b->lim_fsize) != 0 ||
        setrlimit(RLIMIT_NPROC, &b->lim_nproc) != 0 ||
        setrlimit(RLIMIT_CORE, &b->lim_core) != 0)
        s_child_fail("cannot set the compiler's limits\n");
    /* after the uid change, which clears it; dies with the agent */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(126);
    if (b->pin)
        kla_cores_pin(&b->cores);
    execvp(c->argv[0], c->argv);
    static const char msg[] = "cannot run the compiler\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(127);
}

/* The command line: bwrap and the compiler, or the compiler alone
 * (unsafe). In the sandbox fd 3 holds the source, copied to
 * /build/candidate.c on a fresh tmpfs; the compiler writes its output
 * through /proc/self/fd/4, a memfd of the agent's (bwrap resolves bind
 * sources by path as uid 65534, which cannot reach a root agent's
 * workdir, and a descriptor leaves no path to race); fd 5, when set,
 * holds a compiler outside the system, copied to its own path. */
static void s_command(kla_builder_t *b, bool jail, bool copy_cc,
                      const char *src, const char *so, kla_argv_t *a)
{
    if (jail) {
        kla_jail_base_group(a);
        kla_argv_add(a, "--size");
        kla_argv_addf(a, "%zu", b->max_file);
        kla_argv_add(a, "--tmpfs");
        kla_argv_add(a, S_IN_DIR);
        kla_argv_add(a, "--file");
        kla_argv_add(a, "3");
        kla_argv_add(a, S_IN_DIR "/" S_SRC);
        if (copy_cc) {
            kla_argv_add(a, "--perms");
            kla_argv_add(a, "0555");
            kla_argv_add(a, "--file");
            kla_argv_add(a, "5");
            kla_argv_add(a, b->cc);
        }
        static const char *const env[] = {"--setenv", "PATH",   "/usr/bin:/bin",
                                          "--setenv", "TMPDIR", S_IN_DIR,
                                          "--setenv", "LC_ALL", "C",
                                          "--chdir",  S_IN_DIR, "--"};
        for (size_t i = 0; i < sizeof env / sizeof *env; i++)
            kla_argv_add(a, env[i]);
    }
    kla_argv_add(a, b->cc);
    for (int i = 0; i < b->nflags; i++)
        kla_argv_add(a, b->flags[i]);
    kla_argv_add(a, "-shared");
    kla_argv_add(a, "-fPIC");
    kla_argv_add(a, "-o");
    kla_argv_add(a, so);
    kla_argv_add(a, src);
}

/* Says why a compiler that wrote nothing (or could not start) failed. */
static void s_status_msg(kla_builder_t *b, int status, size_t len,
                         kla_build_t *out)
{
    if (len > 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 127))
        return; /* its own stderr says it */
    if (WIFSIGNALED(status))
        snprintf(out->log, sizeof out->log, "compiler %s killed by signal %d%s",
                 b->cc, WTERMSIG(status),
                 WTERMSIG(status) == SIGXCPU ? " (CPU time limit)" : "");
    else
        snprintf(out->log, sizeof out->log,
                 "compiler %s exited with status %d%s", b->cc,
                 WEXITSTATUS(status),
                 WEXITSTATUS(status) == 127 ? " (cannot run it)" : "");
}

/* bwrap's own failure on the first line of raw: "bwrap: execvp cc: No
 * such file or directory" is the compiler's (KL_ERR_COMPILE), any other
 * ("bwrap: Creating new namespace failed: ...") the machine's
 * (KL_ERR_IO); KL_OK when raw is not from bwrap. */
static int s_bwrap_failed(kla_builder_t *b, const char *raw, size_t len,
                          kla_build_t *out)
{
    static const char pre[] = "bwrap: ";
    if (len < sizeof pre - 1 || memcmp(raw, pre, sizeof pre - 1) != 0)
        return KL_OK;
    const char *nl = memchr(raw, '\n', len);
    int n = (int)((nl ? (size_t)(nl - raw) : len) - (sizeof pre - 1));
    const char *l = raw + sizeof pre - 1;
    if (n > 7 && memcmp(l, "execvp ", 7) == 0) {
        const char *why = memchr(l, ':', (size_t)n);
        snprintf(out->log, sizeof out->log,
                 "cannot run the compiler %s in the sandbox%.*s", b->cc,
                 why ? n - (int)(why - l) : 0, why ? why : "");
        return KL_ERR_COMPILE;
    }
    snprintf(out->log, sizeof out->log, "the compiler's sandbox failed: %.*s",
             n, l);
    return KL_ERR_IO;
}

/* Replaces every "from" in the NUL-terminated log by the shorter "to". */
static void s_rewrite(char *log, const char *from, const char *to)
{
    size_t fn = strlen(from), tn = strlen(to);
    for (char *p = strstr(log, from); p; p = strstr(p + tn, from)) {
        memmove(p + tn, p + fn, strlen(p + fn) + 1);
        memcpy(p, to, tn);
    }
}

/* Runs the compiler: in a sandbox (jail) on the source in srcfd, writing
 * into outfd; else on dir/candidate.c, writing dir/out.so. Fills
 * out->log. Returns KL_OK, KL_ERR_COMPILE, KL_ERR_TIMEOUT, KL_ERR_IO or
 * KL_ERR_CLOSED. */
static int s_compile(kla_builder_t *b, bool jail, const char *dir, int srcfd,
                     int outfd, kla_build_t *out)
{
    char src[PATH_MAX + 16], so[PATH_MAX + 16], shown_dir[PATH_MAX + 2];
    snprintf(src, sizeof src, "%s/" S_SRC, jail ? S_IN_DIR : dir);
    if (jail)
        snprintf(so, sizeof so, "%s", S_OUT_FD);
    else
        snprintf(so, sizeof so, "%s/" S_OUT, dir);
    snprintf(shown_dir, sizeof shown_dir, "%s/", jail ? S_IN_DIR : dir);
    int ccfd = -1;
    if (jail && b->cc[0] == '/' && !kla_jail_sees(b->cc)) {
        ccfd = open(b->cc, O_RDONLY | O_CLOEXEC);
        if (ccfd < 0) {
            snprintf(out->log, sizeof out->log,
                     "cannot run the compiler %s: %s", b->cc, strerror(errno));
            return KL_ERR_COMPILE;
        }
    }
    double waited;
    if (s_gate_enter(b->gate, &waited) != 0) {
        snprintf(out->log, sizeof out->log, "build aborted: agent stopping");
        if (ccfd >= 0)
            close(ccfd);
        return KL_ERR_CLOSED;
    }
    out->paused_s += waited;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        snprintf(out->log, sizeof out->log, "pipe: %s", strerror(errno));
        if (ccfd >= 0)
            close(ccfd);
        return KL_ERR_IO;
    }
    kla_argv_t argv = {0};
    s_command(b, jail, ccfd >= 0, src, so, &argv);
    s_child_t child = {.argv = argv.v,
                       .errfd = fds[1],
                       .keep = {jail ? srcfd : -1, jail ? outfd : -1, ccfd},
                       .drop = jail};
    double start = kl_now_s(), closed0 = s_gate_closed(b->gate);
    pid_t pid = s_spawn(b, &child);
    close(fds[1]);
    if (ccfd >= 0)
        close(ccfd);
    kla_argv_free(&argv);
    if (pid < 0) {
        close(fds[0]);
        snprintf(out->log, sizeof out->log, "fork: %s", strerror(errno));
        return KL_ERR_IO;
    }
    setpgid(pid, pid);
    s_gate_register(b->gate, pid);
    char *raw = kl_xmalloc(S_RAW_MAX);
    size_t len = 0;
    int timed_out = s_drain(b, fds[0], raw, &len, start, closed0);
    close(fds[0]);
    if (timed_out)
        kill(-pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    s_gate_unregister(b->gate, pid);
    double stopped = s_gate_closed(b->gate) - closed0;
    out->compile_s = kl_now_s() - start - stopped;
    out->paused_s += stopped;
    pthread_mutex_lock(&b->mu);
    b->compiles++;
    pthread_mutex_unlock(&b->mu);
    int rc = jail && !timed_out && !(WIFEXITED(status) && !WEXITSTATUS(status))
                 ? s_bwrap_failed(b, raw, len, out)
                 : KL_OK;
    size_t shown = 0;
    if (rc == KL_OK) {
        kla_builder_trim(raw, len, src, shown_dir, out->log, sizeof out->log,
                         NULL);
        if (jail)
            s_rewrite(out->log, S_OUT_FD, S_OUT);
        shown = strlen(out->log);
    }
    free(raw);
    if (rc != KL_OK)
        return rc;
    if (timed_out) {
        snprintf(out->log, sizeof out->log,
                 "compiler still running after %.1f s: killed",
                 b->timeout_ms / 1000.0);
        return KL_ERR_TIMEOUT; /* maybe load, not the source: not cached */
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return KL_OK;
    s_status_msg(b, status, shown, out);
    return KL_ERR_COMPILE;
}

/* ---- the cache: stored libraries and their sums ---------------------- */

/* Reads the regular file open as fd (at most max bytes) into *data. */
static int s_read_fd(int fd, size_t max, char **data, size_t *len,
                     const char **why)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
        return -1;
    }
    if ((size_t)st.st_size > max) {
        *why = "too large";
        return -1;
    }
    size_t cap = (size_t)st.st_size + 1, n = 0;
    char *p = kl_xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                free(p);
                *why = "too large";
                return -1;
            }
            cap *= 2;
            p = kl_xrealloc(p, cap);
        }
        ssize_t r = read(fd, p + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(p);
            *why = "cannot read it";
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    *data = p;
    *len = n;
    return 0;
}

/* Opens a cache file for reading: a regular file (no link), the agent's,
 * not writable by group or others. fd, 0 ... or -1 with *why (errno
 * ENOENT: it is not there). */
static int s_open_cached(const char *path, const char **why)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *why = errno == ENOENT ? "missing" : "cannot open it";
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = "not a regular file";
    } else if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        *why = "not the agent's own or writable by others";
    } else {
        return fd;
    }
    close(fd);
    errno = EPERM;
    return -1;
}

/* Whether the library at path hashes to sum: 0 yes, 1 it is missing, -1
 * it differs or is not fit (*why). */
static int s_verify(kla_builder_t *b, const char *path, const uint8_t sum[16],
                    const char **why)
{
    int fd = s_open_cached(path, why);
    if (fd < 0)
        return errno == ENOENT ? 1 : -1;
    char *data = NULL;
    size_t len = 0;
    int rc = s_read_fd(fd, b->max_file, &data, &len, why);
    close(fd);
    if (rc != 0)
        return -1;
    uint8_t got[16];
    kl_hash128(data, len, got);
    free(data);
    if (memcmp(got, sum, 16) != 0) {
        *why = "its bytes do not match the sum recorded when it was built";
        return -1;
    }
    return 0;
}

/* Reads WORKDIR/HEX.so.sum: 0, or -1 with *why. */
static int s_read_sum(const char *so_path, uint8_t sum[16], const char **why)
{
    char path[PATH_MAX + 8], text[40];
    snprintf(path, sizeof path, "%s.sum", so_path);
    int fd = s_open_cached(path, why);
    if (fd < 0)
        return -1; /* a library without its sum is not used */
    ssize_t n = read(fd, text, sizeof text);
    close(fd);
    if (n != 33 || text[32] != '\n') {
        *why = "its sum file is malformed";
        return -1;
    }
    for (int i = 0; i < 16; i++) {
        int hi = s_hexval(text[2 * i]), lo = s_hexval(text[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            *why = "its sum file is malformed";
            return -1;
        }
        sum[i] = (uint8_t)(hi * 16 + lo);
    }
    return 0;
}

/* Writes data to path through a temporary file and a rename. */
static int s_write_atomic(const char *path, const void *data, size_t len,
                          mode_t mode, char *msg, size_t cap)
{
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.tmpXXXXXX", path);
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        snprintf(msg, cap, "mkstemp %.1024s: %s", tmp, strerror(errno));
        return KL_ERR_IO;
    }
    const char *p = data;
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(fd, p + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int bad = done != len || fchmod(fd, mode) != 0;
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        bad = 1;
        saved = errno;
    }
    if (bad || rename(tmp, path) != 0) {
        snprintf(msg, cap, "write %.1024s: %s", path,
                 strerror(bad ? saved : errno));
        unlink(tmp);
        return KL_ERR_IO;
    }
    return KL_OK;
}

/* Takes the compiler's output, open as fd, into the cache as so_path
 * with its sum: a regular file with something in it, copied (the
 * agent's file, not the compiler's). */
static int s_store(kla_builder_t *b, int fd, const char *so_path,
                   uint8_t sum[16], kla_build_t *out)
{
    char *data = NULL;
    size_t len = 0;
    const char *why = NULL;
    if (lseek(fd, 0, SEEK_SET) != 0 ||
        s_read_fd(fd, b->max_file, &data, &len, &why) != 0) {
        snprintf(out->log, sizeof out->log,
                 "the compiler's output " S_OUT ": %s: refused",
                 why ? why : "cannot read it");
        return KL_ERR_COMPILE;
    }
    if (len == 0) {
        free(data);
        snprintf(out->log, sizeof out->log, "the compiler wrote no " S_OUT);
        return KL_ERR_COMPILE;
    }
    kl_hash128(data, len, sum);
    int rc =
        s_write_atomic(so_path, data, len, 0755, out->log, sizeof out->log);
    free(data);
    if (rc != KL_OK)
        return rc;
    char sum_path[PATH_MAX + 8], hex[33];
    snprintf(sum_path, sizeof sum_path, "%s.sum", so_path);
    kl_hex128(sum, hex);
    hex[32] = '\n';
    return s_write_atomic(sum_path, hex, 33, 0644, out->log, sizeof out->log);
}

/* The output the unsafe compile left in dir/out.so (dirfd): opened
 * without following links (s_store then wants a regular file). fd, or
 * -1 with out->log and *rc. */
static int s_open_output(int dirfd, kla_build_t *out, int *rc)
{
    int fd =
        openat(dirfd, S_OUT, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(out->log, sizeof out->log, "%s",
                 e == ELOOP ? "the compiler's output " S_OUT
                              " is a symbolic link: refused"
                 : e == ENOENT ? "the compiler wrote no " S_OUT
                               : "cannot open the compiler's output");
        *rc = e == ELOOP || e == ENOENT ? KL_ERR_COMPILE : KL_ERR_IO;
    }
    return fd;
}

/* Removes everything in the directory open as fd (not fd itself), not
 * following links; depth bounded. */
static void s_rm_contents(int fd, int depth)
{
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    DIR *d = copy >= 0 ? fdopendir(copy) : NULL;
    if (!d) {
        if (copy >= 0)
            close(copy);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (!strcmp(n, ".") || !strcmp(n, ".."))
            continue;
        if (unlinkat(fd, n, 0) == 0 || errno == ENOENT)
            continue;
        if (depth >= 32)
            continue;
        fchmodat(fd, n, 0700, 0); /* a directory the compiler locked */
        int sub =
            openat(fd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            s_rm_contents(sub, depth + 1);
            close(sub);
            unlinkat(fd, n, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

static s_entry_t **s_slot(kla_builder_t *b, const uint8_t key[16])
{
    uint64_t h;
    memcpy(&h, key, sizeof h);
    s_entry_t **p = &b->buckets[h % S_BUCKETS];
    while (*p && memcmp((*p)->key, key, 16) != 0)
        p = &(*p)->next;
    return p;
}

/* Writes source as candidate.c in the fresh directory open as dirfd. */
static int s_put_source(int dirfd, const char *source, size_t len,
                        kla_build_t *out)
{
    int fd = openat(dirfd, S_SRC,
                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t done = 0;
    while (fd >= 0 && done < len) {
        ssize_t w = write(fd, source + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    /* readable by uid 65534 whatever the agent's umask */
    if (fd < 0 || done != len || fchmod(fd, 0644) != 0) {
        snprintf(out->log, sizeof out->log, "write " S_SRC ": %s",
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return KL_ERR_IO;
    }
    close(fd);
    return KL_OK;
}

/* The sandboxed build: source and output in memfds, nothing of the
 * agent's on disk until the output is taken. */
static int s_build_jailed(kla_builder_t *b, const char *source, size_t len,
                          kla_build_t *out, uint8_t sum[16])
{
    int srcfd = memfd_create("candidate.c", MFD_CLOEXEC);
    int outfd = memfd_create("out.so", MFD_CLOEXEC);
    size_t done = 0;
    while (srcfd >= 0 && done < len) {
        ssize_t w = write(srcfd, source + done, len - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    int rc = KL_ERR_IO;
    if (srcfd < 0 || outfd < 0 || done != len || lseek(srcfd, 0, SEEK_SET) != 0)
        snprintf(out->log, sizeof out->log, "memfd: %s", strerror(errno));
    else
        rc = s_compile(b, true, NULL, srcfd, outfd, out);
    if (rc == KL_OK)
        rc = s_store(b, outfd, out->so_path, sum, out);
    if (srcfd >= 0)
        close(srcfd);
    if (outfd >= 0)
        close(outfd);
    return rc;
}

/* The unsafe build (--unsafe-no-sandbox): in a fresh per-compile
 * directory WORKDIR/build-XXXXXX holding the source alone, removed after
 * its output is taken. */
static int s_build_unsafe(kla_builder_t *b, const char *source, size_t len,
                          kla_build_t *out, uint8_t sum[16])
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/build-XXXXXX", b->workdir);
    if (!mkdtemp(dir)) {
        snprintf(out->log, sizeof out->log, "mkdtemp %.1024s: %s", dir,
                 strerror(errno));
        return KL_ERR_IO;
    }
    int rc = KL_ERR_IO;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        snprintf(out->log, sizeof out->log, "build directory %.1024s: %s", dir,
                 strerror(errno));
    else
        rc = s_put_source(dirfd, source, len, out);
    if (rc == KL_OK)
        rc = s_compile(b, false, dir, -1, -1, out);
    if (rc == KL_OK) {
        int fd = s_open_output(dirfd, out, &rc);
        if (fd >= 0) {
            rc = s_store(b, fd, out->so_path, sum, out);
            close(fd);
        }
    }
    if (dirfd >= 0) {
        s_rm_contents(dirfd, 0);
        close(dirfd);
    }
    if (rmdir(dir) != 0)
        kl_warn("build directory %s: cannot remove it: %s", dir,
                strerror(errno));
    return rc;
}

/* Builds the entry this thread owns (state S_BUILDING); *sum gets the
 * library's hash. */
static int s_build_new(kla_builder_t *b, const char *source, size_t len,
                       kla_build_t *out, uint8_t sum[16])
{
    if (kla_builder_check(source, len, out->log, sizeof out->log) != 0)
        return KL_ERR_COMPILE; /* refused: the compiler does not run */
    bool jail = !kla_jail_unsafe();
    char err[KL_ERRMSG_LEN];
    if (jail && kla_jail_probe(err) != KL_OK) {
        snprintf(out->log, sizeof out->log, "no sandbox for the compiler: %s",
                 err);
        return KL_ERR_UNSUPPORTED;
    }
    /* A cleaner of /tmp may have removed the work directory under a
     * long-running agent: make it again rather than fail every build. */
    if (access(b->workdir, W_OK) != 0 && errno == ENOENT) {
        if (kl_mkdirs(b->workdir, err) != KL_OK) {
            snprintf(out->log, sizeof out->log, "%s", err);
            return KL_ERR_IO;
        }
        chmod(b->workdir, 0700);
        kl_warn("build workdir %s was gone: made it again", b->workdir);
    }
    return jail ? s_build_jailed(b, source, len, out, sum)
                : s_build_unsafe(b, source, len, out, sum);
}

/* A library left in the workdir by an earlier agent: 0 when it is there
 * with a sum it matches (sum filled), 1 when it is not there, -1 when it
 * is but may not be used (*why). */
static int s_disk_hit(kla_builder_t *b, const char *so_path, uint8_t sum[16],
                      const char **why)
{
    if (access(so_path, F_OK) != 0)
        return 1;
    if (s_read_sum(so_path, sum, why) != 0) {
        if (strcmp(*why, "missing") == 0)
            *why = "it has no sum file";
        return -1;
    }
    return s_verify(b, so_path, sum, why) == 0 ? 0 : -1;
}

int kla_builder_build(kla_builder_t *b, const char *source, size_t len,
                      kla_build_t *out)
{
    memset(out, 0, sizeof *out);
    uint8_t key[16], sum[16];
    char hex[33];
    s_key(b, source, len, key);
    kl_hex128(key, hex);
    snprintf(out->so_path, sizeof out->so_path, "%s/%s.so", b->workdir, hex);

    bool fresh = false; /* no entry was there: look at the disk first */
    const char *why = NULL;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        s_entry_t **slot = s_slot(b, key);
        while (*slot && (*slot)->state == S_BUILDING) {
            pthread_cond_wait(&b->cv, &b->mu);
            slot = s_slot(b, key);
        }
        s_entry_t *e = *slot;
        if (!e) {
            e = kl_xcalloc(1, sizeof *e);
            memcpy(e->key, key, 16);
            e->state = S_BUILDING;
            e->gen = ++b->gen;
            *slot = e;
            pthread_mutex_unlock(&b->mu);
            fresh = true;
            break;
        }
        if (e->state == S_FAILED) {
            out->cache_hit = true;
            snprintf(out->log, sizeof out->log, "%s", e->log);
            pthread_mutex_unlock(&b->mu);
            return KL_ERR_COMPILE;
        }
        unsigned long gen = e->gen;
        memcpy(sum, e->sum, 16);
        pthread_mutex_unlock(&b->mu);
        /* hashed outside the lock: hits of other sources go on */
        int v = s_verify(b, out->so_path, sum, &why);
        if (v == 0) {
            out->cache_hit = out->ok = true;
            return KL_OK;
        }
        if (v < 0)
            kl_warn("build cache: %s: %s: building it again", out->so_path,
                    why);
        pthread_mutex_lock(&b->mu);
        slot = s_slot(b, key);
        bool mine = *slot && (*slot)->gen == gen && (*slot)->state == S_OK;
        if (mine)
            (*slot)->state = S_BUILDING; /* this thread builds it again */
        pthread_mutex_unlock(&b->mu);
        if (mine)
            break;
    }

    int rc = KL_ERR_INTERNAL,
        v = fresh ? s_disk_hit(b, out->so_path, sum, &why) : 1;
    if (v == 0) {
        out->cache_hit = true; /* built by an earlier agent */
        rc = KL_OK;
    } else {
        if (v < 0)
            kl_warn("build cache: %s: %s: building it again", out->so_path,
                    why);
        rc = s_build_new(b, source, len, out, sum);
    }
    out->ok = rc == KL_OK;

    pthread_mutex_lock(&b->mu);
    s_entry_t **slot = s_slot(b, key);
    if (rc == KL_OK || rc == KL_ERR_COMPILE) {
        (*slot)->state = rc == KL_OK ? S_OK : S_FAILED;
        if (rc == KL_OK)
            memcpy((*slot)->sum, sum, 16);
        else
            (*slot)->log = kl_xstrdup(out->log);
    } else { /* not the source's fault: forget it, a retry may work */
        s_entry_t *dead = *slot;
        *slot = dead->next;
        free(dead->log);
        free(dead);
    }
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return rc == KL_ERR_TIMEOUT ? KL_ERR_COMPILE : rc;
}
