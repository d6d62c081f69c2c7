#include "kl_costmodel.h"
#include "kl_err.h"
#include "kl_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xgboost/c_api.h>

struct kl_costmodel_s {
    kl_costmodel_cfg_t cfg;
    float *x;        /* rows x nfeatures */
    float *y;        /* scores */
    uint32_t *group; /* group of each row */
    size_t rows, cap;
    size_t trained_rows;
    BoosterHandle booster;
};

void kl_costmodel_cfg_default(kl_costmodel_cfg_t *cfg, int nfeatures)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->nfeatures = nfeatures;
    cfg->rounds = 64;
    cfg->max_depth = 6;
    cfg->eta = 0.2;
    cfg->min_rows = 64;
    cfg->retrain_growth = 0.2;
    cfg->nthreads = 1;
}

int kl_costmodel_new(kl_costmodel_t **out, const kl_costmodel_cfg_t *cfg,
                     char *err)
{
    if (!cfg || cfg->nfeatures <= 0)
        return kl_seterr(err, KL_ERR_INVAL,
                         "cost model: nfeatures must be > 0");
    if (cfg->rounds <= 0 || cfg->max_depth <= 0 || !(cfg->eta > 0))
        return kl_seterr(err, KL_ERR_INVAL,
                         "cost model: rounds, max_depth and eta must be > 0");
    kl_costmodel_t *self = kl_xcalloc(1, sizeof *self);
    self->cfg = *cfg;
    *out = self;
    return KL_OK;
}

void kl_costmodel_destroy(kl_costmodel_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kl_costmodel_t *self = *self_p;
    if (self->booster)
        XGBoosterFree(self->booster);
    free(self->x);
    free(self->y);
    free(self->group);
    free(self);
    *self_p = NULL;
}

void kl_costmodel_add(kl_costmodel_t *self, const float *features, double score,
                      uint32_t group)
{
    size_t nf = (size_t)self->cfg.nfeatures;
    if (self->rows == self->cap) {
        self->cap = self->cap ? self->cap * 2 : 256;
        self->x = kl_xrealloc(self->x, self->cap * nf * sizeof(float));
        self->y = kl_xrealloc(self->y, self->cap * sizeof(float));
        self->group = kl_xrealloc(self->group, self->cap * sizeof(uint32_t));
    }
    float *row = self->x + self->rows * nf;
    for (size_t i = 0; i < nf; i++)
        row[i] = isfinite(features[i]) ? features[i] : NAN;
    self->y[self->rows] = isfinite(score) ? (float)score : 0.0f;
    self->group[self->rows] = group;
    self->rows++;
}

size_t kl_costmodel_rows(const kl_costmodel_t *self)
{
    return self->rows;
}

bool kl_costmodel_trained(const kl_costmodel_t *self)
{
    return self->booster != NULL;
}

bool kl_costmodel_wants_training(const kl_costmodel_t *self)
{
    if (self->rows < (size_t)self->cfg.min_rows)
        return false;
    if (!self->booster)
        return true;
    return (double)self->rows >=
           (double)self->trained_rows * (1.0 + self->cfg.retrain_growth);
}

static int s_xgb_err(char *err, const char *what)
{
    return kl_seterr(err, KL_ERR_INTERNAL, "cost model: %s: %s", what,
                     XGBGetLastError());
}

/* Ranking needs the rows of a group to be contiguous: order rows by group
 * (stable) and count group sizes. */
static void s_sorted_order(const kl_costmodel_t *self, size_t *order,
                           unsigned **sizes, size_t *ngroups)
{
    for (size_t i = 0; i < self->rows; i++)
        order[i] = i;
    /* Insertion sort by group keeps equal groups in arrival order; group
     * counts are small, and this runs once per training. */
    for (size_t i = 1; i < self->rows; i++) {
        size_t v = order[i], j = i;
        while (j > 0 && self->group[order[j - 1]] > self->group[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    *sizes = kl_xcalloc(self->rows, sizeof(unsigned));
    *ngroups = 0;
    for (size_t i = 0; i < self->rows; i++) {
        if (i == 0 || self->group[order[i]] != self->group[order[i - 1]])
            (*ngroups)++;
        (*sizes)[*ngroups - 1]++;
    }
}

static int s_set(BoosterHandle b, const char *k, const char *v, char *err)
{
    if (XGBoosterSetParam(b, k, v) != 0)
        return s_xgb_err(err, k);
    return KL_OK;
}

static int s_configure(kl_costmodel_t *self, BoosterHandle b, char *err)
{
    char buf[64];
    int rc = s_set(b, "objective", "rank:pairwise", err);
    snprintf(buf, sizeof buf, "%d", self->cfg.max_depth);
    if (!rc)
        rc = s_set(b, "max_depth", buf, err);
    snprintf(buf, sizeof buf, "%g", self->cfg.eta);
    if (!rc)
        rc = s_set(b, "eta", buf, err);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)self->cfg.seed);
    if (!rc)
        rc = s_set(b, "seed", buf, err);
    snprintf(buf, sizeof buf, "%d", self->cfg.nthreads);
    if (!rc)
        rc = s_set(b, "nthread", buf, err);
    if (!rc)
        rc = s_set(b, "verbosity", "0", err);
    if (!rc)
        rc = s_set(b, "min_child_weight", "1", err);
    return rc;
}

int kl_costmodel_train(kl_costmodel_t *self, char *err)
{
    if (self->rows < 2)
        return kl_seterr(err, KL_ERR_INVAL,
                         "cost model: %zu rows, need at least 2", self->rows);
    size_t nf = (size_t)self->cfg.nfeatures;
    size_t *order = kl_xmalloc(self->rows * sizeof *order);
    unsigned *sizes = NULL;
    size_t ngroups = 0;
    s_sorted_order(self, order, &sizes, &ngroups);
    float *x = kl_xmalloc(self->rows * nf * sizeof(float));
    float *y = kl_xmalloc(self->rows * sizeof(float));
    for (size_t i = 0; i < self->rows; i++) {
        memcpy(x + i * nf, self->x + order[i] * nf, nf * sizeof(float));
        y[i] = self->y[order[i]];
    }
    DMatrixHandle dm = NULL;
    BoosterHandle b = NULL;
    int rc = KL_OK;
    if (XGDMatrixCreateFromMat(x, self->rows, nf, NAN, &dm) != 0) {
        rc = s_xgb_err(err, "matrix");
        goto done;
    }
    if (XGDMatrixSetFloatInfo(dm, "label", y, self->rows) != 0 ||
        XGDMatrixSetUIntInfo(dm, "group", sizes, ngroups) != 0) {
        rc = s_xgb_err(err, "labels");
        goto done;
    }
    if (XGBoosterCreate(&dm, 1, &b) != 0) {
        rc = s_xgb_err(err, "create");
        goto done;
    }
    if ((rc = s_configure(self, b, err)) != KL_OK)
        goto done;
    for (int it = 0; it < self->cfg.rounds; it++)
        if (XGBoosterUpdateOneIter(b, it, dm) != 0) {
            rc = s_xgb_err(err, "training");
            goto done;
        }
    if (self->booster)
        XGBoosterFree(self->booster);
    self->booster = b;
    b = NULL;
    self->trained_rows = self->rows;
done:
    if (b)
        XGBoosterFree(b);
    if (dm)
        XGDMatrixFree(dm);
    free(x);
    free(y);
    free(order);
    free(sizes);
    return rc;
}

int kl_costmodel_predict(kl_costmodel_t *self, const float *features, size_t n,
                         float *out, char *err)
{
    if (!self->booster)
        return kl_seterr(err, KL_ERR_INVAL, "cost model: not trained yet");
    if (n == 0)
        return KL_OK;
    DMatrixHandle dm = NULL;
    if (XGDMatrixCreateFromMat(features, n, (bst_ulong)self->cfg.nfeatures, NAN,
                               &dm) != 0)
        return s_xgb_err(err, "matrix");
    bst_ulong len = 0;
    const float *res = NULL;
    int rc = KL_OK;
    if (XGBoosterPredict(self->booster, dm, 0, 0, 0, &len, &res) != 0)
        rc = s_xgb_err(err, "predict");
    else if (len != n)
        rc = kl_seterr(err, KL_ERR_INTERNAL,
                       "cost model: %llu predictions for %zu rows",
                       (unsigned long long)len, n);
    else
        memcpy(out, res, n * sizeof(float));
    XGDMatrixFree(dm);
    return rc;
}

static int s_sign(double v)
{
    return (v > 0) - (v < 0);
}

double kl_kendall_tau(const double *a, const double *b, size_t n)
{
    /* O(n^2) tau-b: the data sets compared here have at most a few
     * thousand rows. */
    double conc = 0, disc = 0, ties_a = 0, ties_b = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            int sa = s_sign(a[i] - a[j]), sb = s_sign(b[i] - b[j]);
            if (sa == 0 && sb == 0)
                continue;
            if (sa == 0)
                ties_a++;
            else if (sb == 0)
                ties_b++;
            else if (sa == sb)
                conc++;
            else
                disc++;
        }
    double denom = sqrt((conc + disc + ties_a) * (conc + disc + ties_b));
    return denom > 0 ? (conc - disc) / denom : 0.0;
}
