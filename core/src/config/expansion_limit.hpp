// A few lines of nested YAML aliases (&a [*b, *b, ...]) stand for billions of
// nodes: yaml-cpp shares them, but everything that walks the tree (schema
// validation, merging, printing) would visit every copy. Such a document is
// refused before anything walks it.
#pragma once

#include <cstdint>
#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::config {

// More nodes than any experiment file holds by far (a Transformer's is a few hundred).
inline constexpr std::int64_t kMaxExpandedNodes = 100'000;
inline constexpr int kMaxDepth = 64;

// Throws UserError naming `where` when `root`, with its aliases expanded,
// holds more than kMaxExpandedNodes nodes or nests deeper than kMaxDepth.
// Stops counting at the limit, so it costs at most that many steps.
void check_expansion(const YAML::Node& root, const std::string& where);

}  // namespace rig::config
