/* kl_costmodel.h - the learned cost model of the evolutionary search: a
 * gradient-boosted ranking model (XGBoost, objective rank:pairwise) over
 * fixed-length feature vectors of candidates.
 *
 * The model learns to order candidates of one workload: each training row
 * is a feature vector, a score (higher is better; the search uses the
 * normalized throughput best_latency / latency, and 0 for a failed
 * candidate) and a group (the workload), and pairs are formed only inside a
 * group. Predictions are comparable inside one workload only.
 *
 * Typical use: add rows as results arrive; kl_costmodel_wants_training()
 * says when the data grew enough (by default 20 % since the last training
 * and at least min_rows rows); train; predict batches of candidates.
 */
#ifndef KL_COSTMODEL_H
#define KL_COSTMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int nfeatures;         /* length of every feature vector (> 0) */
    int rounds;            /* boosting rounds per training [default 64] */
    int max_depth;         /* [default 6] */
    double eta;            /* learning rate [default 0.2] */
    int min_rows;          /* rows before the first training [default 64] */
    double retrain_growth; /* retrain when rows grew by this [default 0.2] */
    uint64_t seed;         /* [default 0] */
    int nthreads;          /* [default 1] */
} kl_costmodel_cfg_t;

typedef struct kl_costmodel_s kl_costmodel_t;

/* Fills cfg with the defaults above for nfeatures features. */
void kl_costmodel_cfg_default(kl_costmodel_cfg_t *cfg, int nfeatures);

/* Creates an empty model. KL_ERR_INVAL for nfeatures <= 0. */
int kl_costmodel_new(kl_costmodel_t **out, const kl_costmodel_cfg_t *cfg,
                     char *err);
void kl_costmodel_destroy(kl_costmodel_t **self_p);

/* Adds one training row (features copied). A non-finite feature is stored
 * as missing. */
void kl_costmodel_add(kl_costmodel_t *self, const float *features, double score,
                      uint32_t group);
size_t kl_costmodel_rows(const kl_costmodel_t *self);

/* True when there are at least min_rows rows and the data grew by
 * retrain_growth since the last training (or it was never trained). */
bool kl_costmodel_wants_training(const kl_costmodel_t *self);
bool kl_costmodel_trained(const kl_costmodel_t *self);

/* Trains a fresh booster on every row added so far. Returns KL_ERR_INVAL
 * with a message when there are fewer than 2 rows, or XGBoost's own message
 * (KL_ERR_INTERNAL) when it fails. */
int kl_costmodel_train(kl_costmodel_t *self, char *err);

/* Scores n candidates (n x nfeatures floats, row-major) into out[n];
 * higher means predicted faster. KL_ERR_INVAL when not trained. */
int kl_costmodel_predict(kl_costmodel_t *self, const float *features, size_t n,
                         float *out, char *err);

/* Kendall's tau-b between two score vectors (ties handled), in [-1, 1]. */
double kl_kendall_tau(const double *a, const double *b, size_t n);

#endif
