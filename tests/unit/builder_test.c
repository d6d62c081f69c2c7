/* Unit tests of the builder's confinement (kla_builder.h): the source
 * check, the bubblewrap sandbox of the compiler and its limits, the
 * trimming of its messages and the checked cache. Real compiler; the
 * sandbox tests skip() where bwrap cannot make a sandbox, and the others
 * then run with --unsafe-no-sandbox's path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_err.h"
#include "kl_util.h"
#include "kla_builder.h"
#include "kla_jail.h"
#include "kl_test_tmp.h"

typedef struct {
    char dir[256];
    kla_builder_t *builder;
    bool jail; /* bwrap makes sandboxes here */
} fix_t;

static fix_t F;

static int s_setup(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    F.jail = kla_jail_probe(err) == KL_OK;
    if (!F.jail) {
        fprintf(stderr, "# no sandbox (%s): sandbox tests skip\n", err);
        kla_jail_set_unsafe(true);
    }
    if (!kl_test_mkdtemp(F.dir, sizeof F.dir, "kla-build-XXXXXX"))
        return -1;
    kla_builder_config_t bc = {.workdir = F.dir, .cflags = "-O2"};
    return kla_builder_new(&F.builder, &bc, err) == KL_OK ? 0 : -1;
}

static int s_teardown(void **state)
{
    (void)state;
    kla_builder_destroy(&F.builder);
    char *cmd = kl_xasprintf("rm -rf '%s'", F.dir);
    int rc = system(cmd);
    free(cmd);
    return rc == 0 ? 0 : -1;
}

static int s_build(const char *src, kla_build_t *bd)
{
    return kla_builder_build(F.builder, src, strlen(src), bd);
}

/* A normal build works, lands in the cache with its sum, and a second
 * build is a hit that does not run the compiler. */
static void test_build_and_hit(void **state)
{
    (void)state;
    const char *src = "#include <math.h>\n#include \"stdlib.h\"\n"
                      "double k(double x) { return sqrt(x) + abs(-2); }\n";
    unsigned before = kla_builder_compiles(F.builder);
    kla_build_t bd;
    int rc = s_build(src, &bd);
    if (rc != KL_OK)
        fprintf(stderr, "build: %s\n", bd.log);
    assert_int_equal(rc, KL_OK);
    assert_true(bd.ok);
    assert_false(bd.cache_hit);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
    struct stat st;
    assert_int_equal(lstat(bd.so_path, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(st.st_mode & (S_IWGRP | S_IWOTH), 0);
    char sum[PATH_MAX + 8];
    snprintf(sum, sizeof sum, "%s.sum", bd.so_path);
    assert_int_equal(lstat(sum, &st), 0);
    assert_int_equal(st.st_size, 33);
    kla_build_t again;
    assert_int_equal(s_build(src, &again), KL_OK);
    assert_true(again.cache_hit);
    assert_string_equal(again.so_path, bd.so_path);
    assert_int_equal(kla_builder_compiles(F.builder), before + 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_build_and_hit),
    };
    return cmocka_run_group_tests(tests, s_setup, s_teardown);
}
