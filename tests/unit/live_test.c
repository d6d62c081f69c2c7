/* Unit tests of coordinator/report's live view (kl_live): the redrawn
 * block's ANSI sequences, rate-limited plain lines, the progress bar. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kl_live.h"
#include "kl_test_str.h"
#include "kl_util.h"

static char *s_read_back(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = kl_xcalloc(1, (size_t)n + 1);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

static void test_live_block(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    kl_live_t *l = kl_live_new(f, KL_LIVE_BLOCK, 0);
    assert_true(kl_live_is_block(l));
    kl_job_progress_t p = {
        .trials = 5, .cap = 10, .best_s = 1e-3, .gflops = 2, .eta_s = 3};
    kl_live_tune(l, "mm", &p);
    p.trials = 10;
    p.done = true;
    kl_live_tune(l, "mm", &p); /* forced: done */
    kl_live_destroy(&l);
    char *s = s_read_back(f);
    /* The second draw goes back up over the 5 lines of the first. */
    assert_int_equal(kl_test_count(s, "\033[5A"), 1);
    assert_non_null(strstr(s, "[###############...............]  50%"));
    assert_non_null(strstr(s, "] 100%  trials 10/10"));
    assert_non_null(strstr(s, "best 2.00 GFLOP/s (1000.00 us)"));
    free(s);
    fclose(f);
}

static void test_live_lines(void **state)
{
    (void)state;
    FILE *f = tmpfile();
    kl_live_t *l = kl_live_new(f, KL_LIVE_LINES, 60);
    assert_false(kl_live_is_block(l));
    kl_job_progress_t p = {.trials = 1, .cap = 10, .best_s = INFINITY};
    for (int i = 0; i < 5; i++)
        kl_live_tune(l, NULL, &p); /* one line, then rate-limited */
    kl_ts_row_t rows[1] = {{"t0", 1e6, 1, 1e-3, 4, true, "cap"}};
    kl_live_tasks(l, "round 1", rows, 1, 4, 8, true);
    kl_live_destroy(&l);
    char *s = s_read_back(f);
    assert_int_equal(kl_test_count(s, "\n"), 3);
    assert_int_equal(kl_test_count(s, "no valid candidate yet"), 1);
    assert_null(strchr(s, '\033'));
    assert_non_null(strstr(s, "round 1\n"));
    assert_non_null(strstr(s, "trials 4/8, tasks done 1/1"));
    free(s);
    fclose(f);

    char bar[64];
    kl_live_bar(bar, sizeof bar, 4, 3, 0);
    assert_string_equal(bar, "[....]   0%");
    kl_live_bar(bar, 5, 4, 3, 4); /* too small: empty */
    assert_string_equal(bar, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_live_block),
        cmocka_unit_test(test_live_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
