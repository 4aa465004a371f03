// `larql engines`: the KV engine registry, with keys, defaults and contracts.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "kv/registry.h"

namespace larql::cli {

void register_engines(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* s = app.add_subcommand("engines", "list the KV engines, their keys and contracts");
  s->add_flag("--json", *json, "machine-readable");
  s->callback([json] {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& e : engine_registry()) {
      if (*json) {
        nlohmann::json keys = nlohmann::json::array();
        for (const auto& k : e.keys)
          keys.push_back({{"name", k.name}, {"default", k.default_value}, {"description", k.description},
                          {"allowed", k.allowed}});
        out.push_back({{"name", e.name}, {"aliases", e.aliases}, {"keys", keys},
                       {"description", e.description}, {"contract", e.contract}, {"examples", e.examples}});
        continue;
      }
      std::printf("%s", e.name.c_str());
      if (!e.aliases.empty()) {
        std::printf("  (aliases:");
        for (const auto& al : e.aliases) std::printf(" %s", al.c_str());
        std::printf(")");
      }
      std::printf("\n  %s\n  contract: %s\n", e.description.c_str(), e.contract.c_str());
      for (const auto& k : e.keys)
        std::printf("  %s=%s  %s\n", k.name.c_str(), k.default_value.empty() ? "<unset>" : k.default_value.c_str(),
                    k.description.c_str());
      for (const auto& x : e.examples) std::printf("  e.g. %s\n", x.c_str());
    }
    if (*json) std::printf("%s\n", out.dump(2).c_str());
  });
}

}  // namespace larql::cli
