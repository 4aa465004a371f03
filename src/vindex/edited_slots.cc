#include "vindex/edited_slots.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/text_file.h"

namespace larql::vindex {

using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& what) { throw Error(ErrorKind::Format, name + ": " + what); }

void sort_slots(std::vector<EditedSlot>& v) {
  std::sort(v.begin(), v.end(), [](const EditedSlot& a, const EditedSlot& b) {
    return a.layer != b.layer ? a.layer < b.layer : a.feature < b.feature;
  });
}

}  // namespace

std::vector<EditedSlot> parse_edited_slots(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(name, std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) bad(name, "the top level must be an object");
  if (!j.contains("version") || !j.at("version").is_number_integer() || j.at("version").get<int64_t>() != 1)
    bad(name, "\"version\" must be 1");
  if (!j.contains("slots") || !j.at("slots").is_array()) bad(name, "\"slots\" must be an array");
  std::vector<EditedSlot> out;
  const json& slots = j.at("slots");
  for (size_t i = 0; i < slots.size(); ++i) {
    const std::string where = "slots[" + std::to_string(i) + "]";
    const json& s = slots[i];
    if (!s.is_object()) bad(name, where + " must be an object");
    EditedSlot e;
    for (const char* k : {"layer", "feature"}) {
      if (!s.contains(k) || !s.at(k).is_number_integer() || s.at(k).get<int64_t>() < 0)
        bad(name, where + ": \"" + k + "\" must be a non-negative integer");
    }
    e.layer = s.at("layer").get<int64_t>();
    e.feature = s.at("feature").get<int64_t>();
    if (!s.contains("op") || !s.at("op").is_string()) bad(name, where + ": \"op\" must be a string");
    e.op = s.at("op").get<std::string>();
    if (e.op != "insert" && e.op != "update" && e.op != "delete")
      bad(name, where + ": op \"" + e.op + "\" is not insert, update or delete");
    for (auto [k, dst] : {std::pair{"entity", &e.entity}, std::pair{"relation", &e.relation}, std::pair{"target", &e.target}}) {
      if (!s.contains(k)) continue;
      if (!s.at(k).is_string()) bad(name, where + ": \"" + k + "\" must be a string");
      *dst = s.at(k).get<std::string>();
    }
    out.push_back(std::move(e));
  }
  sort_slots(out);
  for (size_t i = 1; i < out.size(); ++i)
    if (out[i].layer == out[i - 1].layer && out[i].feature == out[i - 1].feature)
      bad(name, "layer " + std::to_string(out[i].layer) + " feature " + std::to_string(out[i].feature) + " is listed twice");
  return out;
}

std::string serialize_edited_slots(const std::vector<EditedSlot>& slots) {
  auto sorted = slots;
  sort_slots(sorted);
  json arr = json::array();
  for (const auto& s : sorted) {
    json o = {{"layer", s.layer}, {"feature", s.feature}, {"op", s.op}};
    if (!s.entity.empty() || !s.relation.empty() || !s.target.empty()) {
      o["entity"] = s.entity;
      o["relation"] = s.relation;
      o["target"] = s.target;
    }
    arr.push_back(std::move(o));
  }
  return json{{"version", 1}, {"slots", arr}}.dump(2) + "\n";
}

std::vector<EditedSlot> read_edited_slots(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "edits.json").string();
  if (!std::filesystem::exists(path)) return {};
  return parse_edited_slots(read_text_file(path, "edited slots"), path);
}

std::vector<EditedSlot> merge_edited_slots(std::vector<EditedSlot> slots, const std::vector<EditedSlot>& later) {
  std::map<std::pair<int64_t, int64_t>, EditedSlot> by;
  for (auto& s : slots) by[{s.layer, s.feature}] = std::move(s);
  for (const auto& s : later) by[{s.layer, s.feature}] = s;
  std::vector<EditedSlot> out;
  for (auto& [k, v] : by) out.push_back(std::move(v));
  return out;
}

}  // namespace larql::vindex
