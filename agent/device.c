/* device.c - CPU detection and core lists for kiln-agent. */
#include "kla_device.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kl_err.h"
#include "kl_target.h"

const char *kla_device_target(void)
{
    return kl_cpu_target();
}

/* The model name and clock of the first CPU in /proc/cpuinfo. */
static void s_cpuinfo(char *out, size_t n, uint32_t *mhz)
{
    snprintf(out, n, "unknown cpu");
    *mhz = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    bool named = false;
    while (fgets(line, sizeof line, f) && !(named && *mhz)) {
        double clock;
        if (!*mhz && sscanf(line, "cpu MHz : %lf", &clock) == 1 && clock > 0 &&
            clock < 1e6)
            *mhz = (uint32_t)(clock + 0.5);
        if (named || strncmp(line, "model name", 10) != 0)
            continue;
        named = true;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        size_t len = strcspn(v, "\n");
        while (len > 0 && isspace((unsigned char)v[len - 1]))
            len--;
        if (len > 0)
            snprintf(out, n, "%.*s", (int)len, v);
    }
    fclose(f);
}

/* Parses "32768K", "36M" or a plain byte count as sysfs writes them. */
static uint64_t s_parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return 0;
    if (*end == 'K' || *end == 'k')
        v <<= 10;
    else if (*end == 'M' || *end == 'm')
        v <<= 20;
    else if (*end == 'G' || *end == 'g')
        v <<= 30;
    return v;
}

static uint64_t s_llc_sysfs(void)
{
    uint64_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 16; i++) {
        char path[128], buf[64];
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        int level = 0;
        if (fscanf(f, "%d", &level) != 1)
            level = 0;
        fclose(f);
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f)
            continue;
        uint64_t size = 0;
        if (fgets(buf, sizeof buf, f))
            size = s_parse_size(buf);
        fclose(f);
        if (level > best_level || (level == best_level && size > best)) {
            best_level = level;
            best = size;
        }
    }
    return best;
}

void kla_device_detect(kla_device_t *out)
{
    memset(out, 0, sizeof *out);
    s_cpuinfo(out->name, sizeof out->name, &out->clock_mhz);
    snprintf(out->target, sizeof out->target, "%s", kla_device_target());
    kla_cores_t c;
    kla_cores_affinity(&c);
    out->cores = (uint32_t)c.n;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psize > 0)
        out->memory_bytes = (uint64_t)pages * (uint64_t)psize;
    long llc = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    out->llc_bytes = llc > 0 ? (uint64_t)llc : s_llc_sysfs();
    if (out->llc_bytes == 0)
        out->llc_bytes = 32u << 20;
}

static int s_cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

int kla_cores_parse(const char *text, kla_cores_t *out, char *err)
{
    out->n = 0;
    if (!text || !*text)
        return kl_seterr(err, KL_ERR_INVAL, "core list is empty");
    char seen[KLA_MAX_CORES] = {0};
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long lo = strtol(p, &end, 10), hi;
        if (end == p || errno || lo < 0 || lo >= KLA_MAX_CORES)
            goto bad;
        hi = lo;
        p = end;
        if (*p == '-') {
            p++;
            hi = strtol(p, &end, 10);
            if (end == p || hi < lo || hi >= KLA_MAX_CORES)
                goto bad;
            p = end;
        }
        for (long c = lo; c <= hi; c++)
            if (!seen[c]) {
                seen[c] = 1;
                out->cpu[out->n++] = (int)c;
            }
        if (*p == ',')
            p++;
        else if (*p)
            goto bad;
    }
    qsort(out->cpu, (size_t)out->n, sizeof(int), s_cmp_int);
    return KL_OK;
bad:
    out->n = 0;
    return kl_seterr(err, KL_ERR_INVAL,
                     "core list '%s': expected numbers and ranges such as "
                     "0-3,6 (each below %d)",
                     text, KLA_MAX_CORES);
}

void kla_cores_affinity(kla_cores_t *out)
{
    out->n = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        for (long i = 0; i < n && i < KLA_MAX_CORES; i++)
            out->cpu[out->n++] = (int)i;
        return;
    }
    for (int i = 0; i < CPU_SETSIZE && i < KLA_MAX_CORES; i++)
        if (CPU_ISSET(i, &set))
            out->cpu[out->n++] = i;
}

bool kla_cores_disjoint(const kla_cores_t *a, const kla_cores_t *b)
{
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < b->n; j++)
            if (a->cpu[i] == b->cpu[j])
                return false;
    return true;
}

int kla_cores_pin(const kla_cores_t *c)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < c->n; i++)
        if (c->cpu[i] < CPU_SETSIZE)
            CPU_SET(c->cpu[i], &set);
    return sched_setaffinity(0, sizeof set, &set) == 0 ? KL_OK : KL_ERR_IO;
}

void kla_cores_format(const kla_cores_t *c, char *buf, int n)
{
    int used = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n && used < n;) {
        int j = i;
        while (j + 1 < c->n && c->cpu[j + 1] == c->cpu[j] + 1)
            j++;
        int w = j > i ? snprintf(buf + used, (size_t)(n - used), "%s%d-%d",
                                 used ? "," : "", c->cpu[i], c->cpu[j])
                      : snprintf(buf + used, (size_t)(n - used), "%s%d",
                                 used ? "," : "", c->cpu[i]);
        if (w < 0)
            break;
        used += w;
        i = j + 1;
    }
}
