#include "cli/edit_eval_set.h"

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/text_file.h"

namespace larql::cli {

namespace {

using nlohmann::json;

class Line {
 public:
  Line(const std::string& path, int64_t n, const json& j) : where_(path + ":" + std::to_string(n)), line_(n), j_(j) {}

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(ErrorKind::Format, where_ + ": " + field + ": " + what);
  }
  const json& get(const std::string& field) const {
    auto it = j_.find(field);
    if (it == j_.end()) fail(field, "missing");
    return *it;
  }
  std::string str(const std::string& field, const json* v = nullptr) const {
    const json& x = v ? *v : get(field);
    if (!x.is_string()) fail(field, "expected a string, got " + std::string(x.type_name()));
    std::string s = x.get<std::string>();
    if (s.find_first_not_of(" \t\r\n") == std::string::npos) fail(field, "empty");
    return s;
  }
  int64_t id(const std::string& field, const json* v = nullptr) const {
    const json& x = v ? *v : get(field);
    if (!x.is_number_integer() || x.get<int64_t>() < 0) fail(field, "expected a token id (an integer >= 0)");
    return x.get<int64_t>();
  }
  AnsweredPrompt answered(const std::string& field, const json& x) const {
    if (!x.is_object()) fail(field, "expected an object {prompt, answer, answer_id}");
    AnsweredPrompt a;
    auto sub = [&](const char* k) -> const json& {
      auto it = x.find(k);
      if (it == x.end()) fail(field + "." + k, "missing");
      return *it;
    };
    a.prompt = str(field + ".prompt", &sub("prompt"));
    a.answer = str(field + ".answer", &sub("answer"));
    a.answer_id = id(field + ".answer_id", &sub("answer_id"));
    a.line = line_;
    return a;
  }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  int64_t line_;
  const json& j_;
};

}  // namespace

EditEvalSet read_edit_eval_set(const std::string& path) {
  const std::string text = read_text_file(path, "the edit-eval set");
  EditEvalSet set;
  set.path = path;
  std::set<std::string> ids;
  bool have_heldout = false;
  size_t start = 0;
  int64_t n = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string raw = text.substr(start, end - start);
    start = end + 1;
    ++n;
    if (raw.find_first_not_of(" \t\r") == std::string::npos) {
      if (end == text.size()) break;
      continue;
    }
    json j = json::parse(raw, nullptr, false);
    const std::string where = path + ":" + std::to_string(n);
    if (j.is_discarded() || !j.is_object())
      throw Error(ErrorKind::Format, where + ": not a JSON object (one object a line)");
    const Line l(path, n, j);
    const std::string type = l.str("type");
    if (type == "meta") {
      if (auto it = j.find("model"); it != j.end() && it->is_string()) set.model = it->get<std::string>();
      if (auto it = j.find("fingerprint"); it != j.end() && it->is_string()) set.fingerprint = it->get<std::string>();
    } else if (type == "fact") {
      EditFact f;
      f.line = n;
      f.id = l.str("id");
      if (!ids.insert(f.id).second) l.fail("id", "\"" + f.id + "\" is used by an earlier fact");
      f.relation = l.str("relation");
      f.entity = l.str("entity");
      f.target = l.str("target");
      f.target_id = l.id("target_id");
      f.prompt = l.str("prompt");
      const json& ps = l.get("paraphrases");
      if (!ps.is_array() || ps.empty()) l.fail("paraphrases", "expected a non-empty array of prompts");
      for (size_t i = 0; i < ps.size(); ++i) f.paraphrases.push_back(l.str("paraphrases[" + std::to_string(i) + "]", &ps[i]));
      const json& ns = l.get("neighbourhood");
      if (!ns.is_array() || ns.empty()) l.fail("neighbourhood", "expected a non-empty array of {prompt, answer, answer_id}");
      for (size_t i = 0; i < ns.size(); ++i) f.neighbourhood.push_back(l.answered("neighbourhood[" + std::to_string(i) + "]", ns[i]));
      set.facts.push_back(std::move(f));
    } else if (type == "real") {
      set.real.push_back(l.answered("real", j));
    } else if (type == "fluency") {
      set.fluency.push_back(l.str("prompt"));
    } else if (type == "heldout") {
      if (have_heldout) l.fail("type", "a second heldout text (one per set)");
      have_heldout = true;
      set.heldout = l.str("text");
    } else {
      l.fail("type", "\"" + type + "\" is not one of meta, fact, real, fluency, heldout");
    }
    if (end == text.size()) break;
  }
  if (set.facts.empty()) throw Error(ErrorKind::Format, path + ": no fact (a line with \"type\": \"fact\")");
  return set;
}

double ngram_entropy(const std::vector<int32_t>& ids) {
  double total = 0;
  for (const auto& [n, w] : {std::pair<size_t, double>{2, 2.0 / 3.0}, {3, 4.0 / 3.0}}) {
    if (ids.size() < n) continue;
    std::map<std::vector<int32_t>, int64_t> counts;
    for (size_t i = 0; i + n <= ids.size(); ++i) ++counts[std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(i),
                                                                               ids.begin() + static_cast<std::ptrdiff_t>(i + n))];
    const double all = static_cast<double>(ids.size() - n + 1);
    double h = 0;
    for (const auto& [g, c] : counts) {
      const double f = static_cast<double>(c) / all;
      h -= f * std::log2(f);
    }
    total += w * h;
  }
  return total / 2.0;
}

}  // namespace larql::cli
