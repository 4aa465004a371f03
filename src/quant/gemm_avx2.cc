// Tiled kernels (quant/gemm.h) for AVX2: maddubs + madd integer pipeline.
#define LARQL_GEMM_VNNI 0
#define LARQL_GEMM_ENTRY gemm_avx2
#define LARQL_GEMV_ENTRY gemv_avx2
#include "quant/gemm_x86.inl"
