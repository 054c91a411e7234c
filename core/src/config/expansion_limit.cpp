#include "config/expansion_limit.hpp"

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::config {
namespace {

struct Walk {
  const std::string& where;
  std::int64_t nodes = 0;

  void visit(const YAML::Node& node, int depth) {
    if (++nodes > kMaxExpandedNodes) {
      throw UserError(fmt::format(
          "{}: the YAML expands to more than {} nodes (aliases such as *a repeating other "
          "aliases?); an experiment file holds a few hundred: refusing it",
          where, kMaxExpandedNodes));
    }
    if (depth > kMaxDepth) {
      const YAML::Mark mark = node.Mark();
      throw UserError(fmt::format("{}:{}:{}: the YAML nests deeper than {} levels; refusing it",
                                  where, mark.line + 1, mark.column + 1, kMaxDepth));
    }
    if (node.IsMap()) {
      for (const auto& entry : node) {
        visit(entry.first, depth + 1);
        visit(entry.second, depth + 1);
      }
    } else if (node.IsSequence()) {
      for (const auto& child : node) visit(child, depth + 1);
    }
  }
};

}  // namespace

void check_expansion(const YAML::Node& root, const std::string& where) {
  Walk walk{where};
  walk.visit(root, 0);
}

}  // namespace rig::config
