/* mm_fx.h - the 64x64 matmul the CPU agent's tests build and measure
 * (builder_gate_test.c, runner_measure_test.c, runner_test.c,
 * agent_prepare_test.c): its naive reference kernel, C = A B over three
 * 64x64 f32 arguments (A, B, then the output C), as C source. */
#ifndef MM_FX_H
#define MM_FX_H

/* The naive reference, entry "ref": i, k, j order, accumulating into C. */
static const char *fx_ref_src =
    "void ref(void *const *args) {\n"
    "  const float *A = args[0], *B = args[1]; float *C = args[2];\n"
    "  for (int i = 0; i < 64 * 64; i++) C[i] = 0;\n"
    "  for (int i = 0; i < 64; i++)\n"
    "    for (int k = 0; k < 64; k++)\n"
    "      for (int j = 0; j < 64; j++)\n"
    "        C[i * 64 + j] += A[i * 64 + k] * B[k * 64 + j];\n"
    "}\n";

#endif
