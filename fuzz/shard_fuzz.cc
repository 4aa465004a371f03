// The shard's request decoding (src/shard/wire.h): any bytes, parsed as each request message the
// service takes, then its rows checked and decoded as the service does. A hostile request must be
// refused with an Error, never read past its bytes or allocate by its claimed sizes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <larql/shard/v1/shard.pb.h>
#include "shard/wire.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace pb = ::larql::shard::v1;
  std::vector<float> rows;
  auto check = [&](const pb::Rows& r) {
    try {
      larql::shard::wire::decode_rows(r, 64, 16, "fuzz", rows);
    } catch (const larql::Error&) {
    }
  };
  pb::WalkFfnRequest w;
  if (w.ParseFromArray(data, static_cast<int>(size))) check(w.rows());
  pb::RunLayersRequest q;
  if (q.ParseFromArray(data, static_cast<int>(size))) check(q.rows());
  return 0;
}
