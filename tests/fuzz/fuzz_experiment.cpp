// The experiment loader: an experiment file's YAML (the expansion limit
// included), its schema validation, and resolving it in each mode with
// command-line overrides. Input: the file, then optionally lines "#%override"
// each followed by one override argument ("--a/b=1" or "a.b=1").
// Bad input must end in rig::UserError; anything else escaping is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment_file.hpp"
#include "config/overrides.hpp"
#include "fuzz_util.hpp"
#include "rig/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto parts = rig_fuzz::split(rig_fuzz::as_text(data, size), "\n#%override\n");
  std::vector<rig::config::Override> overrides;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string arg(parts[i]);
    try {
      overrides.push_back(arg.find('/') < arg.find('=') ? rig::config::parse_slash_override(arg)
                                                        : rig::config::parse_set_override(arg));
    } catch (const rig::UserError&) {
    }
  }
  try {
    const auto file = rig::config::ExperimentFile::parse(std::string(parts[0]), "fuzz.yaml");
    for (const char* mode : {"train", "eval", "infer"}) {
      try {
        const auto cfg = file.resolve(mode, overrides);
        rig::config::require_exactly_one(cfg, {"max_steps", "num_epochs"});
      } catch (const rig::UserError&) {
      }
    }
  } catch (const rig::UserError&) {
  }
  return 0;
}
