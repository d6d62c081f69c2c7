/* net_msgs.h - fixtures of the net unit test: every message of
 * kiln.proto with every field set (non-zero, so that the encoding carries
 * it). */
#ifndef NET_MSGS_H
#define NET_MSGS_H

#include <stdint.h>

#include "kiln.pb-c.h"

typedef struct {
    Kiln__Envelope env;
    Kiln__Hello hello;
    Kiln__DeviceInfo dev[2];
    Kiln__DeviceInfo *devp[2];
    uint32_t cores[3];
    Kiln__Welcome welcome;
    Kiln__Heartbeat hb;
    Kiln__MeasureRequest req;
    Kiln__KernelArg arg[3];
    Kiln__KernelArg *argp[3];
    int64_t shape[3][2];
    Kiln__Evaluator ev;
    Kiln__Candidate cand[2];
    Kiln__Candidate *candp[2];
    uint32_t grid[3], block[3];
    uint8_t key[16], trace[5];
    Kiln__MeasureResult res;
    double samples[3];
    Kiln__Cancel cancel;
    Kiln__Goodbye bye;
    /* The job <-> head messages (minor 2). */
    Kiln__JobHello jhello;
    char *targets[2];
    Kiln__JobWelcome jwelcome;
    Kiln__JobResult jres;
    Kiln__AgentsQuery aquery;
    Kiln__AgentsReply areply;
    Kiln__StatusQuery squery;
    Kiln__StatusReply sreply;
    Kiln__AgentStatus ast;
    Kiln__AgentStatus *astp[1];
    Kiln__JobStatus jst;
    Kiln__JobStatus *jstp[1];
    Kiln__Drain drain;
    Kiln__DrainReply dreply;
} msgs_t;

/* The sixteen body kinds, in proto order. */
extern const Kiln__Envelope__BodyCase net_all[16];
#define N_ALL 16

/* Fills every message of m and sets m->env (version 1.0) to carry the one
 * of kind which. All storage lives in m. */
void net_fill(msgs_t *m, Kiln__Envelope__BodyCase which);

#endif
