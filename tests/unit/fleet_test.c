/* Unit tests of tools/fleet (the local kiln-agent fleet) without starting
 * agents: the temp dir, the ephemeral keys and their allow-list, finding
 * kiln-agent, and cleanup. Starting agents is covered by the integration
 * tests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_fleet.h"
#include "kl_err.h"
#include "kl_net.h"
#include "kl_util.h"

static bool s_exists(const char *dir, const char *file)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return access(p, F_OK) == 0;
}

static void test_keys_and_cleanup(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_fleet_t *f = NULL;
    kl_fleet_config_t cfg = {.n_agents = 3, .agent_path = "/bin/true"};
    assert_int_equal(kl_fleet_new(&f, &cfg, err), KL_OK);
    const kl_net_security_t *sec = kl_fleet_security(f);
    assert_false(sec->insecure);
    assert_string_equal(sec->name, "coordinator");
    char *keys = kl_xstrdup(sec->keys_dir), *allow = kl_xstrdup(sec->allow_dir);
    assert_true(s_exists(keys, "coordinator.key"));
    assert_true(s_exists(keys, "coordinator.pub"));
    assert_true(s_exists(allow, "agent-0.pub"));
    assert_true(s_exists(allow, "agent-2.pub"));
    assert_false(s_exists(allow, "agent-3.pub"));
    struct stat st;
    char p[4096];
    snprintf(p, sizeof p, "%s/coordinator.key", keys);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(st.st_mode & 077, 0);
    /* The keys work for a real CURVE server. */
    kl_net_t *srv = NULL;
    assert_int_equal(kl_net_server_new(&srv, "tcp://127.0.0.1:*", sec, err),
                     KL_OK);
    kl_net_destroy(&srv);
    assert_int_equal(kl_fleet_running(f), 0);
    kl_fleet_destroy(&f);
    assert_null(f);
    assert_int_equal(access(keys, F_OK), -1); /* temp dir and keys gone */
    free(keys);
    free(allow);
}

static void test_insecure_and_find(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_fleet_t *f = NULL;
    kl_fleet_config_t cfg = {
        .n_agents = 1, .insecure = true, .agent_path = "/bin/true"};
    assert_int_equal(kl_fleet_new(&f, &cfg, err), KL_OK);
    assert_true(kl_fleet_security(f)->insecure);
    kl_fleet_destroy(&f);
    char path[4096];
    setenv("KILN_AGENT", "/nonexistent/kiln-agent", 1);
    assert_int_equal(kl_fleet_find_agent(path, sizeof path, err),
                     KL_ERR_NOTFOUND);
    assert_non_null(strstr(err, "/nonexistent/kiln-agent"));
    setenv("KILN_AGENT", "/bin/true", 1);
    assert_int_equal(kl_fleet_find_agent(path, sizeof path, err), KL_OK);
    assert_string_equal(path, "/bin/true");
    unsetenv("KILN_AGENT");
    cfg.n_agents = -1;
    assert_int_equal(kl_fleet_new(&f, &cfg, err), KL_ERR_INVAL);
}

static void test_start_and_stop(void **state)
{
    (void)state;
    char err[KL_ERRMSG_LEN];
    kl_fleet_t *f = NULL;
    /* /bin/false stands in for an agent that cannot start: it exits at
     * once, and the fleet counts it as gone. */
    kl_fleet_config_t cfg = {
        .n_agents = 2, .insecure = true, .agent_path = "/bin/false"};
    assert_int_equal(kl_fleet_new(&f, &cfg, err), KL_OK);
    assert_int_equal(kl_fleet_start(f, "tcp://127.0.0.1:1", err), KL_OK);
    double until = kl_now_s() + 5;
    while (kl_fleet_running(f) > 0 && kl_now_s() < until)
        usleep(10000);
    assert_int_equal(kl_fleet_running(f), 0);
    kl_fleet_destroy(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_and_cleanup),
        cmocka_unit_test(test_insecure_and_find),
        cmocka_unit_test(test_start_and_stop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
