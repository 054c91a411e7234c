#include "config/utf8_text.hpp"

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/utf8.hpp"

namespace rig::config {
namespace {

void visit(const YAML::Node& node, const std::string& where) {
  if (node.IsScalar()) {
    const std::string& text = node.Scalar();
    if (const auto bad = first_invalid_utf8(text)) {
      const YAML::Mark mark = node.Mark();
      throw UserError(fmt::format(
          "{}:{}:{}: byte 0x{:02X} (byte {} of this value) is not UTF-8; YAML text must be UTF-8",
          where, mark.line + 1, mark.column + 1, static_cast<unsigned char>(text[*bad]), *bad + 1));
    }
  } else if (node.IsMap()) {
    for (const auto& entry : node) {
      visit(entry.first, where);
      visit(entry.second, where);
    }
  } else if (node.IsSequence()) {
    for (const auto& child : node) visit(child, where);
  }
}

}  // namespace

void check_utf8(const YAML::Node& root, const std::string& where) {
  visit(root, where);
}

}  // namespace rig::config
