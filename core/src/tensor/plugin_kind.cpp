// Names of plugin kinds and modes.
#include <array>
#include <utility>

#include "rig/context.hpp"
#include "rig/plugin.hpp"

namespace rig {

namespace {

constexpr std::array<std::pair<PluginKind, std::string_view>, 5> kKindNames{{
    {PluginKind::model, "model"},
    {PluginKind::data_layer, "data_layer"},
    {PluginKind::optimizer, "optimizer"},
    {PluginKind::lr_policy, "lr_policy"},
    {PluginKind::communicator, "communicator"},
}};

}  // namespace

std::string_view to_string(PluginKind kind) {
  for (const auto& [k, name] : kKindNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::optional<PluginKind> parse_plugin_kind(std::string_view text) {
  for (const auto& [k, name] : kKindNames) {
    if (name == text) return k;
  }
  return std::nullopt;
}

std::string_view to_string(Mode mode) {
  switch (mode) {
    case Mode::train:
      return "train";
    case Mode::eval:
      return "eval";
    case Mode::infer:
      return "infer";
  }
  return "unknown";
}

}  // namespace rig
