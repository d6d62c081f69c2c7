/* kl_intrin.c - the tensor intrinsic table (kl_intrin.h). */
#include <stdio.h>
#include <string.h>

#include "kl_intrin.h"

static const kl_intrin_t s_table[] = {
    {"avx512_vnni", 16, 4, KL_DT_U8, KL_DT_S8, KL_DT_S32, "[K/4][N][4]",
     "avx512_vnni", "avx512f,avx512bw,avx512vnni",
     "-mavx512f -mavx512bw -mavx512vnni", "avx512vnni", 0, 0, 0},
    {"avx_vnni", 8, 4, KL_DT_U8, KL_DT_S8, KL_DT_S32, "[K/4][N][4]", "avx_vnni",
     "avx2,avxvnni", "-mavx2 -mavxvnni", "avxvnni", 0, 0, 0},
    {"avx2_i8", 8, 4, KL_DT_U8, KL_DT_S8, KL_DT_S32, "[K/4][N][4]", "avx2",
     "avx2", "-mavx2", "avx2", 0, 0, 0},
    {"avx512_bf16", 16, 2, KL_DT_BF16, KL_DT_BF16, KL_DT_F32, "[K/2][N][2]",
     "avx512_bf16", "avx512f,avx512bf16", "-mavx512f -mavx512bf16",
     "avx512bf16", 0, 0, 0},
    {"amx_bf16", 16, 2, KL_DT_BF16, KL_DT_BF16, KL_DT_F32, "[K/2][N][2]",
     "amx_bf16", "amx-tile,amx-bf16", "-mamx-tile -mamx-bf16", "amx-bf16", 16,
     64, 8},
    {"amx_int8", 16, 4, KL_DT_U8, KL_DT_S8, KL_DT_S32, "[K/4][N][4]",
     "amx_int8", "amx-tile,amx-int8", "-mamx-tile -mamx-int8", "amx-int8", 16,
     64, 8},
};

int kl_intrin_count(void)
{
    return (int)(sizeof s_table / sizeof s_table[0]);
}

const kl_intrin_t *kl_intrin_at(int i)
{
    return i >= 0 && i < kl_intrin_count() ? &s_table[i] : NULL;
}

const kl_intrin_t *kl_intrin_find(const char *name)
{
    for (int i = 0; name && i < kl_intrin_count(); i++)
        if (strcmp(s_table[i].name, name) == 0)
            return &s_table[i];
    return NULL;
}

bool kl_intrin_cpu_has(const kl_intrin_t *in)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return false;
    char line[8192];
    bool has = false;
    size_t n = strlen(in->feature);
    while (!has && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) != 0)
            continue;
        for (char *p = strstr(line, in->feature); p && !has;
             p = strstr(p + 1, in->feature))
            has = p[-1] == ' ' && (p[n] == ' ' || p[n] == '\n' || !p[n]);
        break;
    }
    fclose(f);
    return has;
}
