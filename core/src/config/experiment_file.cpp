#include "config/experiment_file.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "config/defaults.hpp"
#include "config/expansion_limit.hpp"
#include "config/experiment_schema.hpp"
#include "config/merge.hpp"
#include "config/schema_validator.hpp"
#include "config/utf8_text.hpp"
#include "config/yaml_values.hpp"
#include "rig/error.hpp"

namespace rig::config {

namespace {

constexpr const char* kShape =
    "a map with base_params (and optionally train_params, eval_params, infer_params)";

}  // namespace

ExperimentFile ExperimentFile::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw UserError(fmt::format("{}: experiment file not found", path));
  if (fs::is_directory(status)) {
    throw UserError(fmt::format("{}: is a directory, not an experiment file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UserError(fmt::format("{}: cannot read experiment file: {}", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    throw UserError(fmt::format("{}: cannot read experiment file: {}", path, std::strerror(errno)));
  }
  return parse(text.str(), path);
}

ExperimentFile ExperimentFile::parse(const std::string& text, const std::string& path) {
  ExperimentFile file;
  file.path_ = path;
  try {
    file.root_ = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format("{}:{}:{}: YAML syntax error: {}", path, e.mark.line + 1,
                                e.mark.column + 1, e.msg));
  }
  check_expansion(file.root_, path);
  check_utf8(file.root_, path);
  if (!file.root_.IsDefined() || file.root_.IsNull()) {
    throw UserError(fmt::format("{}: experiment file is empty; expected {}", path, kShape));
  }
  if (!file.root_.IsMap()) {
    const YAML::Mark mark = file.root_.Mark();
    throw UserError(fmt::format("{}:{}:{}: an experiment file must be {}, found {}", path,
                                mark.line + 1, mark.column + 1, kShape,
                                describe_found(file.root_)));
  }
  record_file_sources(file.root_, path, "", file.root_.Mark(), file.sources_);
  validate(experiment_schema(), "#", file.root_, ErrorContext{path, "", "", "", &file.sources_});
  return file;
}

ResolvedConfig ExperimentFile::resolve(const std::string& mode,
                                       const std::vector<Override>& overrides) const {
  if (mode != "train" && mode != "eval" && mode != "infer") {
    throw UserError(fmt::format("unknown mode '{}' (expected train, eval or infer)", mode));
  }
  ResolvedConfig cfg;
  cfg.mode = mode;
  cfg.experiment_file = path_;
  cfg.root = YAML::Node(YAML::NodeType::Map);
  const std::string section = mode + "_params";
  merge_section(cfg.root, root_["base_params"], "base_params", sources_, cfg.sources);
  if (root_[section]) merge_section(cfg.root, root_[section], section, sources_, cfg.sources);
  for (const auto& override : overrides) {
    // Overrides address the resolved config, which has no sections.
    const std::string first = override.path.substr(0, override.path.find('.'));
    if (first == "base_params" || first == "train_params" || first == "eval_params" ||
        first == "infer_params") {
      throw UserError(fmt::format(
          "command line ({}): {}: overrides name keys of the resolved config; leave out '{}.'",
          override.origin, override.path, first));
    }
    apply_override(cfg.root, cfg.sources, override);
  }

  const SchemaDoc& doc = experiment_schema();
  const std::string pointer = "#/definitions/resolved_" + mode;
  fill_defaults(doc, doc.at(pointer), cfg.root, "", &cfg.sources);
  validate(doc, pointer, cfg.root, ErrorContext{path_, mode, "", "", &cfg.sources});
  return cfg;
}

void require_exactly_one(const ResolvedConfig& cfg, const std::vector<std::string>& keys) {
  std::vector<std::string> present;
  for (const auto& key : keys) {
    const YAML::Node value = cfg.root[key];
    if (value && !value.IsNull()) present.push_back(key);
  }
  if (present.size() == 1) return;
  throw_problem(Problem{Problem::Kind::exactly_one, "", {}, keys, present},
                ErrorContext{cfg.experiment_file, cfg.mode, "", "", &cfg.sources});
}

}  // namespace rig::config
