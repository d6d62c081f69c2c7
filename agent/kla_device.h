/* kla_device.h - what the CPU agent knows about its machine: the device it
 * reports in Hello (model, target string, cores, memory, last-level cache)
 * and lists of cores ("0-3,6") for pinning measurements and builds. */
#ifndef KLA_DEVICE_H
#define KLA_DEVICE_H

#include <stdbool.h>
#include <stdint.h>

#define KLA_MAX_CORES 1024

typedef struct {
    char name[128];  /* /proc/cpuinfo "model name", or "unknown cpu" */
    char target[32]; /* "cpu/x86_64-avx512", "cpu/x86_64-avx2", ... */
    uint32_t cores;  /* CPUs this process may run on (sched_getaffinity) */
    uint64_t memory_bytes;
    uint64_t llc_bytes; /* last-level cache; 0 when unknown */
    uint32_t clock_mhz; /* /proc/cpuinfo "cpu MHz" of the first CPU; 0 */
} kla_device_t;

/* Fills out from the running machine. Never fails: what cannot be read is
 * left at a safe value (llc_bytes falls back to 32 MiB when neither sysconf
 * nor sysfs tells). */
void kla_device_detect(kla_device_t *out);

/* The target string of this machine's CPU: "cpu/x86_64-avx512" when
 * avx512f is there, "cpu/x86_64-avx2" with avx2 and fma, "cpu/x86_64"
 * otherwise, "cpu/aarch64" on 64-bit ARM. Static string. */
const char *kla_device_target(void);

/* A set of CPU numbers, in increasing order without duplicates. */
typedef struct {
    int n;
    int cpu[KLA_MAX_CORES];
} kla_cores_t;

/* Parses a list such as "0-3,6,8-9" into out. Empty text, a bad number, a
 * reversed range or a CPU >= KLA_MAX_CORES is KL_ERR_INVAL with a message
 * naming the list. */
int kla_cores_parse(const char *text, kla_cores_t *out, char *err);
/* The CPUs this process may run on now. */
void kla_cores_affinity(kla_cores_t *out);
/* True when no CPU is in both sets. */
bool kla_cores_disjoint(const kla_cores_t *a, const kla_cores_t *b);
/* Pins the calling thread (or, after fork, process) to the set.
 * Returns 0 or KL_ERR_IO. Async-signal-safe (one system call). */
int kla_cores_pin(const kla_cores_t *c);
/* Writes the list as text ("0-1,4") into buf of n bytes. */
void kla_cores_format(const kla_cores_t *c, char *buf, int n);

#endif
