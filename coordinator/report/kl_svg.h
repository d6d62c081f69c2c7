/* kl_svg.h - small SVG plots for kiln report: axes with round-number
 * ticks, linear or logarithmic scales, polylines, step curves, bars
 * (histograms), a title, notes and a legend.
 *
 * A plot collects series, then renders as a standalone SVG document
 * (kl_svg_render) or as a group placed inside a larger document
 * (kl_svg_render_at, used by kl_svg_grid to put several plots in one
 * SVG). The output is well-formed XML: every text is escaped, and the
 * document carries its own xmlns so that it can be inlined in HTML or
 * written to a file as is. Non-finite points, and points <= 0 on a
 * logarithmic axis, are left out of the drawing (not of the data). A plot
 * without any drawable point renders its axes and "no data".
 */
#ifndef KL_SVG_H
#define KL_SVG_H

#include <stdbool.h>
#include <stddef.h>

#include "kl_util.h"

typedef struct kl_svg_s kl_svg_t;

enum {
    KL_SVG_LOGX = 1 << 0,  /* logarithmic x axis */
    KL_SVG_LOGY = 1 << 1,  /* logarithmic y axis */
    KL_SVG_YZERO = 1 << 2, /* a linear y axis starts at 0 */
    KL_SVG_XZERO = 1 << 3, /* a linear x axis starts at 0 */
};

typedef enum {
    KL_SVG_LINE = 0, /* points joined by straight segments */
    KL_SVG_STEP,     /* a value holds until the next x (best so far) */
    KL_SVG_POINTS,   /* small circles only */
} kl_svg_kind;

/* Creates an empty plot. The strings are copied; title and labels may be
 * NULL. flags is a mix of KL_SVG_*. Never fails (kl_xmalloc). */
kl_svg_t *kl_svg_new(const char *title, const char *xlabel, const char *ylabel,
                     unsigned flags);
void kl_svg_destroy(kl_svg_t **self_p);

/* Adds a series of n points (x[i], y[i]), copied. name (may be NULL: not
 * in the legend) is copied. Series get the palette's colours in order. */
void kl_svg_add(kl_svg_t *p, const char *name, kl_svg_kind kind,
                const double *x, const double *y, size_t n);

/* Adds a histogram: n bars, bar i spans [edges[i], edges[i + 1]) with
 * height counts[i] (edges has n + 1 values, increasing). */
void kl_svg_add_bars(kl_svg_t *p, const char *name, const double *edges,
                     const double *counts, size_t n);

/* Adds a line of text shown under the title (e.g. "curve starts when
 * every task has a record"). At most 4 notes are shown. */
void kl_svg_note(kl_svg_t *p, const char *text);

/* Number of series added (bars count as one). */
size_t kl_svg_nseries(const kl_svg_t *p);

/* Renders the plot as a standalone SVG document of width x height pixels
 * (each clamped to [120, 4000]). Returns a heap string (free). */
char *kl_svg_render(const kl_svg_t *p, int width, int height);

/* Appends the plot as a <g> translated to (x, y), of width x height, to b
 * (no <svg> element around it). */
void kl_svg_render_at(const kl_svg_t *p, kl_buf_t *b, int x, int y, int width,
                      int height);

/* One SVG document holding n plots in a grid of `cols` columns of
 * cell_w x cell_h pixels each; id (may be NULL) becomes the svg element's
 * id attribute. Returns a heap string. */
char *kl_svg_grid(const kl_svg_t *const *plots, size_t n, int cols, int cell_w,
                  int cell_h, const char *id);

/* Round-number ticks covering [lo, hi]: on a linear scale steps of 1, 2
 * or 5 times a power of ten, at most max_ticks of them (>= 2); on a log
 * scale (lo > 0) the powers of ten in range, with 2 and 5 times them
 * added when there are fewer than 3. Writes up to max_ticks values to
 * ticks, increasing, and returns how many. *lo and *hi are widened to
 * the outer ticks (linear) or powers of ten (log) so that the data fit. A
 * range with lo == hi is widened around the value. */
int kl_svg_ticks(double *lo, double *hi, bool log_scale, int max_ticks,
                 double *ticks);

#endif
