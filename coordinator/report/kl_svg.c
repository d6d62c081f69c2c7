/* kl_svg.c - see kl_svg.h. */
#include "kl_svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NOTES 4
#define MAX_TICKS 12

typedef struct {
    char *name;
    kl_svg_kind kind;
    bool bars;
    double *x, *y; /* bars: x has n + 1 edges */
    size_t n;
} s_series_t;

struct kl_svg_s {
    char *title, *xlabel, *ylabel;
    unsigned flags;
    s_series_t *series;
    size_t nseries;
    char *notes[MAX_NOTES];
    int nnotes;
};

static const char *const s_palette[] = {"#1f77b4", "#d62728", "#2ca02c",
                                        "#ff7f0e", "#9467bd", "#8c564b",
                                        "#e377c2", "#17becf"};
#define NPALETTE (sizeof s_palette / sizeof s_palette[0])

kl_svg_t *kl_svg_new(const char *title, const char *xlabel, const char *ylabel,
                     unsigned flags)
{
    kl_svg_t *p = kl_xcalloc(1, sizeof *p);
    p->title = kl_xstrdup(title ? title : "");
    p->xlabel = kl_xstrdup(xlabel ? xlabel : "");
    p->ylabel = kl_xstrdup(ylabel ? ylabel : "");
    p->flags = flags;
    return p;
}

void kl_svg_destroy(kl_svg_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_svg_t *p = *self_p;
    for (size_t i = 0; i < p->nseries; i++) {
        free(p->series[i].name);
        free(p->series[i].x);
        free(p->series[i].y);
    }
    for (int i = 0; i < p->nnotes; i++)
        free(p->notes[i]);
    free(p->series);
    free(p->title);
    free(p->xlabel);
    free(p->ylabel);
    free(p);
    *self_p = NULL;
}

static s_series_t *s_push(kl_svg_t *p, const char *name)
{
    p->series = kl_xrealloc(p->series, (p->nseries + 1) * sizeof *p->series);
    s_series_t *s = &p->series[p->nseries++];
    memset(s, 0, sizeof *s);
    s->name = name ? kl_xstrdup(name) : NULL;
    return s;
}

static double *s_copy(const double *v, size_t n)
{
    double *c = kl_xmalloc((n ? n : 1) * sizeof *c);
    if (n)
        memcpy(c, v, n * sizeof *c);
    return c;
}

void kl_svg_add(kl_svg_t *p, const char *name, kl_svg_kind kind,
                const double *x, const double *y, size_t n)
{
    s_series_t *s = s_push(p, name);
    s->kind = kind;
    s->x = s_copy(x, n);
    s->y = s_copy(y, n);
    s->n = n;
}

void kl_svg_add_bars(kl_svg_t *p, const char *name, const double *edges,
                     const double *counts, size_t n)
{
    s_series_t *s = s_push(p, name);
    s->bars = true;
    s->x = s_copy(edges, n + 1);
    s->y = s_copy(counts, n);
    s->n = n;
}

void kl_svg_note(kl_svg_t *p, const char *text)
{
    if (p->nnotes < MAX_NOTES)
        p->notes[p->nnotes++] = kl_xstrdup(text);
}

size_t kl_svg_nseries(const kl_svg_t *p)
{
    return p->nseries;
}

/* 1, 2 or 5 times a power of ten, the smallest not below x. */
static double s_nice_step(double x)
{
    double p = pow(10, floor(log10(x)));
    double m = x / p;
    if (m <= 1.0 + 1e-9)
        return p;
    if (m <= 2.0 + 1e-9)
        return 2 * p;
    if (m <= 5.0 + 1e-9)
        return 5 * p;
    return 10 * p;
}

static int s_log_ticks(double *lo, double *hi, int max_ticks, double *ticks)
{
    int e0 = (int)floor(log10(*lo) + 1e-9), e1 = (int)ceil(log10(*hi) - 1e-9);
    if (e1 <= e0)
        e1 = e0 + 1;
    int every = 1;
    while ((e1 - e0) / every + 1 > max_ticks)
        every++;
    *lo = pow(10, e0);
    *hi = pow(10, e1);
    int n = 0;
    if (e1 - e0 <= 1 && max_ticks >= 4) {
        static const double mult[] = {1, 2, 5};
        for (int e = e0; e <= e1 && n < max_ticks; e++)
            for (int k = 0; k < 3 && n < max_ticks; k++)
                if (e < e1 || k == 0)
                    ticks[n++] = mult[k] * pow(10, e);
        return n;
    }
    for (int e = e0; e <= e1 && n < max_ticks; e += every)
        ticks[n++] = pow(10, e);
    return n;
}

int kl_svg_ticks(double *lo, double *hi, bool log_scale, int max_ticks,
                 double *ticks)
{
    if (max_ticks < 2)
        max_ticks = 2;
    if (!isfinite(*lo) || !isfinite(*hi) || *hi < *lo)
        *lo = *hi = log_scale ? 1 : 0;
    if (log_scale) {
        if (*lo <= 0)
            *lo = *hi > 0 ? *hi / 10 : 1;
        if (*hi <= 0)
            *hi = *lo;
        return s_log_ticks(lo, hi, max_ticks, ticks);
    }
    if (*hi == *lo) {
        double d = *lo == 0 ? 1 : fabs(*lo) * 0.1;
        *lo -= d;
        *hi += d;
    }
    double step = s_nice_step((*hi - *lo) / (max_ticks - 1));
    double a = floor(*lo / step + 1e-9), z = ceil(*hi / step - 1e-9);
    while (z - a + 1 > max_ticks) {
        step = s_nice_step(step * 1.01);
        a = floor(*lo / step + 1e-9);
        z = ceil(*hi / step - 1e-9);
    }
    *lo = a * step;
    *hi = z * step;
    int n = 0;
    for (double k = a; k <= z + 1e-9 && n < max_ticks; k++) {
        double v = k * step;
        ticks[n++] = fabs(v) < step * 1e-9 ? 0 : v;
    }
    return n;
}

/* ---- rendering --------------------------------------------------------- */

typedef struct {
    double x0, x1, y0, y1; /* data range */
    double px, py, pw, ph; /* plot area in pixels */
    bool logx, logy;
} s_frame_t;

static bool s_ok(double v, bool log)
{
    return isfinite(v) && (!log || v > 0);
}

static double s_mapx(const s_frame_t *f, double v)
{
    double t = f->logx
                   ? (log10(v) - log10(f->x0)) / (log10(f->x1) - log10(f->x0))
                   : (v - f->x0) / (f->x1 - f->x0);
    return f->px + t * f->pw;
}

static double s_mapy(const s_frame_t *f, double v)
{
    double t = f->logy
                   ? (log10(v) - log10(f->y0)) / (log10(f->y1) - log10(f->y0))
                   : (v - f->y0) / (f->y1 - f->y0);
    return f->py + f->ph - t * f->ph;
}

/* Data range over every drawable point; false when there is none. */
static bool s_range(const kl_svg_t *p, s_frame_t *f)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (size_t i = 0; i < p->nseries; i++) {
        const s_series_t *s = &p->series[i];
        size_t nx = s->bars ? s->n + 1 : s->n;
        for (size_t k = 0; k < nx; k++)
            if (s_ok(s->x[k], f->logx) && (s->bars || s_ok(s->y[k], f->logy))) {
                x0 = fmin(x0, s->x[k]);
                x1 = fmax(x1, s->x[k]);
            }
        for (size_t k = 0; k < s->n; k++)
            if (s_ok(s->y[k], f->logy)) {
                y0 = fmin(y0, s->y[k]);
                y1 = fmax(y1, s->y[k]);
            }
        if (s->bars && !f->logy)
            y0 = fmin(y0, 0);
    }
    if (!(x0 <= x1) || !(y0 <= y1))
        return false;
    if ((p->flags & KL_SVG_YZERO) && !f->logy)
        y0 = fmin(y0, 0);
    if ((p->flags & KL_SVG_XZERO) && !f->logx)
        x0 = fmin(x0, 0);
    f->x0 = x0;
    f->x1 = x1;
    f->y0 = y0;
    f->y1 = y1;
    return true;
}

static void s_fmt_tick(char *buf, size_t n, double v)
{
    double a = fabs(v);
    if (a != 0 && (a >= 1e5 || a < 1e-3))
        snprintf(buf, n, "%.0e", v);
    else
        snprintf(buf, n, "%.6g", v);
}

static void s_text(kl_buf_t *b, double x, double y, const char *anchor,
                   const char *extra, const char *text)
{
    kl_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\"%s>", x, y,
                  anchor, extra ? extra : "");
    kl_buf_put_xml(b, text);
    kl_buf_puts(b, "</text>\n");
}

static void s_axes(const kl_svg_t *p, s_frame_t *f, kl_buf_t *b)
{
    double xt[MAX_TICKS], yt[MAX_TICKS];
    int nx = kl_svg_ticks(&f->x0, &f->x1, f->logx, 7, xt);
    int ny = kl_svg_ticks(&f->y0, &f->y1, f->logy, 7, yt);
    char lab[32];
    kl_buf_printf(b,
                  "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                  "fill=\"none\" stroke=\"#444\"/>\n",
                  f->px, f->py, f->pw, f->ph);
    for (int i = 0; i < nx; i++) {
        double x = s_mapx(f, xt[i]);
        kl_buf_printf(b,
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                      "stroke=\"#ddd\"/>\n",
                      x, f->py, x, f->py + f->ph);
        s_fmt_tick(lab, sizeof lab, xt[i]);
        s_text(b, x, f->py + f->ph + 14, "middle", NULL, lab);
    }
    for (int i = 0; i < ny; i++) {
        double y = s_mapy(f, yt[i]);
        kl_buf_printf(b,
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                      "stroke=\"#ddd\"/>\n",
                      f->px, y, f->px + f->pw, y);
        s_fmt_tick(lab, sizeof lab, yt[i]);
        s_text(b, f->px - 4, y + 4, "end", NULL, lab);
    }
    s_text(b, f->px + f->pw / 2, f->py + f->ph + 30, "middle", NULL, p->xlabel);
    char rot[96];
    double ly = f->py + f->ph / 2;
    snprintf(rot, sizeof rot, " transform=\"rotate(-90 %.1f %.1f)\"",
             f->px - 48, ly);
    s_text(b, f->px - 48, ly, "middle", rot, p->ylabel);
}

static void s_draw_bars(const s_series_t *s, const s_frame_t *f,
                        const char *colour, kl_buf_t *b)
{
    double base = f->logy ? f->y0 : fmax(f->y0, 0);
    for (size_t k = 0; k < s->n; k++) {
        if (!s_ok(s->x[k], f->logx) || !s_ok(s->x[k + 1], f->logx) ||
            !s_ok(s->y[k], f->logy) || s->y[k] <= base)
            continue;
        double xa = s_mapx(f, s->x[k]), xb = s_mapx(f, s->x[k + 1]);
        double yt = s_mapy(f, s->y[k]), yb = s_mapy(f, base);
        kl_buf_printf(b,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                      "height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.7\" "
                      "stroke=\"%s\"/>\n",
                      xa, yt, fmax(xb - xa, 0.5), yb - yt, colour, colour);
    }
}

/* A line or step curve as one polyline. Points that would not move the
 * pen by a tenth of a pixel are left out, and a step curve only gets
 * points where its value changes (and its last one), so that thousands of
 * trials make a small drawing. */
static void s_draw_line(const s_series_t *s, const s_frame_t *f,
                        const char *colour, kl_buf_t *b)
{
    size_t npts = 0;
    double px = 0, py = 0, lx = 0;
    bool pending = false;
    for (size_t k = 0; k < s->n; k++) {
        if (!s_ok(s->x[k], f->logx) || !s_ok(s->y[k], f->logy))
            continue;
        double x = s_mapx(f, s->x[k]), y = s_mapy(f, s->y[k]);
        if (npts == 0) {
            kl_buf_printf(b,
                          "<polyline fill=\"none\" stroke=\"%s\" "
                          "stroke-width=\"2\" points=\"%.1f,%.1f ",
                          colour, x, y);
        } else if (fabs(y - py) < 0.1 &&
                   (s->kind == KL_SVG_STEP || fabs(x - px) < 0.1)) {
            lx = x;
            pending = s->kind == KL_SVG_STEP;
            continue;
        } else if (s->kind == KL_SVG_STEP) {
            kl_buf_printf(b, "%.1f,%.1f %.1f,%.1f ", x, py, x, y);
        } else {
            kl_buf_printf(b, "%.1f,%.1f ", x, y);
        }
        npts++;
        px = x;
        py = y;
        pending = false;
    }
    if (pending) {
        kl_buf_printf(b, "%.1f,%.1f ", lx, py);
        npts++;
    }
    if (npts)
        kl_buf_puts(b, "\"/>\n");
    if (npts == 1) /* a line of one point would not show */
        kl_buf_printf(b,
                      "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" "
                      "fill=\"%s\"/>\n",
                      px, py, colour);
}

static void s_draw_series(const s_series_t *s, const s_frame_t *f,
                          const char *colour, kl_buf_t *b)
{
    if (s->bars) {
        s_draw_bars(s, f, colour, b);
        return;
    }
    if (s->kind != KL_SVG_POINTS) {
        s_draw_line(s, f, colour, b);
        return;
    }
    for (size_t k = 0; k < s->n; k++)
        if (s_ok(s->x[k], f->logx) && s_ok(s->y[k], f->logy))
            kl_buf_printf(b,
                          "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" "
                          "fill=\"%s\"/>\n",
                          s_mapx(f, s->x[k]), s_mapy(f, s->y[k]), colour);
}

static void s_legend(const kl_svg_t *p, const s_frame_t *f, kl_buf_t *b)
{
    int row = 0;
    for (size_t i = 0; i < p->nseries; i++) {
        if (!p->series[i].name)
            continue;
        double y = f->py + 8 + 16 * row++;
        double x = f->px + f->pw - 150;
        kl_buf_printf(b,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"10\" "
                      "fill=\"%s\"/>\n",
                      x, y, s_palette[i % NPALETTE]);
        s_text(b, x + 16, y + 9, "start", NULL, p->series[i].name);
    }
}

void kl_svg_render_at(const kl_svg_t *p, kl_buf_t *b, int x, int y, int width,
                      int height)
{
    s_frame_t f = {.logx = p->flags & KL_SVG_LOGX,
                   .logy = p->flags & KL_SVG_LOGY};
    double top = 28 + 14 * p->nnotes;
    f.px = 64;
    f.py = top;
    f.pw = fmax(width - f.px - 16, 40);
    f.ph = fmax(height - top - 40, 40);
    kl_buf_printf(
        b,
        "<g transform=\"translate(%d,%d)\" font-family=\"sans-serif\" "
        "font-size=\"11\">\n",
        x, y);
    kl_buf_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n",
                  width, height);
    s_text(b, width / 2.0, 18, "middle",
           " font-size=\"14\" font-weight=\"bold\"", p->title);
    for (int i = 0; i < p->nnotes; i++)
        s_text(b, width / 2.0, 32 + 14 * i, "middle", " fill=\"#666\"",
               p->notes[i]);
    bool any = s_range(p, &f);
    if (!any) {
        f.x0 = f.logx ? 1 : 0;
        f.x1 = f.logx ? 10 : 1;
        f.y0 = f.logy ? 1 : 0;
        f.y1 = f.logy ? 10 : 1;
    }
    s_axes(p, &f, b);
    if (!any)
        s_text(b, f.px + f.pw / 2, f.py + f.ph / 2, "middle",
               " fill=\"#999\" font-size=\"16\"", "no data");
    for (size_t i = 0; any && i < p->nseries; i++)
        s_draw_series(&p->series[i], &f, s_palette[i % NPALETTE], b);
    s_legend(p, &f, b);
    kl_buf_puts(b, "</g>\n");
}

static void s_open(kl_buf_t *b, int w, int h, const char *id)
{
    kl_buf_printf(b,
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
                  "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\"",
                  w, h, w, h);
    if (id) {
        kl_buf_puts(b, " id=\"");
        kl_buf_put_xml(b, id);
        kl_buf_puts(b, "\"");
    }
    kl_buf_puts(b, ">\n");
}

static int s_clamp(int v)
{
    return v < 120 ? 120 : v > 4000 ? 4000 : v;
}

char *kl_svg_render(const kl_svg_t *p, int width, int height)
{
    kl_buf_t b = {0};
    width = s_clamp(width);
    height = s_clamp(height);
    s_open(&b, width, height, NULL);
    kl_svg_render_at(p, &b, 0, 0, width, height);
    kl_buf_puts(&b, "</svg>\n");
    return kl_buf_take(&b);
}

char *kl_svg_grid(const kl_svg_t *const *plots, size_t n, int cols, int cell_w,
                  int cell_h, const char *id)
{
    kl_buf_t b = {0};
    if (cols < 1)
        cols = 1;
    cell_w = s_clamp(cell_w);
    cell_h = s_clamp(cell_h);
    size_t rows = n ? (n + (size_t)cols - 1) / (size_t)cols : 1;
    int w = cell_w * (n < (size_t)cols ? (int)(n ? n : 1) : cols);
    s_open(&b, w, cell_h * (int)rows, id);
    for (size_t i = 0; i < n; i++)
        kl_svg_render_at(plots[i], &b, cell_w * (int)(i % (size_t)cols),
                         cell_h * (int)(i / (size_t)cols), cell_w, cell_h);
    kl_buf_puts(&b, "</svg>\n");
    return kl_buf_take(&b);
}
