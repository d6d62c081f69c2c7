/* kl_ir_flop.c - exact FLOP counts.
 *
 * A point of the iteration space performs the body's operations (plus one
 * for the reduction) only when every read of the body is inside its tensor:
 * padding reads are not FLOPs. Only index dimensions that can leave their
 * tensor ("risky" ones) constrain the points; the iterators they mention are
 * joined into groups (union-find), each group's valid points are counted on
 * their own, and the counts multiply across groups. Inside a group all
 * iterators but the longest are enumerated and the longest is solved as an
 * interval, so a 3x3 convolution with padding costs a few hundred steps. */
#include "kl_ir_int.h"

#include "kl_err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Work limit of one group: enumerated points times inner scan steps. */
#define S_WORK_MAX ((int64_t)1 << 26)

typedef struct {
    const kl_affine_t *a;
    int64_t dim;
} s_risk_t;

typedef struct {
    s_risk_t r[KL_IR_MAX_TENSORS * KL_IR_MAX_DIMS * 8];
    int n;
    bool never; /* a constant index is out of range: no valid point */
    bool overflow;
} s_risks_t;

static int64_t s_floordiv(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0)))
        q--;
    return q;
}

static int64_t s_ceildiv(int64_t a, int64_t b)
{
    return -s_floordiv(-a, b);
}

static bool s_const_valid(const kl_affine_t *a, int64_t dim)
{
    int64_t v = a->offset;
    if (a->div > 1) {
        if (v % a->div)
            return false;
        v /= a->div;
    }
    return v >= 0 && v < dim;
}

static void s_collect(const kl_workload_t *w, const kl_expr_t *e, s_risks_t *rs)
{
    if (!e)
        return;
    s_collect(w, e->a, rs);
    s_collect(w, e->b, rs);
    if (e->kind != KL_EX_LOAD)
        return;
    const kl_tensor_t *t = &w->tensors[e->access.tensor];
    for (int d = 0; d < t->ndim; d++) {
        const kl_affine_t *a = &e->access.idx[d];
        __int128 lo, hi;
        kl_ir__affine_range(w, a, &lo, &hi);
        bool varies = lo != hi;
        if (!varies) {
            if (!s_const_valid(a, t->shape[d]))
                rs->never = true;
            continue;
        }
        bool risky = a->div > 1 || lo < 0 || hi >= t->shape[d];
        if (!risky)
            continue;
        if (rs->n == (int)(sizeof(rs->r) / sizeof(rs->r[0]))) {
            rs->overflow = true;
            return;
        }
        rs->r[rs->n].a = a;
        rs->r[rs->n++].dim = t->shape[d];
    }
}

static int s_find(int *parent, int x)
{
    while (parent[x] != x)
        x = parent[x] = parent[parent[x]];
    return x;
}

static int64_t s_gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Inverse of a modulo m (gcd(a, m) = 1, m <= 2^20). */
static int64_t s_inverse(int64_t a, int64_t m)
{
    int64_t r0 = m, r1 = a % m, t0 = 0, t1 = 1;
    while (r1) {
        int64_t q = r0 / r1, t;
        t = r0 - q * r1;
        r0 = r1;
        r1 = t;
        t = t0 - q * t1;
        t0 = t1;
        t1 = t;
    }
    return ((t0 % m) + m) % m;
}

/* How many v in [lo, hi] make b + c*v a multiple of m. */
static int64_t s_count_congruent(int64_t b, int64_t c, int64_t m, int64_t lo,
                                 int64_t hi)
{
    int64_t cm = ((c % m) + m) % m, bm = ((-(b % m)) % m + m) % m;
    int64_t g = s_gcd(cm, m);
    if (bm % g)
        return 0;
    int64_t m2 = m / g;
    if (m2 == 1)
        return hi - lo + 1;
    int64_t v0 = (bm / g) % m2 * s_inverse((cm / g) % m2, m2) % m2;
    int64_t first = lo + (((v0 - lo) % m2) + m2) % m2;
    return first > hi ? 0 : (hi - first) / m2 + 1;
}

/* Valid values of iterator L given the other iterators' values in iv, for
 * the constraints that mention the group: an interval, thinned by one
 * congruence in closed form, or scanned when there are several (-1 when
 * the scan would pass the work limit). */
static int64_t s_count_last(const kl_workload_t *w, const s_risks_t *rs,
                            const int *in_group, int L, const int64_t *iv,
                            int64_t *work)
{
    int64_t lo = 0, hi = w->iters[L].extent - 1;
    const kl_affine_t *cong[sizeof(rs->r) / sizeof(rs->r[0])];
    int ncong = 0;
    for (int i = 0; i < rs->n; i++) {
        const kl_affine_t *a = rs->r[i].a;
        int k0 = -1;
        for (int k = 0; k < w->niters && k0 < 0; k++)
            if (a->coef[k])
                k0 = k;
        if (k0 < 0 || !in_group[k0])
            continue;
        int64_t base = a->offset;
        for (int k = 0; k < w->niters; k++)
            if (k != L)
                base += a->coef[k] * iv[k];
        int64_t c = a->coef[L], div = a->div > 1 ? a->div : 1;
        int64_t top = div * (rs->r[i].dim - 1); /* numerator in [0, top] */
        if (c == 0) {
            if (base < 0 || base > top || base % div)
                return 0;
            continue;
        }
        int64_t a0 = c > 0 ? s_ceildiv(-base, c) : s_ceildiv(top - base, c);
        int64_t a1 = c > 0 ? s_floordiv(top - base, c) : s_floordiv(-base, c);
        lo = a0 > lo ? a0 : lo;
        hi = a1 < hi ? a1 : hi;
        if (div > 1)
            cong[ncong++] = a;
    }
    if (hi < lo)
        return 0;
    if (ncong == 0)
        return hi - lo + 1;
    if (ncong == 1) {
        int64_t b = cong[0]->offset;
        for (int k = 0; k < w->niters; k++)
            if (k != L)
                b += cong[0]->coef[k] * iv[k];
        return s_count_congruent(b, cong[0]->coef[L], cong[0]->div, lo, hi);
    }
    /* Several divisions on L: scan the interval. */
    if (hi - lo + 1 > S_WORK_MAX - *work)
        return -1;
    int64_t n = 0;
    *work += hi - lo + 1;
    for (int64_t v = lo; v <= hi; v++) {
        bool ok = true;
        for (int j = 0; j < ncong && ok; j++) {
            int64_t num = cong[j]->offset + cong[j]->coef[L] * v;
            for (int k = 0; k < w->niters; k++)
                if (k != L)
                    num += cong[j]->coef[k] * iv[k];
            ok = num % cong[j]->div == 0;
        }
        n += ok;
    }
    return n;
}

static int s_count_group(const kl_workload_t *w, const s_risks_t *rs,
                         const int *in_group, double *count, char *err)
{
    int outer[KL_IR_MAX_ITERS], nouter = 0, L = -1;
    double points = 1;
    for (int k = 0; k < w->niters; k++) {
        if (!in_group[k])
            continue;
        if (L < 0 || w->iters[k].extent > w->iters[L].extent)
            L = k;
    }
    for (int k = 0; k < w->niters; k++) {
        if (in_group[k] && k != L) {
            outer[nouter++] = k;
            points *= (double)w->iters[k].extent;
        }
    }
    if (points > (double)S_WORK_MAX)
        return kl_seterr(err, KL_ERR_INVAL,
                         "FLOP count: iterator %s is linked through padded "
                         "indices to %.0f points of other iterators (more "
                         "than %lld)",
                         w->iters[L].name, points, (long long)S_WORK_MAX);
    int64_t iv[KL_IR_MAX_ITERS] = {0}, work = 0;
    double total = 0;
    for (;;) {
        int64_t n = s_count_last(w, rs, in_group, L, iv, &work);
        total += (double)n;
        if (n < 0 || ++work > S_WORK_MAX)
            return kl_seterr(err, KL_ERR_INVAL,
                             "FLOP count: iterator %s needs more than %lld "
                             "steps to count its valid points",
                             w->iters[L].name, (long long)S_WORK_MAX);
        int j = nouter - 1;
        for (; j >= 0; j--) {
            if (++iv[outer[j]] < w->iters[outer[j]].extent)
                break;
            iv[outer[j]] = 0;
        }
        if (j < 0)
            break;
    }
    *count = total;
    return KL_OK;
}

int kl_ir__count_flop(const kl_workload_t *w, double *flop, char *err)
{
    s_risks_t *r = kl_xcalloc(1, sizeof(*r));
    s_collect(w, w->body, r);
    if (r->overflow) {
        free(r);
        return kl_seterr(err, KL_ERR_INVAL,
                         "FLOP count: too many padded index dimensions");
    }
    int parent[KL_IR_MAX_ITERS];
    bool risky[KL_IR_MAX_ITERS] = {false};
    for (int k = 0; k < w->niters; k++)
        parent[k] = k;
    for (int i = 0; i < r->n; i++) {
        int first = -1;
        for (int k = 0; k < w->niters; k++) {
            if (!r->r[i].a->coef[k])
                continue;
            risky[k] = true;
            if (first < 0)
                first = k;
            else
                parent[s_find(parent, k)] = s_find(parent, first);
        }
    }
    double points = r->never ? 0 : 1;
    for (int k = 0; k < w->niters && points > 0; k++) {
        if (!risky[k]) {
            points *= (double)w->iters[k].extent;
            continue;
        }
        if (s_find(parent, k) != k)
            continue;
        int in_group[KL_IR_MAX_ITERS] = {0};
        for (int j = 0; j < w->niters; j++)
            in_group[j] = risky[j] && s_find(parent, j) == k;
        double n = 0;
        int rc = s_count_group(w, r, in_group, &n, err);
        if (rc) {
            free(r);
            return rc;
        }
        points *= n;
    }
    free(r);
    double per = kl_ir__expr_ops(w->body) + (w->reduce != KL_RED_NONE);
    *flop = points * per + (double)w->nepi * (double)kl_tensor_numel(
                                                 &w->tensors[w->ntensors - 1]);
    return KL_OK;
}
