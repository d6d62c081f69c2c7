/* kl_live.c - see kl_live.h. */
#include "kl_live.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "kl_util.h"

#define BLOCK_INTERVAL_S 0.2
#define BAR_WIDTH 30

struct kl_live_s {
    FILE *f;
    bool block;
    double min_interval_s;
    double last;   /* kl_now_s of the last update written; < 0: none */
    int lines;     /* lines of the block on screen */
    char *pending; /* a skipped block, drawn by kl_live_destroy */
};

kl_live_t *kl_live_new(FILE *f, kl_live_mode mode, double min_interval_s)
{
    kl_live_t *l = kl_xcalloc(1, sizeof *l);
    l->f = f;
    l->block =
        mode == KL_LIVE_BLOCK || (mode == KL_LIVE_AUTO && isatty(fileno(f)));
    l->min_interval_s = min_interval_s > 0 ? min_interval_s : 2;
    l->last = -1;
    return l;
}

/* Columns of the terminal behind f; 0 when unknown. A line wider than the
 * terminal would wrap, and the cursor would then go up too few lines. */
static size_t s_columns(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 1)
        return ws.ws_col;
    return 0;
}

static void s_draw(kl_live_t *l, const char *text)
{
    kl_buf_t b = {0};
    size_t cols = s_columns(l->f);
    if (l->lines > 0)
        kl_buf_printf(&b, "\r\033[%dA", l->lines);
    int lines = 0;
    for (const char *s = text; *s;) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        kl_buf_puts(&b, "\033[2K");
        kl_buf_append(&b, s, cols && n >= cols ? cols - 1 : n);
        kl_buf_puts(&b, "\n");
        lines++;
        s += n + (e ? 1 : 0);
    }
    kl_buf_puts(&b, "\033[J");
    fputs(b.data, l->f);
    fflush(l->f);
    kl_buf_free(&b);
    l->lines = lines;
}

void kl_live_text(kl_live_t *l, const char *text, bool force)
{
    double now = kl_now_s();
    double gap = l->block ? BLOCK_INTERVAL_S : l->min_interval_s;
    if (!force && l->last >= 0 && now - l->last < gap) {
        if (l->block) {
            free(l->pending);
            l->pending = kl_xstrdup(text);
        }
        return;
    }
    l->last = now;
    free(l->pending);
    l->pending = NULL;
    if (l->block) {
        s_draw(l, text);
        return;
    }
    fputs(text, l->f);
    size_t n = strlen(text);
    if (n == 0 || text[n - 1] != '\n')
        fputc('\n', l->f);
    fflush(l->f);
}

void kl_live_destroy(kl_live_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_live_t *l = *self_p;
    if (l->pending)
        s_draw(l, l->pending);
    free(l->pending);
    free(l);
    *self_p = NULL;
}

bool kl_live_is_block(const kl_live_t *l)
{
    return l->block;
}

void kl_live_bar(char *buf, size_t size, int width, int64_t done, int64_t total)
{
    if (size < (size_t)width + 8 || width < 1) {
        if (size)
            buf[0] = 0;
        return;
    }
    double frac = total > 0 ? (double)done / (double)total : 0;
    frac = frac < 0 ? 0 : frac > 1 ? 1 : frac;
    int full = (int)(frac * width + 0.5);
    size_t k = 0;
    buf[k++] = '[';
    for (int i = 0; i < width; i++)
        buf[k++] = i < full ? '#' : '.';
    snprintf(buf + k, size - k, "] %3d%%", (int)(frac * 100));
}

void kl_live_time(double s, char *buf, size_t n)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "?");
    else if (s < 120)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 7200)
        snprintf(buf, n, "%.0fm%02.0fs", floor(s / 60), fmod(s, 60));
    else
        snprintf(buf, n, "%.1fh", s / 3600);
}

void kl_live_tune(kl_live_t *l, const char *name, const kl_job_progress_t *p)
{
    char el[32], eta[32], best[96] = "no valid candidate yet";
    char bar[BAR_WIDTH + 16];
    kl_live_time(p->elapsed_s, el, sizeof el);
    kl_live_time(p->done ? 0 : p->eta_s, eta, sizeof eta);
    if (isfinite(p->best_s))
        snprintf(best, sizeof best, "best %.2f GFLOP/s (%.2f us)", p->gflops,
                 p->best_s * 1e6);
    kl_live_bar(bar, sizeof bar, BAR_WIDTH, p->trials, p->cap);
    char *text;
    if (l->block)
        text =
            kl_xasprintf("kiln tune %s\n%s  trials %lld/%lld\n"
                         "valid %lld  restored %lld  in flight %lld\n%s\n"
                         "elapsed %s  ETA %s%s",
                         name ? name : "", bar, (long long)p->trials,
                         (long long)p->cap, (long long)p->valid,
                         (long long)p->restored, (long long)p->in_flight, best,
                         el, p->done ? "-" : eta, p->done ? "  done" : "");
    else
        text = kl_xasprintf(
            "kiln tune: %s%strials %lld/%lld (%lld valid, "
            "%lld restored, %lld in flight)  %s  elapsed %s  "
            "ETA %s",
            name ? name : "", name ? ": " : "", (long long)p->trials,
            (long long)p->cap, (long long)p->valid, (long long)p->restored,
            (long long)p->in_flight, best, el, p->done ? "-" : eta);
    kl_live_text(l, text, p->done);
    free(text);
}

void kl_live_tasks(kl_live_t *l, const char *heading, const kl_ts_row_t *rows,
                   int n, int64_t total_trials, int64_t cap, bool done)
{
    char bar[BAR_WIDTH + 16];
    kl_live_bar(bar, sizeof bar, BAR_WIDTH, total_trials, cap);
    int ndone = 0;
    for (int i = 0; i < n; i++)
        ndone += rows[i].done;
    kl_buf_t b = {0};
    if (heading)
        kl_buf_printf(&b, "%s\n", heading);
    kl_buf_printf(&b, "%s  trials %lld/%lld, tasks done %d/%d\n", bar,
                  (long long)total_trials, (long long)cap, ndone, n);
    if (l->block) {
        char *table = NULL;
        size_t len = 0;
        FILE *mf = open_memstream(&table, &len);
        if (mf) {
            kl_ts_print_table(mf, rows, n);
            fclose(mf);
            kl_buf_append(&b, table, len);
        }
        free(table);
    }
    kl_live_text(l, b.data, done);
    kl_buf_free(&b);
}
