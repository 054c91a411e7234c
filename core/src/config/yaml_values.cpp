#include "config/yaml_values.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace rig::config {

bool is_quoted(const YAML::Node& scalar) {
  return scalar.IsDefined() && scalar.Tag() == "!";
}

std::optional<long long> as_integer(const YAML::Node& node) {
  if (!node.IsDefined() || !node.IsScalar() || is_quoted(node)) return std::nullopt;
  const std::string& text = node.Scalar();
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> as_number(const YAML::Node& node) {
  if (!node.IsDefined() || !node.IsScalar() || is_quoted(node)) return std::nullopt;
  const std::string& text = node.Scalar();
  if (text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::optional<bool> as_boolean(const YAML::Node& node) {
  if (!node.IsDefined() || !node.IsScalar() || is_quoted(node)) return std::nullopt;
  if (node.Scalar() == "true") return true;
  if (node.Scalar() == "false") return false;
  return std::nullopt;
}

bool has_type(const YAML::Node& node, const std::string& type) {
  if (!node.IsDefined()) return false;
  if (type == "object") return node.IsMap();
  if (type == "array") return node.IsSequence();
  if (type == "string") return node.IsScalar();
  if (type == "integer") return as_integer(node).has_value();
  if (type == "number") return as_number(node).has_value();
  if (type == "boolean") return as_boolean(node).has_value();
  if (type == "null") return node.IsNull();
  return false;
}

std::string type_phrase(const std::string& type) {
  if (type == "object") return "a map";
  if (type == "array") return "a list";
  if (type == "boolean") return "boolean (true or false)";
  if (type == "null") return "nothing";
  return type;
}

std::string describe_found(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (is_quoted(node)) return fmt::format("string '{}'", node.Scalar());
  return fmt::format("'{}'", node.Scalar());
}

}  // namespace rig::config
