/* cuda_agent_fx.h - what the tests of kiln-agent's CUDA backend without a
 * GPU share (cuda_device_test.c, cuda_build_test.c, cuda_worker_test.c,
 * cuda_agent_test.c): a work directory, whether bwrap can make a sandbox
 * here, an sm_80/sm_90 device description, an NVRTC builder (NULL, with
 * SKIP on stderr, where NVRTC cannot be loaded), the stand-in's kernels
 * (KILN_FAKE_GPU_WORKER reads their names) and each test's setup.
 *
 * Needs KILN_AGENT (the kiln-agent executable, which is also the worker). */
#ifndef CUDA_AGENT_FX_H
#define CUDA_AGENT_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_codegen.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_space.h"
#include "kl_util.h"
#include "kla_agent.h"
#include "kla_cuda.h"
#include "kla_cuda_wire.h"
#include "kla_jail.h"
#include "kl_target.h"
#include "kl_test_tmp.h"

static char fx_dir[256];
static bool fx_jail; /* bwrap can make a sandbox here */

/* An sm_90 device with an H100/H200's limits (and an A100's for sm_80). */
static inline void fx_cuda_dev(kla_cuda_dev_t *d, bool sm90)
{
    memset(d, 0, sizeof *d);
    snprintf(d->arch, sizeof d->arch, sm90 ? "sm_90" : "sm_80");
    snprintf(d->target, sizeof d->target, "cuda/%s", d->arch);
    d->max_threads_per_block = 1024;
    d->max_shared_per_block = 48 << 10;
    d->max_shared_optin = sm90 ? 227 << 10 : 163 << 10;
    d->max_regs_per_block = 65536;
    d->l2_bytes = sm90 ? 50 << 20 : 40 << 20;
}

static inline kla_cuda_builder_t *fx_cuda_builder(void)
{
    char err[KL_ERRMSG_LEN];
    kla_cuda_builder_t *b = NULL;
    if (kla_cuda_builder_new(&b, fx_dir, err) != KL_OK) {
        fprintf(stderr, "SKIP: %s\n", err);
        return NULL;
    }
    return b;
}

/* A kernel called name: the names tell the stand-in what to do. */
static inline char *fx_cuda_kernel(const char *name)
{
    return kl_xasprintf("extern \"C\" __global__ void %s(const float *a,\n"
                        "    const float *b, float *c)\n"
                        "{\n"
                        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                        "    if (i < 4096) c[i] = a[i] + b[i];\n"
                        "}\n",
                        name);
}

/* Makes fx_dir, finds KILN_AGENT (the build tree's kiln-agent beside
 * this test when unset) and probes the sandbox: without one, fx_jail is
 * false and the worker runs unsandboxed (kla_jail_set_unsafe). Returns 0,
 * or 1 (with a message on stderr) when the test cannot run. */
static inline int fx_cuda_setup(void)
{
    if (!kl_test_mkdtemp(fx_dir, sizeof fx_dir, "kiln-cuda-agent-test-XXXXXX"))
        return 1;
    if (!getenv("KILN_AGENT")) { /* the build tree's, beside this test */
        char self[4096], path[4200];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0)
            return 1;
        self[n] = '\0';
        *strrchr(self, '/') = '\0';
        snprintf(path, sizeof path, "%s/../../agent/kiln-agent", self);
        setenv("KILN_AGENT", path, 1);
    }
    if (access(getenv("KILN_AGENT"), X_OK) != 0) {
        fprintf(stderr, "KILN_AGENT %s: not an executable\n",
                getenv("KILN_AGENT"));
        return 1;
    }
    char err[KL_ERRMSG_LEN];
    fx_jail = kla_jail_probe(err) == KL_OK;
    if (!fx_jail) { /* the worker's faults still run, unsandboxed */
        fprintf(stderr, "# no sandbox here (%s): sandbox checks skipped\n",
                err);
        kla_jail_set_unsafe(true);
    }
    return 0;
}

/* Removes fx_dir and what the tests left in it. */
static inline void fx_cuda_cleanup(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fx_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", fx_dir);
}

#endif
