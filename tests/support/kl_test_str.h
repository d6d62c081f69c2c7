/* kl_test_str.h - string checks that several tests make on what a module
 * printed (SVG, HTML, a terminal's lines). No dependencies (test_tmp_dep
 * in tests/support/meson.build links it). */
#ifndef KL_TEST_STR_H
#define KL_TEST_STR_H

/* How many times needle (not empty) occurs in hay, the occurrences not
 * overlapping (counted from the left). */
int kl_test_count(const char *hay, const char *needle);

#endif
