/* Unit tests of the runner's trusted half and kiln-runner's sandbox
 * (agent/cpu/runner.c, runner_host.c, runner_harness.c): hostile
 * candidates that forge the harness's messages, impersonate it, close its
 * channel, write their inputs, try forbidden system calls, or write
 * nothing after a right answer. Real compiler, real sandbox, a 64x64
 * matmul; without a sandbox here (no bwrap, no user namespaces) the cases
 * that need one are skipped. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kl_err.h"
#include "kl_test_tmp.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_cand.h"
#include "kla_jail.h"
#include "kla_runner.h"
#include "mm_fx.h"

/* The harness's message as a candidate sees it (kla_cand.h), written out
 * since a candidate may include system headers only; s_layout checks it
 * matches. */
#define S_MSG_DECL                                                             \
    "#include <stdint.h>\n#include <string.h>\n#include <unistd.h>\n"          \
    "#include <sys/socket.h>\n#include <time.h>\n#include <stdlib.h>\n"        \
    "#include <errno.h>\n#include <fcntl.h>\n#include <sys/mman.h>\n"          \
    "typedef struct { uint32_t magic, kind, status, code, number, pad;\n"      \
    "  double t_c, t_w, u, wall, child_s; char msg[1024]; } m_t;\n"            \
    "static void say(uint32_t kind, double t_c) {\n"                           \
    "  m_t m; memset(&m, 0, sizeof m); m.magic = 0x6b6c6a32u;\n"               \
    "  m.kind = kind; m.number = 1; m.t_c = t_c;\n"                            \
    "  send(7, &m, sizeof m, MSG_NOSIGNAL); }\n"                               \
    "static void hear(void) { m_t m; recv(7, &m, sizeof m, 0); }\n"            \
    "static double now(void) { struct timespec t;\n"                           \
    "  clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * "     \
    "1e-9; }\n"                                                                \
    "static void burn(double s) { double e = now() + s; volatile double x = "  \
    "1;\n"                                                                     \
    "  while (now() < e) x *= 1.0000001; }\n"                                  \
    "static void mm(void *const *args) {\n"                                    \
    "  const float *A = args[0], *B = args[1]; float *C = args[2];\n"          \
    "  for (int i = 0; i < 64; i++) for (int j = 0; j < 64; j++) {\n"          \
    "    float s = 0; for (int k = 0; k < 64; k++)\n"                          \
    "      s += A[i * 64 + k] * B[k * 64 + j];\n"                              \
    "    C[i * 64 + j] = s; } }\n"

typedef struct {
    uint32_t magic, kind, status, code, number, pad;
    double t_c, t_w, u, wall, child_s;
    char msg[1024];
} s_mirror_t;

typedef struct {
    char dir[256];
    kla_builder_t *builder;
    kla_runner_t *runner;
    kla_build_t ref;
    bool sandbox;
} fix_t;

static fix_t F;

static int s_setup(void **state)
{
    (void)state;
    if (!kl_test_mkdtemp(F.dir, sizeof F.dir, "kla-runner-XXXXXX"))
        return -1;
    char err[KL_ERRMSG_LEN];
    F.sandbox = kla_jail_probe(err) == KL_OK;
    if (!F.sandbox) {
        fprintf(stderr, "no sandbox here (%s): the sandbox cases skip\n", err);
        kla_jail_set_unsafe(true);
    }
    kla_builder_config_t bc = {.workdir = F.dir, .cflags = "-O2"};
    if (kla_builder_new(&F.builder, &bc, err) != KL_OK)
        return -1;
    kla_runner_config_t rc = {.llc_bytes = 1 << 20,
                              .max_mem_bytes = 512u << 20};
    if (kla_runner_new(&F.runner, &rc, err) != KL_OK)
        return -1;
    if (kla_builder_build(F.builder, fx_ref_src, strlen(fx_ref_src), &F.ref))
        return -1;
    return 0;
}

static int s_teardown(void **state)
{
    (void)state;
    kla_runner_destroy(&F.runner);
    kla_builder_destroy(&F.builder);
    char *cmd = kl_xasprintf("rm -rf '%s'", F.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

static void s_problem(kla_problem_t *p, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    memset(p->workload_key, 0xcd, 16);
    p->n_args = 3;
    p->nelem[0] = p->nelem[1] = p->nelem[2] = 64 * 64;
    p->is_output[2] = true;
    kla_eval_defaults(&p->eval);
    p->eval.repeat = 3;
    p->eval.min_repeat_ms = 0;
    p->eval.flush_cache = false;
    p->eval.timeout_ms = 3000;
    p->eval.seed = seed;
}

/* Builds S_MSG_DECL + body (which defines `void k(void *const *args)`)
 * and measures it. */
static void s_run(const kla_problem_t *p, const char *body, kla_result_t *res)
{
    char *src = kl_xasprintf("%s%s", S_MSG_DECL, body);
    kla_build_t bd;
    int rc = kla_builder_build(F.builder, src, strlen(src), &bd);
    if (rc != KL_OK)
        fprintf(stderr, "build failed: %s\n", bd.log);
    assert_int_equal(rc, KL_OK);
    kla_runner_measure(F.runner, p, F.ref.so_path, "ref", bd.so_path, "k", res);
    free(src);
}

static void test_layout(void **state)
{
    (void)state;
    assert_int_equal(sizeof(s_mirror_t), sizeof(kla_cand_msg_t));
    assert_int_equal(offsetof(s_mirror_t, t_c), offsetof(kla_cand_msg_t, t_c));
    assert_int_equal(offsetof(s_mirror_t, msg), offsetof(kla_cand_msg_t, msg));
    assert_int_equal(KLA_CAND_MAGIC, 0x6b6c6a32u);
    assert_int_equal(KLA_CM_CALLED, 1);
    assert_int_equal(KLA_CM_READY, 4);
    assert_int_equal(KLA_CM_DONE, 5);
    assert_int_equal(KLA_CM_END, 7);
}

static void test_honest(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p, "void k(void *const *args) { mm(args); }\n", &r);
    if (r.status != KILN__STATUS__STATUS_OK)
        fprintf(stderr, "honest: %s\n", r.error);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    assert_int_equal(r.n_samples, 3);
    kla_result_clear(&r);
}

/* A message in the middle of the timing: the warden kills it. */
static void test_forged_done(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p,
          "static int calls;\n"
          "void k(void *const *args) { mm(args);\n"
          "  if (calls++ >= 1) say(5, 1e-9); }\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "broke the harness protocol"));
    assert_int_equal(r.n_samples, 0);
    kla_result_clear(&r);
}

/* The whole harness impersonated from the first call: right outputs,
 * then samples claiming 1 us while the process burns 250 ms of CPU in
 * each. The kernel's CPU account contradicts the claim. */
static void test_impersonated_cpu(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p,
          "void k(void *const *args) { mm(args);\n"
          "  say(1, 0); hear();\n"
          "  for (int s = 0; s < 3; s++) { say(4, 0); hear(); burn(0.25);\n"
          "    say(5, 1e-6); }\n"
          "  say(7, 0); _exit(0); }\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "timing refused"));
    assert_non_null(strstr(r.error, "of CPU time in it"));
    kla_result_clear(&r);
}

/* A claim longer than the warden's own clock saw. */
static void test_claim_over_wall(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p,
          "void k(void *const *args) { mm(args);\n"
          "  say(1, 0); hear();\n"
          "  for (int s = 0; s < 3; s++) { say(4, 0); hear(); say(5, 10.0); }\n"
          "  say(7, 0); _exit(0); }\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "but the sandbox timed it"));
    kla_result_clear(&r);
}

/* Half a second of CPU in the verified first call, then samples that
 * claim 1 ns and take none: below the floor the first call's CPU account
 * sets. */
static void test_first_call_floor(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p,
          "void k(void *const *args) { burn(0.5); mm(args);\n"
          "  say(1, 0); hear();\n"
          "  for (int s = 0; s < 3; s++) { say(4, 0); hear(); say(5, 1e-9); }\n"
          "  say(7, 0); _exit(0); }\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_RUNTIME_ERROR);
    assert_non_null(strstr(r.error, "in its first, verified call"));
    kla_result_clear(&r);
}

/* A kernel that closes its channel and never returns: killed at the
 * timeout, and the next candidate runs. */
static void test_closed_channel(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    p.eval.timeout_ms = 1500;
    kla_result_t r;
    double t0 = kl_now_s();
    s_run(&p,
          "void k(void *const *args) { (void)args; close(7);\n"
          "  for (;;) burn(1); }\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_TIMEOUT);
    assert_true(kl_now_s() - t0 < 30); /* a hang bound, not a speed */
    kla_result_clear(&r);
    test_honest(state);
}

/* After a right answer on the same problem, a kernel that writes nothing
 * finds poison, not the other's outputs. */
static void test_outputs_poisoned(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 2);
    kla_result_t r;
    s_run(&p, "void k(void *const *args) { mm(args); }\n", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    s_run(&p, "void k(void *const *args) { (void)args; }\n", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_WRONG_RESULT);
    assert_non_null(strstr(r.error, "is nan"));
    kla_result_clear(&r);
}

/* A kernel that scribbles on its inputs, maps them shared and writable,
 * and shrinks every buffer it has a descriptor of: the next candidate of
 * the same problem gets the inputs unchanged, and the agent lives. */
static void test_inputs_sealed(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 3);
    kla_result_t r;
    s_run(&p,
          "void k(void *const *args) {\n"
          "  float *A = (float *)args[0];\n"
          "  for (int i = 0; i < 64 * 64; i++) A[i] = 0;\n"
          "  for (int fd = 3; fd < 8; fd++) {\n"
          "    void *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,"
          " 0);\n"
          "    if (m != MAP_FAILED) memset(m, 0, 4096);\n"
          "    ftruncate(fd, 0); }\n"
          "  mm(args); }\n",
          &r);
    /* Its own copy of A was zeroed, so its output is wrong or, if the
     * outputs were shrunk under the agent, the agent would have died. */
    assert_int_not_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    s_run(&p, "void k(void *const *args) { mm(args); }\n", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
}

/* What the seccomp filter refuses: the kernel computes the right answer
 * only when every attempt failed, so OK means all were refused. */
static void test_seccomp(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 1);
    kla_result_t r;
    s_run(&p,
          "#include <sys/ptrace.h>\n#include <signal.h>\n"
          "void k(void *const *args) { int bad = 0;\n"
          "  bad += socket(AF_INET, SOCK_STREAM, 0) >= 0;\n"
          "  bad += socket(AF_UNIX, SOCK_STREAM, 0) >= 0;\n"
          "  pid_t c = fork(); if (c == 0) _exit(0); bad += c > 0;\n"
          "  char *argv[] = {\"/bin/true\", 0};\n"
          "  bad += execve(\"/bin/true\", argv, 0) == 0;\n"
          "  bad += ptrace(PTRACE_ATTACH, 1, 0, 0) == 0;\n"
          "  bad += kill(1, SIGKILL) == 0;\n"
          "  bad += open(\"/tmp/../etc/kiln-written\", O_CREAT | O_WRONLY, "
          "0644) >= 0;\n"
          "  bad += open(\"/etc/ld.so.preload\", O_CREAT | O_WRONLY, "
          "0644) >= 0;\n"
          "  bad += open(\"/kiln-written\", O_CREAT | O_WRONLY, 0644) >= 0;\n"
          "  bad += open(\"/dev/kiln-written\", O_CREAT | O_WRONLY, 0644) >= "
          "0;\n"
          "  mm(args); if (bad) ((float *)args[2])[0] += 1000.0f * bad; }\n",
          &r);
    if (F.sandbox) {
        if (r.status != KILN__STATUS__STATUS_OK)
            fprintf(stderr, "seccomp: %s\n", r.error);
        assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    } else {
        kla_result_clear(&r);
        skip();
    }
    kla_result_clear(&r);
}

/* What one candidate leaves in its /tmp and /dev/shm is gone for the
 * next: the second computes the right answer only when it finds nothing. */
static void test_nothing_persists(void **state)
{
    (void)state;
    kla_problem_t p;
    s_problem(&p, 5);
    kla_result_t r;
    s_run(&p,
          "void k(void *const *args) { mm(args);\n"
          "  close(open(\"/tmp/kiln-left\", O_CREAT | O_WRONLY, 0644));\n"
          "  close(open(\"/dev/shm/kiln-left\", O_CREAT | O_WRONLY, 0644)); "
          "}\n",
          &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    s_run(&p,
          "void k(void *const *args) { mm(args);\n"
          "  if (access(\"/tmp/kiln-left\", F_OK) == 0 ||\n"
          "      access(\"/dev/shm/kiln-left\", F_OK) == 0)\n"
          "    ((float *)args[2])[0] += 1000.0f; }\n",
          &r);
    if (!F.sandbox) {
        kla_result_clear(&r);
        skip();
    }
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
}

/* --unsafe-no-sandbox: the same runner code without namespaces still
 * measures (and the agent marks such results). */
static void test_unsafe_mode(void **state)
{
    (void)state;
    bool was = kla_jail_unsafe();
    kla_jail_set_unsafe(true);
    char err[KL_ERRMSG_LEN];
    kla_runner_t *r2 = NULL;
    kla_runner_config_t rc = {.llc_bytes = 1 << 20};
    assert_int_equal(kla_runner_new(&r2, &rc, err), KL_OK);
    kla_problem_t p;
    s_problem(&p, 4);
    const char *src = S_MSG_DECL "void k(void *const *args) { mm(args); }\n";
    kla_build_t bd;
    assert_int_equal(kla_builder_build(F.builder, src, strlen(src), &bd),
                     KL_OK);
    kla_result_t r;
    kla_runner_measure(r2, &p, F.ref.so_path, "ref", bd.so_path, "k", &r);
    assert_int_equal(r.status, KILN__STATUS__STATUS_OK);
    kla_result_clear(&r);
    kla_runner_destroy(&r2);
    kla_jail_set_unsafe(was);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_honest),
        cmocka_unit_test(test_forged_done),
        cmocka_unit_test(test_impersonated_cpu),
        cmocka_unit_test(test_claim_over_wall),
        cmocka_unit_test(test_first_call_floor),
        cmocka_unit_test(test_closed_channel),
        cmocka_unit_test(test_outputs_poisoned),
        cmocka_unit_test(test_inputs_sealed),
        cmocka_unit_test(test_seccomp),
        cmocka_unit_test(test_nothing_persists),
        cmocka_unit_test(test_unsafe_mode),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
