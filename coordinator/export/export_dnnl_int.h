/* export_dnnl_int.h - what the two files of the oneDNN baseline share
 * (export_dnnl.c: the net, its values, memories and steps, and the API of
 * kl_export.h; export_dnnl_layers.c: one layer's primitive). Built only
 * with libdnnl (KL_HAVE_DNNL). */
#ifndef KL_EXPORT_DNNL_INT_H
#define KL_EXPORT_DNNL_INT_H

#include <dnnl.h>

#include "export_int.h"
#include "kl_export.h"

#define KL_EXPORT__DNNL_MAX_ARGS 8

typedef struct {
    dnnl_primitive_t p;
    int nargs;
    dnnl_exec_arg_t args[KL_EXPORT__DNNL_MAX_ARGS];
    const char *name; /* the layer, or the value a reorder converts */
    const char *why;  /* a reorder's reason ("input", ...); NULL: a layer */
    const char *res;  /* a residual sum: "in place", "copied", "reordered" */
    char kind[32], impl[64], src[32], dst[32];
} kl_export__dnnl_step_t;

/* A node's value: its memory in the layout its producer chose, and the
 * last copy of it reordered into another layout (reused by later
 * readers that want that one). */
typedef struct {
    dnnl_memory_t m;
    dnnl_memory_desc_t md;
    dnnl_memory_t alt;
    dnnl_memory_desc_t alt_md;
} kl_export__dnnl_val_t;

struct kl_dnnl_net_s {
    kl_mgraph_t g;
    char *text; /* the graph text (transpose's perm=) */
    dnnl_engine_t eng;
    dnnl_stream_t st;
    kl_export__dnnl_val_t *val; /* per node */
    float *const *params;       /* kiln_model parameter order */
    int nparams, np;            /* given, used so far */
    kl_export__dnnl_step_t *steps;
    int nsteps;
    dnnl_memory_t *mems; /* every memory object, to free */
    int nmems;
    dnnl_memory_t out; /* plain, the caller's buffer at each run */
    long long numel;
    kl_buf_t why; /* layers oneDNN cannot express */
};

/* The node whose value node i is: its owner when fused. */
int kl_export__dnnl_vnode(const kl_mgraph_t *g, int i);

/* A plain (row-major) f32 descriptor of nd dims, and one that lets the
 * primitive choose its layout (dnnl_format_tag_any). */
dnnl_memory_desc_t kl_export__dnnl_md(int nd, const int64_t *dims);
dnnl_memory_desc_t kl_export__dnnl_any(int nd, const int64_t *dims);

/* A memory object of layout md over handle (DNNL_MEMORY_ALLOCATE: its
 * own buffer), freed with the net; NULL when oneDNN refuses it. */
dnnl_memory_t kl_export__dnnl_mem(kl_dnnl_net_t *n,
                                  const dnnl_memory_desc_t *md, void *handle);

/* The next of the caller's parameters (kiln_model order), NULL when they
 * are used up. */
float *kl_export__dnnl_param(kl_dnnl_net_t *n);

/* Adds a step running the primitive of pd (which stays the caller's),
 * noting its kind, implementation and layouts; NULL when it cannot be
 * created. */
kl_export__dnnl_step_t *kl_export__dnnl_add(kl_dnnl_net_t *n,
                                            const_dnnl_primitive_desc_t pd,
                                            const char *name, const char *why);

/* Appends argument (what, m) to step s (at most KL_EXPORT__DNNL_MAX_ARGS). */
void kl_export__dnnl_arg(kl_export__dnnl_step_t *s, int what, dnnl_memory_t m);

/* A reorder step from `from` (layout fmd) into `to` (layout tmd; NULL:
 * a new buffer), run at every run; returns `to`, NULL on failure. */
dnnl_memory_t kl_export__dnnl_reorder(kl_dnnl_net_t *n, dnnl_memory_t from,
                                      const dnnl_memory_desc_t *fmd,
                                      const dnnl_memory_desc_t *tmd,
                                      dnnl_memory_t to, const char *name,
                                      const char *why);

/* The value of node i in layout `want`: its own memory, or a reorder of
 * it (one per layout a reader wants, kept for the next reader). */
dnnl_memory_t kl_export__dnnl_in(kl_dnnl_net_t *n, int i,
                                 const dnnl_memory_desc_t *want);

/* Node i's output: a new buffer in layout md. */
dnnl_memory_t kl_export__dnnl_out(kl_dnnl_net_t *n, int i,
                                  const dnnl_memory_desc_t *md);

/* Adds the steps of node i (export_dnnl_layers.c): nothing for a fused
 * node, a view for flatten and reshape, else its primitive. False when
 * oneDNN cannot express it as built here. */
bool kl_export__dnnl_layer(kl_dnnl_net_t *n, int i);

#endif
