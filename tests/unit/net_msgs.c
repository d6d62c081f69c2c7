/* net_msgs.c - fixtures of the net unit test (see net_msgs.h). */
#include <string.h>

#include "kl_net.h"
#include "net_msgs.h"

const Kiln__Envelope__BodyCase net_all[N_ALL] = {
    KILN__ENVELOPE__BODY_HELLO,     KILN__ENVELOPE__BODY_WELCOME,
    KILN__ENVELOPE__BODY_HEARTBEAT, KILN__ENVELOPE__BODY_REQUEST,
    KILN__ENVELOPE__BODY_RESULT,    KILN__ENVELOPE__BODY_CANCEL,
    KILN__ENVELOPE__BODY_GOODBYE,
};

static void s_fill_hello(msgs_t *m)
{
    kiln__hello__init(&m->hello);
    m->hello.agent_name = "agent-7";
    m->hello.hostname = "box7";
    m->hello.pid = 4242;
    m->hello.build_slots = 6;
    for (int i = 0; i < 3; i++)
        m->cores[i] = (uint32_t)(2 + i);
    for (int i = 0; i < 2; i++) {
        Kiln__DeviceInfo *d = &m->dev[i];
        kiln__device_info__init(d);
        d->kind = i ? "cuda" : "cpu";
        d->name = i ? "NVIDIA H100" : "Xeon 8480";
        d->target = i ? "cuda/sm_90" : "cpu/x86_64-avx512";
        d->cores = 132;
        d->memory_bytes = 80ull << 30;
        d->clock_mhz = 1980;
        d->llc_bytes = 50u << 20;
        d->max_threads_per_block = 1024;
        d->max_shared_per_block = 227 << 10;
        d->driver_version = "12.4";
        d->n_measure_cores = 3;
        d->measure_cores = m->cores;
        d->simulated = true;
        d->index = (uint32_t)i + 1;
        d->max_registers_per_block = 65536;
        d->mem_clock_mhz = 2619;
        m->devp[i] = d;
    }
    m->hello.n_devices = 2;
    m->hello.devices = m->devp;
}

static void s_fill_request(msgs_t *m)
{
    kiln__measure_request__init(&m->req);
    m->req.request_id = 99;
    for (int i = 0; i < 16; i++)
        m->key[i] = (uint8_t)(i * 7 + 1);
    m->req.workload_key.data = m->key;
    m->req.workload_key.len = 16;
    m->req.target = "cpu/x86_64-avx512";
    for (int i = 0; i < 3; i++) {
        kiln__kernel_arg__init(&m->arg[i]);
        m->arg[i].name = i == 0 ? "A" : i == 1 ? "B" : "C";
        m->arg[i].dtype = KILN__DTYPE__DTYPE_BF16;
        m->shape[i][0] = 64 + i;
        m->shape[i][1] = 32;
        m->arg[i].n_shape = 2;
        m->arg[i].shape = m->shape[i];
        m->arg[i].role =
            i == 2 ? KILN__ARG_ROLE__ROLE_OUTPUT : KILN__ARG_ROLE__ROLE_INPUT;
        m->argp[i] = &m->arg[i];
    }
    m->req.n_args = 3;
    m->req.args = m->argp;
    m->req.reference_source = "void ref(void *const *a) { }";
    m->req.reference_entry = "ref";
    kiln__evaluator__init(&m->ev);
    m->ev.number = 3;
    m->ev.repeat = 5;
    m->ev.min_repeat_ms = 10;
    m->ev.flush_cache = true;
    m->ev.timeout_ms = 2000;
    m->ev.rtol = 1e-3;
    m->ev.atol = 1e-5;
    m->ev.seed = 12345;
    m->ev.skip_verify = true;
    m->req.evaluator = &m->ev;
    for (int i = 0; i < 3; i++) {
        m->grid[i] = (uint32_t)(10 + i);
        m->block[i] = (uint32_t)(32 >> i);
    }
    memcpy(m->trace,
           "\x0a\x03"
           "abc",
           5);
    for (int i = 0; i < 2; i++) {
        Kiln__Candidate *c = &m->cand[i];
        kiln__candidate__init(c);
        c->id = 1000 + (uint64_t)i;
        c->source = "void k(void *const *a) { }";
        c->entry = "k";
        c->n_grid = c->n_block = 3;
        c->grid = m->grid;
        c->block = m->block;
        c->shared_bytes = 4096;
        c->trace.data = m->trace;
        c->trace.len = 5;
        m->candp[i] = c;
    }
    m->req.n_candidates = 2;
    m->req.candidates = m->candp;
    m->req.device_index = 1;
}

void net_fill(msgs_t *m, Kiln__Envelope__BodyCase which)
{
    memset(m, 0, sizeof *m);
    kiln__envelope__init(&m->env);
    m->env.version_major = KL_PROTO_MAJOR;
    m->env.version_minor = KL_PROTO_MINOR;
    m->env.body_case = which;
    s_fill_hello(m);
    kiln__welcome__init(&m->welcome);
    m->welcome.coordinator_id = "coord-1";
    m->welcome.heartbeat_ms = 1000;
    kiln__heartbeat__init(&m->hb);
    m->hb.seq = 77;
    m->hb.busy = 3;
    s_fill_request(m);
    kiln__measure_result__init(&m->res);
    m->res.request_id = 99;
    m->res.candidate_id = 1001;
    m->res.status = KILN__STATUS__STATUS_WRONG_RESULT;
    for (int i = 0; i < 3; i++)
        m->samples[i] = 1e-4 * (i + 1);
    m->res.n_samples = 3;
    m->res.samples = m->samples;
    m->res.error = "max abs err 0.5";
    m->res.compile_s = 0.25;
    m->res.max_abs_err = 0.5;
    m->res.simulated = true;
    m->res.number = 3;
    m->res.spread = 0.02;
    m->res.cache_hit = true;
    m->res.overhead_s = 0.01;
    kiln__cancel__init(&m->cancel);
    m->cancel.request_id = 99;
    kiln__goodbye__init(&m->bye);
    m->bye.reason = "shutting down";
    switch (which) {
    case KILN__ENVELOPE__BODY_HELLO:
        m->env.hello = &m->hello;
        break;
    case KILN__ENVELOPE__BODY_WELCOME:
        m->env.welcome = &m->welcome;
        break;
    case KILN__ENVELOPE__BODY_HEARTBEAT:
        m->env.heartbeat = &m->hb;
        break;
    case KILN__ENVELOPE__BODY_REQUEST:
        m->env.request = &m->req;
        break;
    case KILN__ENVELOPE__BODY_RESULT:
        m->env.result = &m->res;
        break;
    case KILN__ENVELOPE__BODY_CANCEL:
        m->env.cancel = &m->cancel;
        break;
    case KILN__ENVELOPE__BODY_GOODBYE:
        m->env.goodbye = &m->bye;
        break;
    default:
        break;
    }
}
