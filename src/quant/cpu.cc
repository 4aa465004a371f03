#include "quant/cpu.h"

#include <cpuid.h>

namespace larql::quant {
namespace {

struct Features {
  bool avxvnni = false, avx512 = false, avx512vnni = false;
};

unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

Features read() {
  Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return f;  // OSXSAVE
  const unsigned long long x = xcr0();
  const bool ymm = (x & 0x6) == 0x6, zmm = ymm && (x & 0xE0) == 0xE0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const unsigned b7 = b, c7 = c;
  f.avx512 = zmm && (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
  f.avx512vnni = f.avx512 && (c7 & (1u << 11));
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = ymm && (a & (1u << 4));
  return f;
}

const Features& features() {
  static const Features f = read();
  return f;
}

}  // namespace

bool cpu_has_avxvnni() { return features().avxvnni; }
bool cpu_has_avx512() { return features().avx512; }
bool cpu_has_avx512vnni() { return features().avx512vnni; }

}  // namespace larql::quant
