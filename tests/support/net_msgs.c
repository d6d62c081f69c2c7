/* net_msgs.c - fixtures of the net unit test (see net_msgs.h). */
#include <string.h>

#include "kl_net.h"
#include "net_msgs.h"

const Kiln__Envelope__BodyCase net_all[N_ALL] = {
    KILN__ENVELOPE__BODY_HELLO,        KILN__ENVELOPE__BODY_WELCOME,
    KILN__ENVELOPE__BODY_HEARTBEAT,    KILN__ENVELOPE__BODY_REQUEST,
    KILN__ENVELOPE__BODY_RESULT,       KILN__ENVELOPE__BODY_CANCEL,
    KILN__ENVELOPE__BODY_GOODBYE,      KILN__ENVELOPE__BODY_JOB_HELLO,
    KILN__ENVELOPE__BODY_JOB_WELCOME,  KILN__ENVELOPE__BODY_JOB_RESULT,
    KILN__ENVELOPE__BODY_AGENTS_QUERY, KILN__ENVELOPE__BODY_AGENTS_REPLY,
    KILN__ENVELOPE__BODY_STATUS_QUERY, KILN__ENVELOPE__BODY_STATUS_REPLY,
    KILN__ENVELOPE__BODY_DRAIN,        KILN__ENVELOPE__BODY_DRAIN_REPLY,
};

static void s_fill_head(msgs_t *m)
{
    kiln__job_hello__init(&m->jhello);
    m->targets[0] = "sim/cpu";
    m->targets[1] = "cuda/sm_90";
    m->jhello.name = "resnet-a";
    m->jhello.weight = 2;
    m->jhello.n_targets = 2;
    m->jhello.targets = m->targets;
    m->jhello.hostname = "laptop";
    m->jhello.pid = 4242;
    kiln__job_welcome__init(&m->jwelcome);
    m->jwelcome.head_id = "head-1";
    m->jwelcome.heartbeat_ms = 1000;
    m->jwelcome.client_timeout_s = 30;
    kiln__job_result__init(&m->jres);
    m->jres.result = &m->res;
    m->jres.index = 3;
    m->jres.agent = "agent-0";
    m->jres.hostname = "gpu-7";
    m->jres.device_name = "H100";
    m->jres.device_target = "cuda/sm_90";
    m->jres.attempts = 2;
    m->jres.turnaround_s = 1.5;
    kiln__agents_query__init(&m->aquery);
    m->aquery.seq = 5;
    m->aquery.target = "sim/cpu";
    kiln__agents_reply__init(&m->areply);
    m->areply.seq = 5;
    m->areply.agents = 2;
    kiln__status_query__init(&m->squery);
    m->squery.seq = 6;
    kiln__agent_status__init(&m->ast);
    m->ast.name = "agent-0";
    m->ast.hostname = "gpu-7";
    m->ast.n_device_targets = 2;
    m->ast.device_targets = m->targets;
    m->ast.n_device_names = 2;
    m->ast.device_names = m->targets;
    m->ast.build_slots = 4;
    m->ast.busy = 3;
    m->ast.results = 100;
    m->ast.failures = 7;
    m->ast.last_seen_s = 0.5;
    m->ast.drained = true;
    m->astp[0] = &m->ast;
    kiln__job_status__init(&m->jst);
    m->jst.name = "resnet-a";
    m->jst.owner_key = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7";
    m->jst.n_targets = 1;
    m->jst.targets = m->targets;
    m->jst.weight = 2;
    m->jst.queued = 10;
    m->jst.in_flight = 4;
    m->jst.done = 20;
    m->jst.rate = 3.5;
    m->jstp[0] = &m->jst;
    kiln__status_reply__init(&m->sreply);
    m->sreply.seq = 6;
    m->sreply.head_id = "head-1";
    m->sreply.n_agents = 1;
    m->sreply.agents = m->astp;
    m->sreply.n_jobs = 1;
    m->sreply.jobs = m->jstp;
    kiln__drain__init(&m->drain);
    m->drain.seq = 8;
    m->drain.agent = "agent-0";
    m->drain.undrain = true;
    kiln__drain_reply__init(&m->dreply);
    m->dreply.seq = 8;
    m->dreply.matched = 1;
}

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
    s_fill_head(m);
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
    case KILN__ENVELOPE__BODY_JOB_HELLO:
        m->env.job_hello = &m->jhello;
        break;
    case KILN__ENVELOPE__BODY_JOB_WELCOME:
        m->env.job_welcome = &m->jwelcome;
        break;
    case KILN__ENVELOPE__BODY_JOB_RESULT:
        m->env.job_result = &m->jres;
        break;
    case KILN__ENVELOPE__BODY_AGENTS_QUERY:
        m->env.agents_query = &m->aquery;
        break;
    case KILN__ENVELOPE__BODY_AGENTS_REPLY:
        m->env.agents_reply = &m->areply;
        break;
    case KILN__ENVELOPE__BODY_STATUS_QUERY:
        m->env.status_query = &m->squery;
        break;
    case KILN__ENVELOPE__BODY_STATUS_REPLY:
        m->env.status_reply = &m->sreply;
        break;
    case KILN__ENVELOPE__BODY_DRAIN:
        m->env.drain = &m->drain;
        break;
    case KILN__ENVELOPE__BODY_DRAIN_REPLY:
        m->env.drain_reply = &m->dreply;
        break;
    default:
        break;
    }
}
