/* export_dnnl.c - oneDNN baseline of kiln run (placeholder while written) */
#include "kl_export.h"

void kl_export_dnnl_report(const char *model, int repeat, uint64_t seed,
                           FILE *f)
{
    (void)model;
    (void)repeat;
    (void)seed;
    fprintf(f, "oneDNN           not measured (this build has no oneDNN "
               "graph)\n");
}
