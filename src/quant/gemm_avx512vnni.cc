// Tiled kernels (quant/gemm.h) for AVX512-VNNI + VL (EVEX-encoded 256-bit dpbusd: Ice Lake,
// Zen 4, which lack the VEX form). Bit-identical to the AVX2 kernels.
#define LARQL_GEMM_VNNI 1
#define LARQL_GEMM_DPBUSD(acc, u, s) _mm256_dpbusd_epi32(acc, u, s)
#define LARQL_GEMM_ENTRY gemm_avx512vnni
#define LARQL_GEMV_ENTRY gemv_avx512vnni
#include "quant/gemm_x86.inl"
