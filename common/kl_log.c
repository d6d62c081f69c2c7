#include "kl_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int kl_log_level_current = KL_LOG_WARN;
static char s_tag[32] = "kiln";

void kl_log_init(const char *tag)
{
    if (tag)
        snprintf(s_tag, sizeof s_tag, "%s", tag);
    const char *env = getenv("KILN_LOG");
    if (!env)
        return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(env, names[i]) == 0)
            kl_log_level_current = i;
}

void kl_log_set_level(int level)
{
    kl_log_level_current = level;
}

void kl_log_write(int level, const char *fmt, ...)
{
    static const char letters[] = "EWID";
    char line[2048];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof line,
                     "%02d:%02d:%02d.%03d %c %s[%d]: ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000),
                     letters[level < 0   ? 0
                             : level > 3 ? 3
                                         : level],
                     s_tag, (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line keeps lines of concurrent processes whole. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
