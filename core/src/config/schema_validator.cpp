#include "config/schema_validator.hpp"

// valijson reports schema problems by exception only when asked to; otherwise
// it aborts. Only this file includes valijson.
#define VALIJSON_USE_EXCEPTIONS 1
#include <valijson/adapters/yaml_cpp_adapter.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <cctype>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/defaults.hpp"
#include "rig/error.hpp"

// valijson 1.0's uniqueItems check decrements an array iterator, which its
// yaml-cpp adapter lacks, so the generic member does not compile for that
// adapter. This specialization does the same check going forward only.
template <>
bool valijson::ValidationVisitor<valijson::adapters::YamlCppAdapter>::visit(
    const constraints::UniqueItemsConstraint&) {
  if (!m_target.isArray()) return true;
  const auto items = m_target.asArray();
  bool validated = true;
  unsigned outer_index = 0;
  for (auto outer = items.begin(); outer != items.end(); ++outer, ++outer_index) {
    unsigned inner_index = outer_index + 1;
    auto inner = outer;
    for (++inner; inner != items.end(); ++inner, ++inner_index) {
      bool equal = false;
      try {
        equal = (*outer).equalTo(*inner, false);
      } catch (const std::exception&) {
        equal = false;  // the adapter cannot compare maps or lists: treat them as distinct
      }
      if (!equal) continue;
      if (!m_results) return false;
      m_results->pushError(m_context, "Elements at indexes #" + std::to_string(outer_index) +
                                          " and #" + std::to_string(inner_index) +
                                          " violate uniqueness constraint.");
      validated = false;
    }
  }
  return validated;
}

namespace rig::config {

namespace {

std::string join_path(const std::string& prefix, const std::string& rest) {
  if (rest.empty()) return prefix;
  if (rest[0] == '[') return prefix + rest;
  return child_path(prefix, rest);
}

struct Place {
  std::string at;       // "bad.yaml:5:14", "command line (...)", "bad.yaml"
  std::string written;  // the path as the user wrote it
  bool exact = false;   // the path itself has a recorded source
};

Place place_of(const std::string& path, bool at_key, const ErrorContext& ctx) {
  std::string rest;
  const Location* loc = ctx.sources ? find_nearest(*ctx.sources, path, &rest) : nullptr;
  if (!loc) return {ctx.file, path, false};
  const bool exact = rest.empty();
  // Below a known node, point at that node's key: the closest the user wrote.
  const std::string at = exact && !at_key ? loc->describe() : loc->describe_key();
  return {at, loc->key_path.empty() ? path : loc->key_path + rest, exact};
}

std::string mode_hint(const ErrorContext& ctx) {
  return fmt::format("base_params or {}_params", ctx.mode);
}

std::string quoted_list(const std::vector<std::string>& keys) {
  std::vector<std::string> q;
  for (const auto& k : keys) q.push_back("'" + k + "'");
  return fmt::format("{}", fmt::join(q, ", "));
}

}  // namespace

void throw_problem(const Problem& problem, const ErrorContext& ctx) {
  const std::string path = join_path(ctx.prefix, problem.path);
  const std::string for_what = ctx.what.empty() ? "" : " for " + ctx.what;
  switch (problem.kind) {
    case Problem::Kind::unknown_key: {
      const Place p = place_of(path, true, ctx);
      throw UserError(
          fmt::format("{}: {}: unknown key{}{}", p.at, p.written, for_what, problem.detail));
    }
    case Problem::Kind::bad_value:
    case Problem::Kind::other: {
      const Place p = place_of(path, false, ctx);
      const std::string tail = ctx.what.empty() ? "" : " (" + ctx.what + ")";
      throw UserError(fmt::format("{}: {}: {}{}", p.at, p.written, problem.detail, tail));
    }
    case Problem::Kind::missing_key: {
      const std::string& key = problem.keys.front();
      const Place p = place_of(path, true, ctx);
      if (!path.empty() && p.exact) {
        throw UserError(
            fmt::format("{}: {}: missing required key '{}'{}", p.at, p.written, key, for_what));
      }
      const std::string full = join_path(path, key);
      if (ctx.mode.empty()) {
        throw UserError(fmt::format("{}: missing required key '{}'{}", ctx.file, full, for_what));
      }
      throw UserError(fmt::format("{}: {} mode: missing required key '{}'{} (set it in {})",
                                  ctx.file, ctx.mode, full, for_what, mode_hint(ctx)));
    }
    case Problem::Kind::dependency: {
      const std::string& needed = problem.keys.front();
      const Place p = place_of(path, true, ctx);
      std::string hint;
      if (!ctx.mode.empty() && parent_path(path).empty()) {
        hint = fmt::format(" (set '{}' in {})", needed, mode_hint(ctx));
      }
      throw UserError(
          fmt::format("{}: {}: given without '{}'{}{}", p.at, p.written, needed, for_what, hint));
    }
    case Problem::Kind::exactly_one: {
      std::string head;
      if (path.empty()) {
        head = ctx.mode.empty() ? ctx.file : fmt::format("{}: {} mode", ctx.file, ctx.mode);
      } else {
        const Place p = place_of(path, true, ctx);
        head = fmt::format("{}: {}", p.at, p.written);
      }
      std::string found;
      if (problem.present.empty()) {
        found = "found none";
        if (path.empty() && !ctx.mode.empty())
          found += fmt::format(" (set one in {})", mode_hint(ctx));
      } else {
        std::vector<std::string> where;
        for (const auto& key : problem.present) {
          const Place p = place_of(join_path(path, key), false, ctx);
          where.push_back(fmt::format("{} at {}", p.written, p.at));
        }
        found = fmt::format("found {}: {}", problem.present.size() == 2 ? "both" : "several",
                            fmt::join(where, ", "));
      }
      throw UserError(fmt::format("{}: set exactly one of {}{}; {}", head,
                                  quoted_list(problem.keys), for_what, found));
    }
  }
  throw UserError(fmt::format("{}: {}: invalid", ctx.file, path));
}

namespace {

// valijson's context ["<root>", "[base_params]", "[0]"] as a config path.
std::string context_path(const std::vector<std::string>& context, const YAML::Node& data) {
  std::string path;
  YAML::Node node = data;
  for (const auto& part : context) {
    if (part.size() < 2 || part.front() != '[' || part.back() != ']') continue;
    const std::string token = part.substr(1, part.size() - 2);
    const YAML::Node& cur = node;
    YAML::Node next;
    if (cur.IsDefined() && cur.IsSequence() && !token.empty() &&
        token.find_first_not_of("0123456789") == std::string::npos) {
      path = index_path(path, std::stoul(token));
      next.reset(cur[std::stoul(token)]);
    } else {
      path = child_path(path, token);
      if (cur.IsDefined() && cur.IsMap()) next.reset(cur[token]);
    }
    node.reset(next);
  }
  return path;
}

}  // namespace

void validate(const SchemaDoc& doc, const std::string& pointer, const YAML::Node& data,
              const ErrorContext& ctx) {
  // Point valijson at the subschema through a $ref in a copy of the document,
  // so references inside it still resolve.
  YAML::Node wrapper = pointer == "#" ? doc.root() : YAML::Clone(doc.root());
  if (pointer != "#") wrapper["$ref"] = pointer;
  valijson::Schema schema;
  try {
    valijson::SchemaParser parser(valijson::SchemaParser::kDraft7);
    parser.populateSchema(valijson::adapters::YamlCppAdapter(wrapper), schema);
  } catch (const std::exception& e) {
    throw UserError(fmt::format("{}: invalid schema: {}", doc.what(), e.what()));
  }
  valijson::ValidationResults results;
  bool valid = false;
  try {
    // Weak types: the YAML adapter sees every scalar as a string.
    valijson::Validator validator(valijson::Validator::kWeakTypes);
    valid = validator.validate(schema, valijson::adapters::YamlCppAdapter(data), &results);
  } catch (const std::exception& e) {
    // The adapter throws where a value has a type it cannot convert (a list
    // where a string is expected); our walk below names the value.
    results.pushError({"<root>"}, e.what());
  }
  // Our walk is stricter than valijson's weak types (a map is no string), so
  // it runs even when valijson is satisfied.
  if (auto problem = find_problem(doc, doc.at(pointer), data)) throw_problem(*problem, ctx);
  if (valid) return;
  // A keyword our walk does not cover: report valijson's most specific error.
  const valijson::ValidationResults::Error* deepest = nullptr;
  for (const auto& error : results) {
    if (!deepest || error.context.size() > deepest->context.size()) deepest = &error;
  }
  Problem problem;
  problem.kind = Problem::Kind::other;
  problem.path = deepest ? context_path(deepest->context, data) : "";
  // valijson writes sentences ("Value should be a multiple of 8."): make it a clause.
  std::string detail = deepest ? deepest->description : "does not match the schema";
  if (!detail.empty() && detail.back() == '.') detail.pop_back();
  if (!detail.empty())
    detail[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(detail[0])));
  problem.detail = detail;
  throw_problem(problem, ctx);
}

void validate_plugin_params(const std::string& schema_yaml, YAML::Node& params,
                            const ResolvedConfig& cfg, const std::string& params_path,
                            const std::string& what) {
  YAML::Node schema_root;
  try {
    schema_root = YAML::Load(schema_yaml);
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}: its params schema is not valid YAML ({}:{}: {})", what,
                                e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  // An empty schema accepts anything.
  if (!schema_root.IsDefined() || schema_root.IsNull()) {
    schema_root = YAML::Node(YAML::NodeType::Map);
  }
  if (!params.IsDefined() || params.IsNull()) {
    try {
      params = YAML::Node(YAML::NodeType::Map);
    } catch (const YAML::InvalidNode&) {
      // A missing key looked up through a const node cannot be assigned to.
      throw std::invalid_argument(
          "validate_plugin_params: params must come from a non-const node (or exist)");
    }
  }
  const SchemaDoc doc(schema_root, what);
  fill_defaults(doc, doc.root(), params, params_path, nullptr);
  const ErrorContext ctx{cfg.experiment_file, cfg.mode, params_path, what, &cfg.sources};
  validate(doc, "#", params, ctx);
}

}  // namespace rig::config
