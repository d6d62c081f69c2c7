/* kl_prom.h - the pieces of a Prometheus text exposition (format 0.0.4)
 * and of a status page, shared by the renderings of kiln tune's metrics
 * (kl_metrics_render.c) and kiln serve's (kl_metrics_serve.c). */
#ifndef KL_PROM_H
#define KL_PROM_H

#include "kl_util.h"

/* A label value: backslash, double quote and newline escaped. */
void kl_prom_label(kl_buf_t *b, const char *v);
/* A sample value: integers without a fraction, NaN, +Inf, -Inf. */
void kl_prom_value(kl_buf_t *b, double v);
/* The HELP and TYPE lines of a family. */
void kl_prom_family(kl_buf_t *b, const char *name, const char *type,
                    const char *help);
/* One sample without labels. */
void kl_prom_plain(kl_buf_t *b, const char *name, double v);
/* A family of one sample without labels: HELP, TYPE and the sample. */
void kl_prom_metric(kl_buf_t *b, const char *name, const char *type,
                    const char *help, double v);
/* One sample with labels: labels holds name, value, name, value, ...,
 * NULL; the values are escaped. */
void kl_prom_sample(kl_buf_t *b, const char *name, const char *const *labels,
                    double v);

/* The start of a status page that reloads itself every 2 s, up to and
 * with <h1>title</h1> (title escaped). */
void kl_prom_html_begin(kl_buf_t *b, const char *title);

#endif
