/* gpu_check - the GPU end-to-end check of tests/gpu/run.sh: starts a local
 * fleet with one CUDA kiln-agent, checks its fault handling (out-of-bounds
 * kernel, infinite loop, wrong result, a result wrong only from the third
 * launch on: each recorded with the right status and the agent still
 * alive and measuring), then measures the samples of a
 * `kiln space --emit DIR` matmul design space and prints the best. The
 * reference kernel is kiln's own (kl_codegen_cuda_reference of the
 * manifest's workload), as `kiln tune` sends it.
 *
 * usage: gpu_check --dir DIR [--agent PATH] [--device cuda:0] [--faults]
 *                  [--faults-only] [--repeat N] [--timeout-ms MS]
 *                  [--budget-s S]
 * --faults-only: the fault checks, no samples measured (run.sh tunes with
 * `kiln tune` instead).
 * --budget-s: seconds from the start after which samples not yet started
 * are cancelled (and not counted as trials).
 * Exit: 0 ok, 1 a check failed, 2 usage, 77 no GPU (the agent said 69).
 * The last lines are "key value" pairs for the script:
 *   best_gflops, best_us, best_entry, best_source (file), best_launch
 *   (grid x y z, block x y z, shared bytes), ok, failed, trials,
 *   trials_per_s. */
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_fleet.h"
#include "kl_codegen_cuda.h"
#include "kl_dispatch.h"
#include "kl_err.h"
#include "kl_util.h"

typedef struct {
    kl_dispatch_t *disp;
    kl_fleet_t *fleet;
    const char *target;
    uint8_t key[16];
    Kiln__KernelArg args[3], *argp[3];
    int64_t shapes[3][2];
    int64_t m, n, k;
    double flop;
    char *ref;
    Kiln__Evaluator ev;
    bool simulated;  /* a result came from the KILN_FAKE_GPU_WORKER stand-in */
    double deadline; /* kl_now_s() after which the rest is cancelled; 0 */
} s_job_t;

/* The reference of kla_cuda.h's contract, as kiln tune sends it: kiln's
 * naive CUDA kernel of the manifest's workload (entry "kl_ref"). */
static int s_reference(s_job_t *j, const char *canonical, const char *target,
                       char *err)
{
    kl_workload_t *w = NULL;
    kl_target_t t;
    kl_kernel_t k = {0};
    int rc = kl_workload_from_string(canonical, &w, err);
    if (rc == KL_OK)
        rc = kl_target_parse(target, &t, err);
    if (rc == KL_OK)
        rc = kl_codegen_cuda_reference(w, &t, "kl_ref", &k, err);
    if (rc == KL_OK) {
        j->ref = k.source;
        k.source = NULL;
    }
    kl_kernel_free(&k);
    kl_workload_free(&w);
    return rc;
}

/* A simple correct candidate (one thread per element, 16 x 16 blocks),
 * and its faulty variants. */
static char *s_kernel(const s_job_t *j, const char *name, const char *fault)
{
    return kl_xasprintf(
        "extern \"C\" __global__ void %s(const float *A, const float *B,\n"
        "                                float *C)\n"
        "{\n"
        "    int i = blockIdx.y * 16 + threadIdx.y;\n"
        "    int j = blockIdx.x * 16 + threadIdx.x;\n"
        "    if (i >= %lld || j >= %lld) return;\n"
        "    float s = 0.0f;\n"
        "    for (int k = 0; k < %lld; k++)\n"
        "        s += A[i * %lld + k] * B[k * %lld + j];\n"
        "    %s\n"
        "    C[i * %lld + j] = s;\n"
        "}\n",
        name, (long long)j->m, (long long)j->n, (long long)j->k,
        (long long)j->k, (long long)j->n, fault, (long long)j->n);
}

static int s_manifest(s_job_t *j, const char *dir, json_object **samples,
                      char *err)
{
    char *path = kl_xasprintf("%s/manifest.json", dir);
    json_object *m = json_object_from_file(path);
    free(path);
    if (!m)
        return kl_seterr(err, KL_ERR_IO, "%s/manifest.json: cannot read", dir);
    json_object *a, *s, *key, *flop, *canon, *tg;
    if (!json_object_object_get_ex(m, "args", &a) ||
        !json_object_object_get_ex(m, "canonical", &canon) ||
        !json_object_object_get_ex(m, "target", &tg) ||
        json_object_array_length(a) != 3 ||
        !json_object_object_get_ex(m, "samples", &s) ||
        !json_object_object_get_ex(m, "key", &key) ||
        !json_object_object_get_ex(m, "flop", &flop) ||
        kl_unhex128(json_object_get_string(key), j->key) != KL_OK) {
        json_object_put(m);
        return kl_seterr(err, KL_ERR_INVAL,
                         "%s/manifest.json: not a matmul manifest", dir);
    }
    j->flop = json_object_get_double(flop);
    for (int i = 0; i < 3; i++) {
        json_object *o = json_object_array_get_idx(a, (size_t)i), *sh, *nm;
        json_object_object_get_ex(o, "shape", &sh);
        json_object_object_get_ex(o, "name", &nm);
        if (!sh || json_object_array_length(sh) != 2) {
            json_object_put(m);
            return kl_seterr(err, KL_ERR_INVAL, "argument %d is not 2-D", i);
        }
        kiln__kernel_arg__init(&j->args[i]);
        j->args[i].name = kl_xstrdup(json_object_get_string(nm));
        for (int d = 0; d < 2; d++)
            j->shapes[i][d] =
                json_object_get_int64(json_object_array_get_idx(sh, d));
        j->args[i].n_shape = 2;
        j->args[i].shape = j->shapes[i];
        j->args[i].role =
            i == 2 ? KILN__ARG_ROLE__ROLE_OUTPUT : KILN__ARG_ROLE__ROLE_INPUT;
        j->argp[i] = &j->args[i];
    }
    j->m = j->shapes[0][0];
    j->k = j->shapes[0][1];
    j->n = j->shapes[1][1];
    *samples = json_object_get(s);
    int rc = s_reference(j, json_object_get_string(canon),
                         json_object_get_string(tg), err);
    json_object_put(m);
    return rc;
}

typedef struct {
    uint64_t id;
    char *source, *entry, *file; /* file: space samples only */
    uint32_t grid[3], block[3], shared;
} s_cand_t;

/* Submits n candidates as one batch and waits for their n results;
 * status[i], median[i] (seconds, NAN unless OK) and msg[i] by index. */
static int s_measure(s_job_t *j, s_cand_t *c, size_t n, Kiln__Status *status,
                     double *median, char (*msg)[200], char *err)
{
    Kiln__Candidate *pc = kl_xcalloc(n, sizeof *pc);
    Kiln__Candidate **pp = kl_xcalloc(n, sizeof *pp);
    for (size_t i = 0; i < n; i++) {
        kiln__candidate__init(&pc[i]);
        pc[i].id = i;
        pc[i].source = c[i].source;
        pc[i].entry = c[i].entry;
        pc[i].n_grid = pc[i].n_block = 3;
        pc[i].grid = c[i].grid;
        pc[i].block = c[i].block;
        pc[i].shared_bytes = c[i].shared;
        pp[i] = &pc[i];
        status[i] = KILN__STATUS__STATUS_AGENT_LOST;
        median[i] = NAN;
    }
    kl_dispatch_batch_t b = {.workload_key = j->key,
                             .target = j->target,
                             .args = j->argp,
                             .n_args = 3,
                             .reference_source = j->ref,
                             .reference_entry = "kl_ref",
                             .evaluator = &j->ev,
                             .candidates = pp,
                             .n_candidates = n};
    uint64_t rid;
    int rc = kl_dispatch_submit(j->disp, &b, &rid, err);
    free(pc);
    free(pp);
    bool cancelled = false;
    for (size_t got = 0; rc == KL_OK && got < n;) {
        kl_dispatch_result_t *r = NULL;
        double left = j->deadline - kl_now_s();
        int wait = !j->deadline || cancelled ? 240000
                   : left > 0                ? (int)(left * 1000) + 1
                                             : 0;
        rc = kl_dispatch_recv(j->disp, &r, wait, err);
        if (rc == KL_ERR_TIMEOUT && j->deadline && !cancelled) {
            /* Over budget: what has not started is cancelled, what runs
             * finishes. */
            cancelled = true;
            rc = kl_dispatch_cancel(j->disp, rid, err);
            continue;
        }
        if (rc != KL_OK)
            break;
        size_t i = r->index;
        if (r->request_id == rid && i < n) {
            Kiln__MeasureResult *m = r->result;
            status[i] = m->status;
            if (m->status == KILN__STATUS__STATUS_OK && m->n_samples)
                median[i] = kl_median(m->samples, m->n_samples);
            snprintf(msg[i], 200, "%s", m->error ? m->error : "");
            j->simulated |= m->simulated;
            got++;
        }
        kl_dispatch_result_free(&r);
    }
    return rc;
}

static const char *s_st(Kiln__Status s)
{
    static const char *n[] = {"OK",        "COMPILE_ERROR", "RUNTIME_ERROR",
                              "TIMEOUT",   "WRONG_RESULT",  "AGENT_LOST",
                              "CANCELLED", "INVALID"};
    return (unsigned)s < 8 ? n[s] : "?";
}

static void s_simple(s_job_t *j, s_cand_t *c, uint64_t id, const char *name,
                     const char *fault)
{
    c->id = id;
    c->source = s_kernel(j, name, fault);
    c->entry = kl_xstrdup(name);
    c->grid[0] = (uint32_t)((j->n + 15) / 16);
    c->grid[1] = (uint32_t)((j->m + 15) / 16);
    c->grid[2] = 1;
    c->block[0] = c->block[1] = 16;
    c->block[2] = 1;
    c->shared = 0;
}

/* Out-of-bounds, infinite loop, wrong result, a result that goes wrong
 * from the third launch on (a __device__ launch counter: the first
 * launch is verified, the check after timing must catch it), then a good
 * one: each must come back with its status, and the agent must still be
 * there. */
static int s_faults(s_job_t *j, char *err)
{
    s_cand_t c[5];
    s_simple(j, &c[0], 0, "oob",
             "if (i == 0 && j == 0) C[1ll << 40] = s;"
             " if (i == 1 && j == 0) ((float *)0)[12345] = s;");
    s_simple(j, &c[1], 1, "hang",
             "if (i == 0 && j == 0) { volatile int f = 1; while (f) {} }");
    s_simple(j, &c[2], 2, "wrong", "s += (i == 3 && j == 5) ? 1.0f : 0.0f;");
    /* Every thread reads the count before thread (0, 0) adds its launch,
     * so launch L reads L or L + 1: launch 0 (the verified one) is right,
     * every launch from the third on is wrong everywhere. */
    s_simple(j, &c[3], 3, "late",
             "unsigned seen = *(volatile unsigned *)&kl_launches;"
             " if (i == 0 && j == 0) atomicAdd(&kl_launches, 1u);"
             " s += seen >= 2 ? 1.0f : 0.0f;");
    char *late =
        kl_xasprintf("__device__ unsigned kl_launches;\n%s", c[3].source);
    free(c[3].source);
    c[3].source = late;
    s_simple(j, &c[4], 4, "good", "");
    Kiln__Status st[5];
    double med[5];
    char msg[5][200];
    int rc = KL_OK;
    const Kiln__Status want[5] = {
        KILN__STATUS__STATUS_RUNTIME_ERROR, KILN__STATUS__STATUS_TIMEOUT,
        KILN__STATUS__STATUS_WRONG_RESULT, KILN__STATUS__STATUS_WRONG_RESULT,
        KILN__STATUS__STATUS_OK};
    /* One at a time, so each fault meets a fresh or a restarted worker. */
    for (int i = 0; i < 5 && rc == KL_OK; i++) {
        rc = s_measure(j, &c[i], 1, &st[i], &med[i], &msg[i], err);
        printf("fault check %-6s %-13s %s\n", c[i].entry, s_st(st[i]), msg[i]);
        if (rc == KL_OK && st[i] != want[i])
            rc = kl_seterr(err, KL_ERR_RUNTIME, "%s: %s, expected %s",
                           c[i].entry, s_st(st[i]), s_st(want[i]));
        if (rc == KL_OK && i == 3 && !strstr(msg[i], "after timing"))
            rc = kl_seterr(err, KL_ERR_RUNTIME,
                           "late: the error does not name the check after "
                           "timing: %s",
                           msg[i]);
        if (rc == KL_OK && kl_fleet_running(j->fleet) != 1)
            rc = kl_seterr(err, KL_ERR_RUNTIME,
                           "the agent died after the %s kernel", c[i].entry);
    }
    for (int i = 0; i < 5; i++) {
        free(c[i].source);
        free(c[i].entry);
    }
    if (rc == KL_OK)
        printf("fault checks: all recorded right, agent alive\n");
    return rc;
}

static int s_space(s_job_t *j, const char *dir, json_object *samples, char *err)
{
    size_t n = json_object_array_length(samples);
    s_cand_t *c = kl_xcalloc(n, sizeof *c);
    int rc = KL_OK;
    for (size_t i = 0; i < n && rc == KL_OK; i++) {
        json_object *o = json_object_array_get_idx(samples, i), *v;
        json_object_object_get_ex(o, "source", &v);
        char *path = kl_xasprintf("%s/%s", dir, json_object_get_string(v));
        size_t len;
        rc = kl_read_file(path, &c[i].source, &len, err);
        c[i].file = path;
        json_object_object_get_ex(o, "entry", &v);
        c[i].entry = kl_xstrdup(json_object_get_string(v));
        json_object *g, *b, *sh;
        json_object_object_get_ex(o, "grid", &g);
        json_object_object_get_ex(o, "block", &b);
        json_object_object_get_ex(o, "shared_bytes", &sh);
        for (int d = 0; d < 3; d++) {
            c[i].grid[d] = (uint32_t)json_object_get_int64(
                json_object_array_get_idx(g, (size_t)d));
            c[i].block[d] = (uint32_t)json_object_get_int64(
                json_object_array_get_idx(b, (size_t)d));
        }
        c[i].shared = (uint32_t)json_object_get_int64(sh);
    }
    Kiln__Status *st = kl_xcalloc(n, sizeof *st);
    double *med = kl_xcalloc(n, sizeof *med);
    char(*msg)[200] = kl_xcalloc(n, sizeof *msg);
    double t0 = kl_now_s();
    if (rc == KL_OK)
        rc = s_measure(j, c, n, st, med, msg, err);
    double el = kl_now_s() - t0;
    size_t best = n, ok = 0, byst[8] = {0}, done = n;
    for (size_t i = 0; rc == KL_OK && i < n; i++) {
        byst[st[i] < 8 ? st[i] : 7]++;
        if (st[i] == KILN__STATUS__STATUS_CANCELLED)
            done--; /* never measured: the budget ran out */
        if (st[i] != KILN__STATUS__STATUS_OK)
            continue;
        ok++;
        if (best == n || med[i] < med[best])
            best = i;
    }
    if (rc == KL_OK) {
        for (int s = 1; s < 8; s++)
            for (size_t i = 0; byst[s] && i < n; i++)
                if (st[i] == (Kiln__Status)s) { /* one example per status */
                    printf("e.g. %s %s: %.150s\n", c[i].entry, s_st(st[i]),
                           msg[i]);
                    break;
                }
        if (done < n)
            printf("budget reached: %zu of %zu samples not measured\n",
                   n - done, n);
        printf("trials %zu\nok %zu\nfailed %zu\ntrials_per_s %.2f\n", done, ok,
               done - ok, done / el);
        if (best < n) {
            const s_cand_t *b = &c[best];
            printf("best_entry %s\nbest_us %.3f\nbest_gflops %.1f\n", b->entry,
                   med[best] * 1e6, j->flop / med[best] * 1e-9);
            printf("best_source %s\nbest_launch %u %u %u %u %u %u %u\n",
                   b->file, b->grid[0], b->grid[1], b->grid[2], b->block[0],
                   b->block[1], b->block[2], b->shared);
        } else
            rc = kl_seterr(err, KL_ERR_RUNTIME, "no candidate ran correctly");
    }
    for (size_t i = 0; i < n; i++) {
        free(c[i].source);
        free(c[i].entry);
        free(c[i].file);
    }
    free(c);
    free(st);
    free(med);
    free(msg);
    return rc;
}

/* Waits for the CUDA agent; 77 when it exited (no GPU: it says 69). */
static int s_wait_agent(s_job_t *j, char *err)
{
    for (double end = kl_now_s() + 120; kl_now_s() < end; usleep(100000)) {
        size_t n = 0;
        if (kl_dispatch_agents(j->disp, "cuda", &n, err) == KL_OK && n > 0)
            return KL_OK;
        if (kl_fleet_running(j->fleet) == 0)
            return 77;
    }
    return kl_seterr(err, KL_ERR_TIMEOUT, "no CUDA agent after 120 s");
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *agent = NULL, *device = "cuda:0";
    bool faults = false, faults_only = false;
    s_job_t j = {.target = "cuda"};
    kiln__evaluator__init(&j.ev);
    j.ev.number = 1;
    j.ev.repeat = 5;
    j.ev.min_repeat_ms = 20;
    j.ev.flush_cache = true;
    j.ev.timeout_ms = 10000;
    j.ev.rtol = 1e-3;
    j.ev.atol = 1e-3;
    j.ev.seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--faults"))
            faults = true;
        else if (!strcmp(a, "--faults-only"))
            faults = faults_only = true;
        else if (!strcmp(a, "--dir") && v)
            dir = argv[++i];
        else if (!strcmp(a, "--agent") && v)
            agent = argv[++i];
        else if (!strcmp(a, "--device") && v)
            device = argv[++i];
        else if (!strcmp(a, "--repeat") && v)
            j.ev.repeat = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(a, "--budget-s") && v)
            j.deadline = atof(argv[++i]);
        else if (!strcmp(a, "--timeout-ms") && v)
            j.ev.timeout_ms = (uint32_t)atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: gpu_check --dir DIR [--agent PATH] "
                            "[--device cuda:0] [--faults] [--faults-only] "
                            "[--repeat N] "
                            "[--timeout-ms MS] [--budget-s S]\n");
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "gpu_check: --dir is required\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    double t_begin = kl_now_s();
    char err[KL_ERRMSG_LEN];
    json_object *samples = NULL;
    int rc = s_manifest(&j, dir, &samples, err);
    if (rc == KL_OK) {
        const char *extra[] = {"--device", device, NULL};
        kl_fleet_config_t fc = {
            .n_agents = 1, .agent_path = agent, .extra_args = extra};
        rc = kl_fleet_new(&j.fleet, &fc, err);
    }
    if (rc == KL_OK) {
        kl_dispatch_config_t dc = {.endpoint = "tcp://127.0.0.1:*",
                                   .security = *kl_fleet_security(j.fleet)};
        rc = kl_dispatch_new(&j.disp, &dc, err);
    }
    if (rc == KL_OK)
        rc = kl_fleet_start(j.fleet, kl_dispatch_endpoint(j.disp), err);
    if (rc == KL_OK)
        rc = s_wait_agent(&j, err);
    if (rc == KL_OK && faults) {
        uint32_t t = j.ev.timeout_ms;
        j.ev.timeout_ms = 3000;
        rc = s_faults(&j, err);
        j.ev.timeout_ms = t;
    }
    if (rc == KL_OK && j.deadline > 0)
        j.deadline += t_begin;
    if (rc == KL_OK && !faults_only)
        rc = s_space(&j, dir, samples, err);
    if (rc == KL_OK && j.simulated) {
        fprintf(stderr, "gpu_check: SKIP: results are simulated (fake GPU "
                        "worker): a dry run, not a GPU measurement\n");
        rc = 77;
    } else if (rc == 77)
        fprintf(stderr, "gpu_check: SKIP: the CUDA agent exited (no GPU or "
                        "no driver: see its message above)\n");
    else if (rc != KL_OK)
        fprintf(stderr, "gpu_check: %s\n", err);
    kl_dispatch_destroy(&j.disp);
    kl_fleet_destroy(&j.fleet);
    json_object_put(samples);
    free(j.ref);
    for (int i = 0; i < 3; i++)
        free(j.args[i].name);
    return rc == 77 ? 77 : rc == KL_OK ? 0 : 1;
}
