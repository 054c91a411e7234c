#include "report/run_config.hpp"

#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace rig::report {

RunConfig read_run_config(const std::filesystem::path& logdir) {
  RunConfig config;
  std::ifstream in(logdir / "config.yaml");
  if (!in) return config;
  std::ostringstream text;
  text << in.rdbuf();
  config.text = text.str();

  // run.cpp writes "# Resolved by rig <version> from <experiment file>" first.
  std::istringstream lines(config.text);
  std::string line;
  const std::string marker = " from ";
  while (std::getline(lines, line) && line.starts_with("#")) {
    const auto at = line.find(marker);
    if (line.starts_with("# Resolved by") && at != std::string::npos) {
      config.experiment = std::filesystem::path(line.substr(at + marker.size())).stem().string();
      break;
    }
  }
  try {
    const YAML::Node root = YAML::Load(config.text);
    if (root.IsMap() && root["model"] && root["model"].IsScalar()) {
      config.model = root["model"].as<std::string>();
    }
  } catch (const YAML::Exception&) {
    // The report still shows the text; only the model name is missing.
  }
  return config;
}

std::string report_title(const RunConfig& config, const std::filesystem::path& logdir) {
  if (!config.experiment.empty() && !config.model.empty()) {
    return config.experiment + " (" + config.model + ")";
  }
  if (!config.experiment.empty()) return config.experiment;
  if (!config.model.empty()) return config.model;
  const auto name = std::filesystem::absolute(logdir).lexically_normal().filename();
  return name.empty() ? std::filesystem::absolute(logdir)
                            .lexically_normal()
                            .parent_path()
                            .filename()
                            .string()
                      : name.string();
}

}  // namespace rig::report
