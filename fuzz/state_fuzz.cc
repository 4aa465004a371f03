// libFuzzer target for the engine state-file readers: every engine of the registry loads
// arbitrary bytes as its state, then (when the load is accepted) decodes one token from it, so
// ASan/UBSan catch a state that is accepted but inconsistent. The only acceptable failure is a
// larql::Error. Run via scripts/fuzz.sh.
//
// Input: byte 0 picks the engine (mod the engine count); bit 7 of byte 0 set = use the bytes as
// they are (exercising the checksum check); clear = the harness appends the correct XXH3-64, so
// mutations reach the header, session and payload parsers behind the checksum.
// `state_fuzz -write_seeds=DIR` writes one valid state file per engine (as inputs) and exits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "inference/forward.h"
#include "kv/engine.h"
#include "kv/registry.h"
#include "model/model.h"
#include "testlib/synthetic_model.h"
#include "util/error.h"
#include "util/hash.h"

namespace {

struct World {
  std::unique_ptr<larql::testing::SyntheticModel> sm;
  std::shared_ptr<larql::Model> model;
  std::shared_ptr<larql::Forward> fwd;
  std::vector<std::string> specs;
  std::string dir;
  std::string state_path;
};

World& world() {
  static World w = [] {
    World x;
    x.dir = (std::filesystem::temp_directory_path() / ("larql-state-fuzz-" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(x.dir);
    x.sm = larql::testing::make_synthetic_model();
    x.model = larql::Model::load(x.sm->path);
    x.fwd = std::make_shared<larql::Forward>(x.model, 1);
    for (const auto& e : larql::engine_registry())
      if (e.name == "boundary-kv") x.specs.push_back(e.name + ":archive_dir=" + x.dir + "/archive");
      else if (e.name != "apollo") x.specs.push_back(e.name);  // apollo needs a store (fuzzed as a state file too)
    x.specs.push_back("standard:window=4");  // >= the synthetic model's sliding window (4)
    x.specs.push_back("markov-rs:window=3");
    x.specs.push_back("markov-rs-codec:window=3,codec=int8");
    x.specs.push_back("unlimited-context:window=5");
    x.specs.push_back("turbo-quant:bits=3");
    x.specs.push_back("boundary-kv:chunk_tokens=3,sequence_id=fuzz,archive_dir=" + x.dir + "/archive");
    x.state_path = x.dir + "/input.kv";
    return x;
  }();
  return w;
}

void write_seeds(const std::string& out_dir) {
  World& w = world();
  std::filesystem::create_directories(out_dir);
  const std::vector<int32_t> prompt = {2, 270, 271, 272, 263, 264, 265};
  for (size_t i = 0; i < w.specs.size(); ++i) {
    auto e = larql::make_engine(larql::parse_engine_spec(w.specs[i]), w.fwd);
    e->prefill(prompt);
    e->decode_step(266);
    e->session().history = prompt;
    e->session().history.push_back(266);
    const std::string tmp = w.dir + "/seed.kv";
    e->save_state(tmp);
    std::ifstream in(tmp, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    bytes.resize(bytes.size() - 8);  // the harness re-appends the checksum
    std::ofstream(out_dir + "/seed-" + std::to_string(i), std::ios::binary) << static_cast<char>(i) << bytes;
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  for (int i = 1; i < *argc; ++i)
    if (std::strncmp((*argv)[i], "-write_seeds=", 13) == 0) {
      write_seeds((*argv)[i] + 13);
      std::exit(0);
    }
  world();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World& w = world();
  const size_t which = (data[0] & 0x7f) % w.specs.size();
  const bool raw = (data[0] & 0x80) != 0;
  {
    std::ofstream out(w.state_path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
    if (!raw) {
      const uint64_t sum = larql::xxh3_64(data + 1, size - 1);
      out.write(reinterpret_cast<const char*>(&sum), 8);
    }
  }
  try {
    auto e = larql::make_engine(larql::parse_engine_spec(w.specs[which]), w.fwd);
    e->load_state(w.state_path);
    if (e->n_past() > 0 && e->n_past() < w.fwd->config().context_length) e->decode_step(270);
  } catch (const larql::Error&) {
  }
  return 0;
}
