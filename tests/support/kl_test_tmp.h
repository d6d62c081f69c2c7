/* kl_test_tmp.h - where tests put temporary files: under $TMPDIR (when
 * set and not empty), else /tmp; never a fixed name. No dependencies
 * (test_tmp_dep in tests/support/meson.build). */
#ifndef KL_TEST_TMP_H
#define KL_TEST_TMP_H

#include <stddef.h>

/* getenv("TMPDIR") when set and not empty, else "/tmp". */
const char *kl_test_tmpdir(void);

/* Makes a fresh directory from tmpl, a name ending in "XXXXXX" (mkdtemp),
 * under kl_test_tmpdir(): its path goes to buf (n bytes). Returns buf, or
 * NULL with errno set (ENAMETOOLONG when the path does not fit). */
char *kl_test_mkdtemp(char *buf, size_t n, const char *tmpl);

/* Removes the files directly in dir (not subdirectories), then dir.
 * Returns rmdir's result (0, or -1 with errno). For a directory made by
 * kl_test_mkdtemp that holds only files. */
int kl_test_rmdir(const char *dir);

/* kl_test_tmpdir()/name into buf (n bytes): a file name for a test that
 * makes it unique itself (its pid). Returns buf, or NULL (ENAMETOOLONG). */
char *kl_test_tmppath(char *buf, size_t n, const char *name);

#endif
