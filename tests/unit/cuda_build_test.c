/* The CUDA backend of kiln-agent without a GPU, its builds: NVRTC builds
 * of generated kernels for sm_80 and sm_90 with their resources checked,
 * the worker's own helper kernels, and a build error. Skipped when NVRTC
 * cannot be loaded; the fixture is tests/support/cuda_agent_fx.h. */
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
#include "cuda_agent_fx.h"

static void test_build_generated(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = fx_cuda_builder();
    if (!b)
        skip();
    char err[KL_ERRMSG_LEN];
    const char *ops[] = {"matmul M=256 N=256 K=256",
                         "conv2d N=1 C=32 H=14 W=14 K=64 R=3 S=3 pad=1"};
    for (int arch = 0; arch < 2; arch++) {
        const char *tname = arch ? "cuda/sm_90" : "cuda/sm_80";
        kla_cuda_dev_t d;
        fx_cuda_dev(&d, arch == 1);
        for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
            kl_workload_t *w = NULL;
            kl_space_t *sp = NULL;
            assert_int_equal(kl_workload_from_string(ops[o], &w, err), KL_OK);
            assert_int_equal(kl_space_for_target(tname, w, &sp, err), KL_OK);
            kl_rng_t rng;
            kl_rng_seed(&rng, 11 + o);
            for (int i = 0; i < 3; i++) {
                kl_trace_t *tr = NULL;
                kl_sched_t *s = NULL;
                assert_int_equal(
                    kl_space_sample(sp, &rng, &tr, &s, 0, NULL, err), KL_OK);
                kl_kernel_t k;
                assert_int_equal(
                    kl_codegen_cuda(s, kl_space_target(sp), "cand", &k, err),
                    KL_OK);
                kla_build_t out;
                kla_cuda_res_t res;
                int rc = kla_cuda_builder_build(b, k.source, strlen(k.source),
                                                d.arch, k.entry, &out, &res);
                if (rc != KL_OK)
                    fprintf(stderr, "%s\n%s\n", out.log, k.source);
                assert_int_equal(rc, KL_OK);
                assert_true(out.ok);
                assert_non_null(strstr(out.so_path, d.arch));
                char *img = NULL;
                size_t len = 0;
                assert_int_equal(kl_read_file(out.so_path, &img, &len, err),
                                 KL_OK);
                assert_memory_equal(img,
                                    "\x7f"
                                    "ELF",
                                    4);
                free(img);
                /* ptxas's report, checked like the loaded function's. */
                if (!out.cache_hit) {
                    assert_true(res.regs >= 1 && res.regs <= 255);
                    kla_cuda_launch_t l;
                    for (int x = 0; x < 3; x++) {
                        l.grid[x] = (uint32_t)k.grid[x];
                        l.block[x] = (uint32_t)k.block[x];
                    }
                    l.shared_bytes = (uint32_t)k.shared_bytes;
                    rc = kla_cuda_check_launch(&d, &res, &l, err);
                    if (rc != KL_OK)
                        fprintf(stderr, "%s: %s\n", tname, err);
                    assert_int_equal(rc, KL_OK);
                    /* Registers per thread x threads beyond the device. */
                    kla_cuda_res_t big = res;
                    big.regs = 255;
                    l.block[0] = 1024;
                    l.block[1] = l.block[2] = 1;
                    assert_int_equal(kla_cuda_check_launch(&d, &big, &l, err),
                                     KL_ERR_INVAL);
                }
                /* The same source again: a cache hit, NVRTC not run. */
                unsigned before = kla_cuda_builder_compiles(b);
                kla_build_t again;
                assert_int_equal(
                    kla_cuda_builder_build(b, k.source, strlen(k.source),
                                           d.arch, k.entry, &again, NULL),
                    KL_OK);
                assert_true(again.cache_hit);
                assert_string_equal(again.so_path, out.so_path);
                assert_int_equal(kla_cuda_builder_compiles(b), before);
                kl_kernel_free(&k);
                kl_sched_destroy(&s);
                kl_trace_free(&tr);
            }
            kl_space_destroy(&sp);
            kl_workload_free(&w);
        }
    }
    kla_cuda_builder_destroy(&b);
}

/* The worker's own helper kernels compile for both archs (they only run
 * on a GPU: tests/gpu/run.sh). */
static void test_build_helpers(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = fx_cuda_builder();
    if (!b)
        skip();
    const char *src = kla_cuda_helpers_source();
    const char *archs[] = {"sm_80", "sm_90"};
    for (int i = 0; i < 2; i++) {
        kla_build_t out;
        int rc = kla_cuda_builder_build(b, src, strlen(src), archs[i],
                                        "kla_compare", &out, NULL);
        if (rc != KL_OK)
            fprintf(stderr, "%s\n", out.log);
        assert_int_equal(rc, KL_OK);
    }
    kla_cuda_builder_destroy(&b);
}

static void test_build_error(void **state)
{
    (void)state;
    kla_cuda_builder_t *b = fx_cuda_builder();
    if (!b)
        skip();
    const char *bad = "extern \"C\" __global__ void k(float *a)\n"
                      "{\n"
                      "    a[0] = undefined_thing;\n"
                      "}\n";
    kla_build_t out;
    assert_int_equal(
        kla_cuda_builder_build(b, bad, strlen(bad), "sm_90", "k", &out, NULL),
        KL_ERR_COMPILE);
    assert_false(out.ok);
    assert_non_null(strstr(out.log, "undefined_thing"));
    assert_int_equal(
        kla_cuda_builder_build(b, bad, strlen(bad), "sm_99x", "k", &out, NULL),
        KL_ERR_COMPILE);
    kla_cuda_builder_destroy(&b);
}

int main(void)
{
    if (fx_cuda_setup())
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_generated),
        cmocka_unit_test(test_build_helpers),
        cmocka_unit_test(test_build_error),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fx_cuda_cleanup();
    return rc;
}
