/* gen_corpus.c - writes the seed corpus of fuzz_envelope into a directory:
 * a valid encoding of every message type, then truncated and mutated
 * copies and a few hand-made edge cases. The output is committed under
 * tests/fuzz/corpus/envelope/; rerun after a change to kiln.proto:
 *     gen_corpus tests/fuzz/corpus/envelope */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"

static const char *s_dir;

static void s_write(const char *name, const void *buf, size_t len)
{
    char err[KL_ERRMSG_LEN];
    char *path = kl_xasprintf("%s/%s", s_dir, name);
    if (kl_write_file(path, buf, len, err) != KL_OK) {
        fprintf(stderr, "gen_corpus: %s\n", err);
        exit(1);
    }
    free(path);
}

/* Writes env as NAME, returns the encoding (caller frees). */
static uint8_t *s_emit(const char *name, Kiln__Envelope *env, size_t *len)
{
    env->version_major = env->version_major ? env->version_major : 1;
    uint8_t *buf = kl_net_encode(env, len);
    s_write(name, buf, *len);
    return buf;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_corpus DIR\n");
        return 2;
    }
    s_dir = argv[1];
    Kiln__Envelope env = KILN__ENVELOPE__INIT;
    size_t len;

    uint32_t cores[2] = {0, 1};
    Kiln__DeviceInfo dev = KILN__DEVICE_INFO__INIT, *devp = &dev;
    dev.kind = "cuda";
    dev.name = "NVIDIA H200";
    dev.target = "cuda/sm_90";
    dev.cores = 132;
    dev.memory_bytes = 141ull << 30;
    dev.llc_bytes = 60u << 20;
    dev.max_threads_per_block = 1024;
    dev.n_measure_cores = 2;
    dev.measure_cores = cores;
    Kiln__Hello hello = KILN__HELLO__INIT;
    hello.agent_name = "gpu0";
    hello.hostname = "box";
    hello.pid = 77;
    hello.build_slots = 4;
    hello.n_devices = 1;
    hello.devices = &devp;
    env.body_case = KILN__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    free(s_emit("valid_hello", &env, &len));

    Kiln__Welcome welcome = KILN__WELCOME__INIT;
    welcome.coordinator_id = "head";
    welcome.heartbeat_ms = 1000;
    env.body_case = KILN__ENVELOPE__BODY_WELCOME;
    env.welcome = &welcome;
    free(s_emit("valid_welcome", &env, &len));

    Kiln__Heartbeat hb = KILN__HEARTBEAT__INIT;
    hb.seq = 12;
    hb.busy = 2;
    env.body_case = KILN__ENVELOPE__BODY_HEARTBEAT;
    env.heartbeat = &hb;
    free(s_emit("valid_heartbeat", &env, &len));

    uint8_t key[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int64_t shape[2] = {128, 64};
    Kiln__KernelArg arg = KILN__KERNEL_ARG__INIT, *argp = &arg;
    arg.name = "A";
    arg.n_shape = 2;
    arg.shape = shape;
    Kiln__Evaluator ev = KILN__EVALUATOR__INIT;
    ev.number = 1;
    ev.repeat = 3;
    ev.rtol = 1e-3;
    ev.atol = 1e-5;
    ev.seed = 9;
    uint32_t grid[3] = {8, 8, 1}, block[3] = {16, 16, 1};
    Kiln__Candidate cand = KILN__CANDIDATE__INIT, *candp = &cand;
    cand.id = 5;
    cand.source = "extern \"C\" __global__ void k(float *a) {}";
    cand.entry = "k";
    cand.n_grid = cand.n_block = 3;
    cand.grid = grid;
    cand.block = block;
    cand.trace.data = (uint8_t *)"\x0a\x02hi";
    cand.trace.len = 4;
    Kiln__MeasureRequest req = KILN__MEASURE_REQUEST__INIT;
    req.request_id = 3;
    req.workload_key.data = key;
    req.workload_key.len = 16;
    req.target = "cuda/sm_90";
    req.n_args = 1;
    req.args = &argp;
    req.reference_source = "void ref(void *const *a) {}";
    req.reference_entry = "ref";
    req.evaluator = &ev;
    req.n_candidates = 1;
    req.candidates = &candp;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &req;
    uint8_t *rq = s_emit("valid_request", &env, &len);
    size_t rq_len = len;

    double samples[3] = {1e-4, 1.1e-4, 0.9e-4};
    Kiln__MeasureResult res = KILN__MEASURE_RESULT__INIT;
    res.request_id = 3;
    res.candidate_id = 5;
    res.status = KILN__STATUS__STATUS_OK;
    res.n_samples = 3;
    res.samples = samples;
    res.compile_s = 0.2;
    res.number = 10;
    env.body_case = KILN__ENVELOPE__BODY_RESULT;
    env.result = &res;
    free(s_emit("valid_result", &env, &len));

    Kiln__Cancel cancel = KILN__CANCEL__INIT;
    cancel.request_id = 3;
    env.body_case = KILN__ENVELOPE__BODY_CANCEL;
    env.cancel = &cancel;
    free(s_emit("valid_cancel", &env, &len));

    Kiln__Goodbye bye = KILN__GOODBYE__INIT;
    bye.reason = "bye";
    env.body_case = KILN__ENVELOPE__BODY_GOODBYE;
    env.goodbye = &bye;
    free(s_emit("valid_goodbye", &env, &len));

    /* Version 2.7 of a Goodbye, and an envelope with no body. */
    env.version_major = 2;
    env.version_minor = 7;
    free(s_emit("version_2_7", &env, &len));
    Kiln__Envelope empty = KILN__ENVELOPE__INIT;
    free(s_emit("no_body", &empty, &len));

    /* Cut and mutated requests. */
    s_write("trunc_request_half", rq, rq_len / 2);
    s_write("trunc_request_minus1", rq, rq_len - 1);
    s_write("trunc_request_3", rq, 3);
    uint8_t *mut = kl_xmalloc(rq_len);
    kl_rng_t rng;
    kl_rng_seed(&rng, 2026);
    for (int i = 0; i < 4; i++) {
        memcpy(mut, rq, rq_len);
        for (int f = 0; f < 4; f++)
            mut[kl_rng_below(&rng, rq_len)] ^= (uint8_t)(1 + i);
        char name[32];
        snprintf(name, sizeof name, "mutated_request_%d", i);
        s_write(name, mut, rq_len);
    }
    free(mut);
    free(rq);

    /* Bounds: a grid of 2 values, a 15-byte key, 5000 candidates. */
    cand.n_grid = 2;
    env.version_major = 1;
    env.version_minor = 0;
    env.body_case = KILN__ENVELOPE__BODY_REQUEST;
    env.request = &req;
    free(s_emit("bad_grid", &env, &len));
    cand.n_grid = 3;
    req.workload_key.len = 15;
    free(s_emit("bad_key_len", &env, &len));
    req.workload_key.len = 16;
    Kiln__Candidate empty_c = KILN__CANDIDATE__INIT;
    Kiln__Candidate **many = kl_xcalloc(5000, sizeof *many);
    for (int i = 0; i < 5000; i++)
        many[i] = &empty_c;
    req.candidates = many;
    req.n_candidates = 5000;
    free(s_emit("too_many_candidates", &env, &len));
    free(many);

    /* Hand-made wire: a length that runs past the end, an unknown wire
     * type, the same sub-message twice. */
    s_write("len_past_end", "\x08\x01\x6a\x7f\x01", 5);
    s_write("bad_wire_type", "\x08\x01\x0f", 3);
    s_write("heartbeat_twice", "\x08\x01\x62\x00\x62\x00", 6);
    return 0;
}
