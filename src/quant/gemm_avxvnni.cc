// Tiled kernels (quant/gemm.h) for AVX-VNNI (VEX-encoded 256-bit dpbusd: Alder Lake, Sapphire
// Rapids, Zen 5). Bit-identical to the AVX2 kernels: only the integer instructions differ.
#define LARQL_GEMM_VNNI 1
#define LARQL_GEMM_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32(acc, u, s)
#define LARQL_GEMM_ENTRY gemm_avxvnni
#define LARQL_GEMV_ENTRY gemv_avxvnni
#define LARQL_GEMM_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32(acc, a, b)
#include "quant/gemm_x86.inl"
