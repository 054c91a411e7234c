#include "config/diagnose.hpp"

#include <algorithm>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/did_you_mean.hpp"
#include "config/source_map.hpp"
#include "config/yaml_values.hpp"

namespace rig::config {

namespace {

std::vector<std::string> string_list(const YAML::Node& node) {
  std::vector<std::string> out;
  if (!node.IsDefined()) return out;
  if (node.IsScalar()) out.push_back(node.Scalar());
  if (node.IsSequence()) {
    for (const auto& item : node) {
      if (item.IsScalar()) out.push_back(item.Scalar());
    }
  }
  return out;
}

std::string emit(const YAML::Node& node) {
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

bool same_value(const YAML::Node& a, const YAML::Node& b) {
  if (a.IsScalar() && b.IsScalar()) {
    if (a.Scalar() == b.Scalar()) return true;
    const auto x = as_number(a);
    const auto y = as_number(b);
    return x && y && *x == *y;
  }
  if (a.IsNull() && b.IsNull()) return true;
  return a.Type() == b.Type() && emit(a) == emit(b);
}

// The word for the kind of number a schema set expects, for range messages.
std::string number_word(const SchemaSet& set) {
  for (const auto& s : set) {
    for (const auto& t : string_list(s["type"])) {
      if (t == "integer") return "integer";
    }
  }
  return "number";
}

class Walker {
 public:
  explicit Walker(const SchemaDoc& doc) : doc_(doc) {}

  std::optional<Problem> check(const SchemaSet& set, const YAML::Node& data,
                               const std::string& path) const {
    if (set.empty()) return std::nullopt;
    if (auto p = check_type(set, data, path)) return p;
    if (auto p = check_enum(set, data, path)) return p;
    if (auto p = check_number(set, data, path)) return p;
    if (auto p = check_string(set, data, path)) return p;
    if (data.IsSequence()) return check_array(set, data, path);
    if (data.IsMap()) return check_object(set, data, path);
    return std::nullopt;
  }

 private:
  static Problem bad_value(const std::string& path, std::string detail) {
    return Problem{Problem::Kind::bad_value, path, std::move(detail), {}, {}};
  }

  std::optional<Problem> check_type(const SchemaSet& set, const YAML::Node& data,
                                    const std::string& path) const {
    for (const auto& s : set) {
      const auto types = string_list(s["type"]);
      if (types.empty()) continue;
      if (std::any_of(types.begin(), types.end(),
                      [&](const std::string& t) { return has_type(data, t); })) {
        continue;
      }
      std::vector<std::string> phrases;
      for (const auto& t : types) phrases.push_back(type_phrase(t));
      return bad_value(path, fmt::format("expected {}, found {}", fmt::join(phrases, " or "),
                                         describe_found(data)));
    }
    return std::nullopt;
  }

  std::optional<Problem> check_enum(const SchemaSet& set, const YAML::Node& data,
                                    const std::string& path) const {
    for (const auto& s : set) {
      const YAML::Node allowed = s["enum"];
      if (!allowed || !allowed.IsSequence()) continue;
      bool ok = false;
      std::vector<std::string> shown;
      for (const auto& item : allowed) {
        ok = ok || same_value(item, data);
        shown.push_back(item.IsScalar() ? item.Scalar() : emit(item));
      }
      if (!ok) {
        // x-enum-hint: the schema's word on what the user probably meant.
        const YAML::Node hint = s["x-enum-hint"];
        return bad_value(path, fmt::format("expected one of [{}], found {}{}",
                                           fmt::join(shown, ", "), describe_found(data),
                                           hint && hint.IsScalar() ? "; " + hint.Scalar() : ""));
      }
    }
    return std::nullopt;
  }

  std::optional<Problem> check_number(const SchemaSet& set, const YAML::Node& data,
                                      const std::string& path) const {
    const auto value = as_number(data);
    if (!value) return std::nullopt;
    const std::string word = number_word(set);
    auto fail = [&](const char* op, const YAML::Node& bound) {
      return bad_value(path, fmt::format("expected {} {} {}, found {}", word, op, bound.Scalar(),
                                         describe_found(data)));
    };
    for (const auto& s : set) {
      const YAML::Node min = s["minimum"];
      const YAML::Node max = s["maximum"];
      const YAML::Node xmin = s["exclusiveMinimum"];
      const YAML::Node xmax = s["exclusiveMaximum"];
      // Draft 4 spells an exclusive bound as a boolean next to minimum/maximum.
      const bool min_exclusive = xmin && as_boolean(xmin).value_or(false);
      const bool max_exclusive = xmax && as_boolean(xmax).value_or(false);
      if (min && as_number(min)) {
        const double b = *as_number(min);
        if (min_exclusive ? !(*value > b) : !(*value >= b))
          return fail(min_exclusive ? ">" : ">=", min);
      }
      if (max && as_number(max)) {
        const double b = *as_number(max);
        if (max_exclusive ? !(*value < b) : !(*value <= b))
          return fail(max_exclusive ? "<" : "<=", max);
      }
      if (xmin && as_number(xmin) && !(*value > *as_number(xmin))) return fail(">", xmin);
      if (xmax && as_number(xmax) && !(*value < *as_number(xmax))) return fail("<", xmax);
    }
    return std::nullopt;
  }

  std::optional<Problem> check_string(const SchemaSet& set, const YAML::Node& data,
                                      const std::string& path) const {
    if (!data.IsScalar()) return std::nullopt;
    const std::string& text = data.Scalar();
    for (const auto& s : set) {
      if (const auto n = as_integer(s["minLength"]);
          n && static_cast<long long>(text.size()) < *n) {
        return bad_value(path, *n == 1 ? fmt::format("expected a non-empty string, found {}",
                                                     describe_found(data))
                                       : fmt::format("expected a string of at least {} characters, "
                                                     "found {}",
                                                     *n, describe_found(data)));
      }
      if (const auto n = as_integer(s["maxLength"]);
          n && static_cast<long long>(text.size()) > *n) {
        return bad_value(path, fmt::format("expected a string of at most {} characters, found {}",
                                           *n, describe_found(data)));
      }
      if (const YAML::Node pattern = s["pattern"]; pattern && pattern.IsScalar()) {
        bool ok = true;
        try {
          ok = std::regex_search(text, std::regex(pattern.Scalar(), std::regex::ECMAScript));
        } catch (const std::regex_error&) {
          continue;  // valijson reports a broken pattern
        }
        if (!ok) {
          return bad_value(path, fmt::format("expected a string matching '{}', found {}",
                                             pattern.Scalar(), describe_found(data)));
        }
      }
    }
    return std::nullopt;
  }

  std::optional<Problem> check_array(const SchemaSet& set, const YAML::Node& data,
                                     const std::string& path) const {
    const auto size = static_cast<long long>(data.size());
    for (const auto& s : set) {
      if (const auto n = as_integer(s["minItems"]); n && size < *n) {
        return bad_value(path,
                         fmt::format("expected a list of at least {} items, found {}", *n, size));
      }
      if (const auto n = as_integer(s["maxItems"]); n && size > *n) {
        return bad_value(path,
                         fmt::format("expected a list of at most {} items, found {}", *n, size));
      }
    }
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (auto p = check(doc_.element(set, i), data[i], index_path(path, i))) return p;
    }
    return std::nullopt;
  }

  // The schema in `set` that rejects `key` as unknown, if any.
  static const YAML::Node* rejecting(const SchemaSet& set, const std::string& key) {
    for (const auto& s : set) {
      const YAML::Node extra = s["additionalProperties"];
      if (!extra || !extra.IsScalar() || as_boolean(extra).value_or(true)) continue;
      const YAML::Node props = s["properties"];
      if (props && props.IsMap() && props[key]) continue;
      bool by_pattern = false;
      if (const YAML::Node patterns = s["patternProperties"]; patterns && patterns.IsMap()) {
        for (const auto& kv : patterns) {
          try {
            by_pattern = by_pattern || std::regex_search(key, std::regex(kv.first.Scalar()));
          } catch (const std::regex_error&) {
          }
        }
      }
      if (!by_pattern) return &s;
    }
    return nullptr;
  }

  std::optional<Problem> check_object(const SchemaSet& set, const YAML::Node& data,
                                      const std::string& path) const {
    for (const auto& kv : data) {
      const std::string key = kv.first.as<std::string>();
      const std::string key_path = child_path(path, key);
      if (const YAML::Node* s = rejecting(set, key)) {
        const auto names = property_names({*s});
        std::string detail;
        if (auto best = did_you_mean(key, names)) {
          detail = fmt::format("; did you mean '{}'?", *best);
        } else if (names.empty()) {
          detail = "; no keys are allowed here";
        } else {
          detail = fmt::format("; allowed keys: {}", fmt::join(names, ", "));
        }
        return Problem{Problem::Kind::unknown_key, key_path, detail, {}, {}};
      }
      if (auto p = check(doc_.member(set, key), kv.second, key_path)) return p;
    }
    // Dependencies before required: "optimizer_params given without optimizer"
    // says more than "missing optimizer".
    for (const auto& s : set) {
      const YAML::Node deps = s["dependencies"];
      if (!deps || !deps.IsMap()) continue;
      for (const auto& kv : deps) {
        const std::string key = kv.first.as<std::string>();
        if (!data[key]) continue;
        if (kv.second.IsSequence()) {
          for (const auto& needed : string_list(kv.second)) {
            if (!data[needed]) {
              return Problem{Problem::Kind::dependency, child_path(path, key), {}, {needed}, {}};
            }
          }
        } else if (auto p = check(doc_.expand(kv.second), data, path)) {
          return p;
        }
      }
    }
    for (const auto& s : set) {
      for (const auto& key : string_list(s["required"])) {
        if (!data[key]) return Problem{Problem::Kind::missing_key, path, {}, {key}, {}};
      }
    }
    return check_one_of_required(set, data, path);
  }

  // oneOf whose branches only list required keys: "set exactly one of ...".
  static std::optional<Problem> check_one_of_required(const SchemaSet& set, const YAML::Node& data,
                                                      const std::string& path) {
    for (const auto& s : set) {
      const YAML::Node branches = s["oneOf"];
      if (!branches || !branches.IsSequence()) continue;
      std::vector<std::string> keys;
      std::vector<std::string> present;
      int satisfied = 0;
      bool simple = true;
      for (const auto& branch : branches) {
        if (!branch.IsMap() || !branch["required"]) {
          simple = false;
          break;
        }
        bool all = true;
        for (const auto& key : string_list(branch["required"])) {
          keys.push_back(key);
          if (data[key]) {
            present.push_back(key);
          } else {
            all = false;
          }
        }
        satisfied += all ? 1 : 0;
      }
      if (simple && satisfied != 1) {
        return Problem{Problem::Kind::exactly_one, path, {}, keys, present};
      }
    }
    return std::nullopt;
  }

  const SchemaDoc& doc_;
};

}  // namespace

std::optional<Problem> find_problem(const SchemaDoc& doc, const YAML::Node& schema,
                                    const YAML::Node& data) {
  return Walker(doc).check(doc.expand(schema), data, "");
}

}  // namespace rig::config
