// The .vlp patch file: base64 against hand-derived encodings, a full round trip, and hostile files
// (each refused with an error naming the op index and the field).
#include "lql/patch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "util/error.h"

namespace larql::lql {
namespace {

const PatchLimits kLim{4, 32, 3, 100};

TEST(PatchFile, Base64OfKnownFloats) {
  // 1.0f = 00 00 80 3F (little-endian): 000000 000000 001000 000000 | 001111 11(0000) -> "AACAPw==".
  EXPECT_EQ(encode_floats({1.0f}), "AACAPw==");
  // -2.0f = 00 00 00 C0; two floats = 8 bytes -> 12 chars with one '='.
  EXPECT_EQ(encode_floats({1.0f, -2.0f}), "AACAPwAAAMA=");
  const auto v = decode_floats("AACAPwAAAMA=");
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_TRUE(decode_floats("").empty());
}

TEST(PatchFile, Base64Refusals) {
  EXPECT_THROW(decode_floats("AACAPw="), Error);     // length not a multiple of 4
  EXPECT_THROW(decode_floats("AAC*Pw=="), Error);    // '*' is not base64
  EXPECT_THROW(decode_floats("AA==AAAA"), Error);    // padding in the middle
  EXPECT_THROW(decode_floats("AAAAAAA="), Error);    // 5 bytes: not whole f32 values
  EXPECT_EQ(decode_floats("AAAAAA==").size(), 1u);  // 4 bytes: one float
}

Patch sample() {
  Patch p;
  p.base_model = "m";
  p.base_fingerprint = "fp";
  p.description = "d";
  p.created_at = "2026-12-01T00:00:00Z";
  PatchOp a;
  a.kind = PatchOp::Kind::Insert;
  a.layer = 3;
  a.feature = 31;
  a.entity = "Zorblax";
  a.relation = "capital";
  a.target = "Quux";
  a.target_id = 99;
  a.confidence = 0.5;
  a.gate = {1.5f, -0.0f, 3.25e-7f};
  a.up = {std::nextafter(1.0f, 2.0f), 2, 3};
  a.down = {-65504.0f, 1e-38f, 0};  // f16's largest magnitude, a denormal-adjacent value
  PatchOp k;
  k.kind = PatchOp::Kind::InsertKnn;
  k.layer = 0;
  k.entity = "E";
  k.target = "T";
  k.target_id = 0;
  k.key = {0.1f, 0.2f, 0.3f};
  PatchOp d;
  d.kind = PatchOp::Kind::Delete;
  d.layer = 1;
  d.feature = 2;
  PatchOp u;
  u.kind = PatchOp::Kind::Update;
  u.layer = 2;
  u.feature = 0;
  u.down = {1, 2, 3};
  PatchOp dk;
  dk.kind = PatchOp::Kind::DeleteKnn;
  dk.entity = "E";
  p.ops = {a, k, d, u, dk};
  return p;
}

TEST(PatchFile, RoundTripKeepsEveryBit) {
  const Patch p = sample();
  const Patch q = patch_from_json(patch_to_json(p), kLim);
  ASSERT_EQ(q.ops.size(), p.ops.size());
  EXPECT_EQ(q.base_model, "m");
  EXPECT_EQ(q.base_fingerprint, "fp");
  for (size_t i = 0; i < p.ops.size(); ++i) {
    EXPECT_EQ(q.ops[i].kind, p.ops[i].kind) << i;
    EXPECT_EQ(q.ops[i].layer, p.ops[i].layer) << i;
    EXPECT_EQ(q.ops[i].feature, p.ops[i].feature) << i;
    EXPECT_EQ(q.ops[i].entity, p.ops[i].entity) << i;
    for (auto [x, y] : {std::pair{&p.ops[i].gate, &q.ops[i].gate}, std::pair{&p.ops[i].up, &q.ops[i].up},
                        std::pair{&p.ops[i].down, &q.ops[i].down}, std::pair{&p.ops[i].key, &q.ops[i].key}}) {
      ASSERT_EQ(x->size(), y->size()) << i;
      EXPECT_EQ(std::memcmp(x->data(), y->data(), x->size() * 4), 0) << i;  // -0.0 and denormals too
    }
  }
  EXPECT_EQ(q.ops[0].confidence, 0.5);
  EXPECT_EQ(q.ops[0].target_id, 99);
}

TEST(PatchFile, SaveAndLoadAFile) {
  const auto path = (std::filesystem::temp_directory_path() / "larql_patch_test.vlp").string();
  save_patch(path, sample());
  EXPECT_EQ(load_patch(path, kLim).ops.size(), 5u);
  std::filesystem::remove(path);
}

std::string error_of(const std::string& text) {
  try {
    patch_from_json(text, kLim, "h.vlp");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Format) << e.what();
    return e.what();
  }
  return "(accepted)";
}

std::string with_op(const std::string& op) {
  return R"({"version":1,"base_model":"m","base_fingerprint":"f","operations":[{"op":"delete","layer":0,"feature":0},)" + op + "]}";
}

TEST(PatchFile, ErrorsReadFileFieldProblemAndCutTheParsersExcerpt) {
  // One form everywhere: "FILE: FIELD: problem".
  EXPECT_EQ(error_of(R"({"version":2,"base_model":"m","base_fingerprint":"f","operations":[]})"),
            "h.vlp: version: 2 is not a version this build reads (1)");
  EXPECT_EQ(error_of(with_op(R"({"op":"delete","layer":4,"feature":0})")),
            "h.vlp: operations[1].layer: 4 is out of range 0-3");
  // A KNN fact's confidence mixes it with the model (docs/lql.md INFER): outside [0, 1] the
  // mixture is not a distribution, so it is refused, not clamped.
  EXPECT_EQ(error_of(with_op(R"({"op":"delete","layer":1,"feature":0,"confidence":5})")),
            "h.vlp: operations[1].confidence: 5 is out of range [0, 1]");
  EXPECT_EQ(error_of(with_op(R"({"op":"delete","layer":1,"feature":0,"confidence":-0.5})")),
            "h.vlp: operations[1].confidence: -0.5 is out of range [0, 1]");
  EXPECT_EQ(error_of(with_op(R"({"op":"delete","layer":1,"feature":0,"confidence":1})")), "(accepted)");
  // A file cut inside a 1,200-character base64 string: the message stays short and keeps both
  // ends of what the parser read.
  const std::string b64(1200, 'A');
  const std::string cut = with_op(R"({"op":"update","layer":0,"feature":0,"down_vector_b64":")" + b64);
  const std::string e = error_of(cut.substr(0, cut.size() - 2));
  EXPECT_EQ(e.rfind("h.vlp: not JSON: parse error", 0), 0u) << e;
  EXPECT_LT(e.size(), 300u) << e;
  EXPECT_NE(e.find("(1201 bytes)"), std::string::npos) << e;
}

// Features MODE SUBJECT appends past the model's width (OverlaySource::widen_ffn): named up to
// num_features + appended - 1, except the range columns (the first 2 of every 16 appended).
TEST(PatchFile, AppendedFeaturesAreNamedPastTheWidthButNotTheRangeColumns) {
  const PatchLimits lim{4, 32, 3, 100, 32};
  auto err = [&](int64_t f) {
    try {
      patch_from_json(with_op(R"({"op":"delete","layer":1,"feature":)" + std::to_string(f) + "}"), lim, "h.vlp");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(err(31), "(accepted)");
  EXPECT_EQ(err(34), "(accepted)");
  EXPECT_EQ(err(50), "(accepted)");
  EXPECT_EQ(err(63), "(accepted)");
  for (int64_t f : {32, 33, 48, 49})
    EXPECT_NE(err(f).find("is a range column of the appended features"), std::string::npos) << f << ": " << err(f);
  EXPECT_NE(err(64).find("operations[1].feature: 64 is out of range"), std::string::npos) << err(64);
  // 2^63 as written, not wrapped to a negative number.
  const std::string big = with_op(R"({"op":"delete","layer":1,"feature":9223372036854775808})");
  try {
    patch_from_json(big, lim, "h.vlp");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9223372036854775808 is out of range 0-63"), std::string::npos) << e.what();
  }
}

TEST(PatchFile, SaveWithoutReplaceRefusesAnExistingFile) {
  const auto path = (std::filesystem::temp_directory_path() / "larql_patch_noreplace.vlp").string();
  std::filesystem::remove(path);
  save_patch(path, sample(), false);
  Patch one = sample();
  one.ops.resize(1);
  try {
    save_patch(path, one, false);
    ADD_FAILURE() << "wrote over " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("already exists"), std::string::npos) << e.what();
  }
  EXPECT_EQ(load_patch(path, kLim).ops.size(), 5u);  // the first file, whole
  std::filesystem::remove(path);
}

TEST(PatchFile, HostileFilesNameTheOpAndField) {
  EXPECT_NE(error_of("{not json").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("[]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(R"({"version":2,"base_model":"m","base_fingerprint":"f","operations":[]})").find("h.vlp: version: 2 is not"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"version":1,"base_fingerprint":"f","operations":[]})").find("base_model: missing"), std::string::npos);
  // One float = "AACAPw==": the model's hidden size is 3.
  const std::string good3 = encode_floats({1, 2, 3});
  const std::string ins = R"({"op":"insert","layer":1,"feature":1,"entity":"e","target":"t","target_id":5,)";
  auto vecs = [&](const std::string& g) {
    return R"("gate_vector_b64":")" + g + R"(","up_vector_b64":")" + good3 + R"(","down_vector_b64":")" + good3 + "\"}";
  };
  EXPECT_EQ(error_of(with_op(ins + vecs(good3))), "(accepted)");
  EXPECT_NE(error_of(with_op(ins + vecs("AACAPw=="))).find("operations[1].gate_vector_b64: 1 floats, the model's hidden size is 3"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(ins + vecs("AA!APw=="))).find("operations[1].gate_vector_b64: bad base64"), std::string::npos);
  EXPECT_NE(error_of(with_op(ins + vecs(encode_floats({1, NAN, 3})))).find("value 1 is not finite"), std::string::npos);
  // Edits are held to f16's range (the vindex stores gate rows in f16: 1e38 there is inf, and
  // the forward pass then gave NaN for every prompt).
  EXPECT_EQ(error_of(with_op(ins + vecs(encode_floats({1, 65504.0f, -65504.0f})))), "(accepted)");
  EXPECT_NE(error_of(with_op(ins + vecs(encode_floats({1, 1e38f, 3}))))
                .find("operations[1].gate_vector_b64: value 1 (99999996802856924650656260769173209088.000000) is beyond +-65504"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(ins + vecs(encode_floats({1, 2, std::nextafter(65504.0f, 1e9f)})))).find("value 2 ("),
            std::string::npos);
  // A second insert on the slot an earlier op inserted would drop the first fact unseen; after a
  // delete of that slot it is a new fact in a free slot.
  EXPECT_EQ(error_of(with_op(ins + vecs(good3) + "," + ins + vecs(good3))),
            "h.vlp: operations[2]: inserts layer 1 feature 1, which operations[1] (\"e\") already inserted: the earlier fact would "
            "be lost");
  EXPECT_EQ(error_of(with_op(ins + vecs(good3) + R"(,{"op":"delete","layer":1,"feature":1},)" + ins + vecs(good3))), "(accepted)");
  EXPECT_EQ(error_of(with_op(ins + vecs(good3) + R"(,{"op":"insert","layer":1,"feature":2,"entity":"f","target":"t","target_id":5,)" +
                             vecs(good3))),
            "(accepted)");
  EXPECT_NE(error_of(with_op(R"({"op":"delete","layer":4,"feature":0})")).find("operations[1].layer: 4 is out of range 0-3"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(R"({"op":"delete","layer":0,"feature":32})")).find("operations[1].feature: 32 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(R"({"op":"delete","layer":"0","feature":1})")).find("operations[1].layer: not an integer"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(R"({"op":"frob"})")).find("operations[1].op: \"frob\" is not an op"), std::string::npos);
  EXPECT_NE(error_of(with_op(R"({"op":"insert_knn","layer":0,"entity":"e","target":"t","target_id":100,"key_vector_b64":")" +
                             good3 + "\"}"))
                .find("operations[1].target_id: 100 is out of range 0-99"),
            std::string::npos);
  EXPECT_NE(error_of(with_op(R"(7)")).find("operations[1]: not an object"), std::string::npos);
}

}  // namespace
}  // namespace larql::lql
