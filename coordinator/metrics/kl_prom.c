/* kl_prom.c - Prometheus text and status page pieces (kl_prom.h). */
#include "kl_prom.h"

#include <math.h>

void kl_prom_label(kl_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            kl_buf_puts(b, "\\\\");
        else if (*v == '"')
            kl_buf_puts(b, "\\\"");
        else if (*v == '\n')
            kl_buf_puts(b, "\\n");
        else
            kl_buf_append(b, v, 1);
    }
}

void kl_prom_value(kl_buf_t *b, double v)
{
    if (isnan(v))
        kl_buf_puts(b, "NaN");
    else if (isinf(v))
        kl_buf_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        kl_buf_printf(b, "%.0f", v);
    else
        kl_buf_printf(b, "%.17g", v);
}

void kl_prom_family(kl_buf_t *b, const char *name, const char *type,
                    const char *help)
{
    kl_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void kl_prom_plain(kl_buf_t *b, const char *name, double v)
{
    kl_buf_printf(b, "%s ", name);
    kl_prom_value(b, v);
    kl_buf_puts(b, "\n");
}

void kl_prom_metric(kl_buf_t *b, const char *name, const char *type,
                    const char *help, double v)
{
    kl_prom_family(b, name, type, help);
    kl_prom_plain(b, name, v);
}

void kl_prom_sample(kl_buf_t *b, const char *name, const char *const *labels,
                    double v)
{
    kl_buf_puts(b, name);
    for (size_t i = 0; labels && labels[i]; i += 2) {
        kl_buf_printf(b, "%s%s=\"", i ? "," : "{", labels[i]);
        kl_prom_label(b, labels[i + 1] ? labels[i + 1] : "");
        kl_buf_puts(b, "\"");
    }
    kl_buf_puts(b, labels && labels[0] ? "} " : " ");
    kl_prom_value(b, v);
    kl_buf_puts(b, "\n");
}

void kl_prom_html_begin(kl_buf_t *b, const char *title)
{
    kl_buf_puts(b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n"
                   "<meta http-equiv=\"refresh\" content=\"2\">\n<title>");
    kl_buf_put_xml(b, title);
    kl_buf_puts(b,
                "</title>\n<style>body{font-family:sans-serif;margin:1em}"
                "table{border-collapse:collapse;margin-bottom:1em}"
                "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
                "th{background:#eee}td.l{text-align:left}</style>\n"
                "</head><body>\n<h1>");
    kl_buf_put_xml(b, title);
    kl_buf_puts(b, "</h1>\n");
}
