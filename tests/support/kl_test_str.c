/* kl_test_str.c - see kl_test_str.h. */
#include <string.h>

#include "kl_test_str.h"

int kl_test_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}
