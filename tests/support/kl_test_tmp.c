/* kl_test_tmp.c - see kl_test_tmp.h. */
#include "kl_test_tmp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

const char *kl_test_tmpdir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

char *kl_test_tmppath(char *buf, size_t n, const char *name)
{
    int k = snprintf(buf, n, "%s/%s", kl_test_tmpdir(), name);
    if (k < 0 || (size_t)k >= n) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    return buf;
}

char *kl_test_mkdtemp(char *buf, size_t n, const char *tmpl)
{
    if (!kl_test_tmppath(buf, n, tmpl))
        return NULL;
    return mkdtemp(buf);
}
