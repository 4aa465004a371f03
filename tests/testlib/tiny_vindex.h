// The hand-made vindex the LQL executor tests share (tests/lql/executor_test.cc,
// relations_test.cc): 2 layers x 4 features, hidden 4, a 10-token vocabulary, gate vectors,
// embeddings and down_meta chosen so that every result the tests expect is derived by hand.
//   embeddings (unscaled, embed_scale 2): abc = e0, xy = e1, ab = e2, every other token 0.
//   gates, layer 0: f0 = 3 e0, f1 = -5 e0, f2 = e0 + e1, f3 = e3
//   gates, layer 1: f0 = 2 e1, f1 = 4 e0, f2 = -e0,     f3 = 0.5 e0
//   down_meta (top-2 per feature, token:logit), layer 0: f0 xy:.875 ab:.0625, f1 ab:.75 c:.0625,
//   f2 c:.25 x:.0625, f3 y:.625 a:.0625; layer 1: f0 abc:.5 xy:.0625, f1 xy:.9375 b:.0625,
//   f2 b:.125 a:.0625, f3 x:.375 y:.0625.
//   layer_bands: syntax [0, 0], knowledge [1, 1] (no output band).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/hf_json.h"
#include "vindex/down_meta_file.h"
#include "vindex/index.h"

namespace larql::testing {

/// Token ids of the tiny vocabulary.
namespace tiny {
inline constexpr uint32_t kA = 2, kB = 3, kC = 4, kAB = 5, kABC = 6, kX = 7, kY = 8, kXY = 9;
}

/// Write the tiny vindex into `dir` (removed first, then created).
inline void write_tiny_vindex(const std::filesystem::path& d) {
  using namespace tiny;
  namespace fs = std::filesystem;
  fs::remove_all(d);
  fs::create_directories(d);
  VocabData v;
  v.tokens = {"<unk>", "<bos>", "a", "b", "c", "ab", "abc", "x", "y", "xy"};
  v.scores = {0, 0, -3, -4, -5, -1, -2, -3, -4, -1};
  v.types.assign(10, TokenType::Normal);
  v.types[0] = v.types[1] = TokenType::Control;
  v.unk_id = 0;
  v.bos_id = 1;
  v.add_bos = true;
  const HfTokenizerFiles hf = to_hf_tokenizer(v);
  std::ofstream(d / "tokenizer.json") << hf.tokenizer_json;
  std::ofstream(d / "tokenizer_config.json") << hf.tokenizer_config_json;
  auto write_floats = [](const fs::path& p, const std::vector<float>& x) {
    std::ofstream f(p, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  };
  std::vector<float> emb(10 * 4, 0.0f);
  emb[kABC * 4 + 0] = 1;
  emb[kXY * 4 + 1] = 1;
  emb[kAB * 4 + 2] = 1;
  write_floats(d / "embeddings.bin", emb);
  write_floats(d / "gate_vectors.bin", {3, 0, 0, 0, -5, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1,  // layer 0
                                        0, 2, 0, 0, 4, 0, 0, 0, -1, 0, 0, 0, 0.5, 0, 0, 0});
  vindex::DownMetaWriter dm((d / "down_meta.bin").string(), 2, 2);
  dm.add_layer(0, 4, {{kXY, .875f}, {kAB, .0625f}, {kAB, .75f}, {kC, .0625f},
                      {kC, .25f}, {kX, .0625f}, {kY, .625f}, {kA, .0625f}});
  dm.add_layer(1, 4, {{kABC, .5f}, {kXY, .0625f}, {kXY, .9375f}, {kB, .0625f},
                      {kB, .125f}, {kA, .0625f}, {kX, .375f}, {kY, .0625f}});
  dm.commit();
  vindex::VindexIndex ix;
  ix.model = "tiny";
  ix.family = "test";
  ix.num_layers = 2;
  ix.hidden_size = 4;
  ix.intermediate_size = 4;
  ix.vocab_size = 10;
  ix.embed_scale = 2.0;
  ix.dtype = "f32";
  ix.down_top_k = 2;
  ix.layers = {{0, 4, 0, 64}, {1, 4, 64, 64}};
  ix.layer_bands = {{"syntax", {0, 0}}, {"knowledge", {1, 1}}};
  vindex::write_index(d.string(), ix);
}

}  // namespace larql::testing
