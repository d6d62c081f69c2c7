/* kl_test_tmp.c - see kl_test_tmp.h. */
#include "kl_test_tmp.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int kl_test_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t n = strlen(dir) + 258;
    char *path = malloc(n);
    while (d && path && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, n, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    free(path);
    if (d)
        closedir(d);
    return rmdir(dir);
}

char *kl_test_mkdtemp(char *buf, size_t n, const char *tmpl)
{
    if (!kl_test_tmppath(buf, n, tmpl))
        return NULL;
    return mkdtemp(buf);
}
