// CPU features the kernel variants need, read with CPUID and XGETBV directly (Intel SDM vol. 2A,
// CPUID leaf 7; clang's __builtin_cpu_supports does not know every name, e.g. "avxvnni").
#pragma once

namespace larql::quant {

/// AVX-VNNI (VEX vpdpbusd): CPUID.(7,1):EAX[4], with the OS saving YMM state.
bool cpu_has_avxvnni();
/// AVX-512 F, DQ, BW, VL with the OS saving ZMM state (XCR0 bits 1, 2, 5, 6, 7).
bool cpu_has_avx512();
/// cpu_has_avx512() and AVX512-VNNI: CPUID.(7,0):ECX[11].
bool cpu_has_avx512vnni();

}  // namespace larql::quant
