#include "util/hash.h"

#include <xxhash.h>

#include <cstdio>
#include <new>

namespace larql {

uint64_t xxh3_64(const void* data, size_t n) { return XXH3_64bits(data, n); }

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (state_ == nullptr) throw std::bad_alloc();
  reset();
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::reset() { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(const void* data, size_t n) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, n);
}
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

}  // namespace larql
