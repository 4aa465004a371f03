// Memory stays proportional to the file: metadata arrays are views into the mapping, decoded on
// use, and each metadata entry costs a small fixed amount. Measured with a counting global
// operator new (this binary only), so the numbers are exact heap bytes, not timings.
// Before arrays became views, each element cost a 48-byte GgufValue: a 30-million-element uint8
// array in a 30 MB file took 1.44 GB.
#include <malloc.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "formats/gguf_bytes.h"

namespace {

std::atomic<long long> g_live{0};
std::atomic<long long> g_peak{0};

void count_alloc(void* p) {
  const long long now = g_live += static_cast<long long>(malloc_usable_size(p));
  long long peak = g_peak.load();
  while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
  }
}

void* counted_new(std::size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  count_alloc(p);
  return p;
}

void counted_delete(void* p) noexcept {
  if (p == nullptr) return;
  g_live -= static_cast<long long>(malloc_usable_size(p));
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }

namespace larql {
namespace {

using testing::RawGguf;

// Peak heap bytes above the level at construction, while the object lives.
class HeapPeak {
 public:
  HeapPeak() : start_(g_live.load()) { g_peak = start_; }
  long long bytes() const { return g_peak.load() - start_; }

 private:
  long long start_;
};

class TempFile {
 public:
  explicit TempFile(const std::vector<uint8_t>& bytes) {
    static int n = 0;
    path = (std::filesystem::path(::testing::TempDir()) /
            ("larql-gguf-mem-" + std::to_string(::getpid()) + "-" + std::to_string(n++) + ".gguf"))
               .string();
    FILE* f = std::fopen(path.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  ~TempFile() { std::filesystem::remove(path); }
  std::string path;
};

// A metadata-only file: general.architecture, then key "big" holding `count` elements of
// `elem_type`, each encoded as `elem` (the spec's array layout: u32 type | u64 count | elements).
std::vector<uint8_t> one_array_file(uint32_t elem_type, uint64_t count, const std::vector<uint8_t>& elem) {
  RawGguf g;
  g.header(3, 0, 2).kv_str("general.architecture", "gemma3");
  g.str("big").u32(9).u32(elem_type).u64(count);
  g.bytes.reserve(g.bytes.size() + count * elem.size());
  for (uint64_t i = 0; i < count; ++i) g.bytes.insert(g.bytes.end(), elem.begin(), elem.end());
  return g.bytes;
}

TEST(GgufMemory, ArrayElementsCostNoHeap) {
  constexpr uint64_t kN = 4'000'000;
  struct Case {
    const char* name;
    uint32_t type;
    std::vector<uint8_t> elem;
  };
  const std::vector<Case> cases = {{"uint8", 0, {7}},
                                   {"bool", 7, {1}},
                                   {"empty strings", 8, {0, 0, 0, 0, 0, 0, 0, 0}},
                                   {"empty arrays", 9, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const TempFile file(one_array_file(c.type, kN, c.elem));
    const HeapPeak heap;
    auto f = GgufFile::open(file.path);
    EXPECT_EQ(f->get_array_size("big"), kN);
    EXPECT_EQ(f->get_string("general.architecture"), "gemma3");
    // The elements are views: a few KiB of bookkeeping for a file of 4 to 48 MB.
    EXPECT_LT(heap.bytes(), 64 * 1024) << "file of " << kN * c.elem.size() << " bytes";
  }
}

TEST(GgufMemory, DecodingOnUseCostsWhatTheResultHolds) {
  constexpr uint64_t kN = 1'000'000;
  const TempFile file(one_array_file(0, kN, {3}));
  auto f = GgufFile::open(file.path);
  {
    const HeapPeak heap;
    const auto v = f->find("big");
    ASSERT_TRUE(v.has_value());
    const auto& a = std::get<GgufArray>(v->value);
    EXPECT_EQ(a.size(), kN);
    EXPECT_EQ(std::get<uint64_t>(a.at(kN - 1).value), 3u);
    EXPECT_LT(heap.bytes(), 4 * 1024);
  }
  {
    const HeapPeak heap;
    const auto ints = f->get_int_array("big");
    ASSERT_TRUE(ints.has_value());
    EXPECT_EQ(ints->size(), kN);
    EXPECT_EQ((*ints)[kN / 2], 3);
    // One int64 per element and nothing per element on the way.
    EXPECT_LT(heap.bytes(), static_cast<long long>(kN * sizeof(int64_t) + 64 * 1024));
  }
}

TEST(GgufMemory, ManySmallEntriesStayWithinTwiceTheFile) {
  constexpr int kN = 200'000;
  RawGguf g;
  g.header(3, 0, kN);
  char key[16];
  for (int i = 0; i < kN; ++i) {
    std::snprintf(key, sizeof key, "k%06d", i);
    g.str(key).u32(0).u8(static_cast<uint8_t>(i));  // key | UINT8 | value: 20 bytes
  }
  const TempFile file(g.bytes);
  const HeapPeak heap;
  auto f = GgufFile::open(file.path);
  EXPECT_EQ(f->metadata_count(), static_cast<size_t>(kN));
  EXPECT_EQ(f->get_uint("k123456"), 123456u % 256);
  EXPECT_LT(heap.bytes(), 2 * static_cast<long long>(g.bytes.size())) << "file of " << g.bytes.size() << " bytes";
}

}  // namespace
}  // namespace larql
