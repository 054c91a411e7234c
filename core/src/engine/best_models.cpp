// logdir/best_models/: the best `keep` evaluations by one metric, each a full
// checkpoint folder, ranked in index.yaml.
#include <cmath>
#include <set>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "engine/checkpoint.hpp"
#include "formats/checkpoint_files.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

constexpr const char* kIndexFile = "index.yaml";

struct Index {
  std::string metric;
  std::string mode;
  std::vector<std::pair<std::int64_t, double>> entries;  // best first
};

fs::path folder_of(const fs::path& root, std::int64_t step) {
  return root / fmt::format("ckpt-{}", step);
}

// Reads best_models/index.yaml, dropping entries whose folder is gone (deleted
// by hand); nullopt if there is no index.
std::optional<Index> read_index(const fs::path& root) {
  const fs::path file = root / kIndexFile;
  std::error_code ec;
  if (!fs::exists(file, ec)) return std::nullopt;
  Index index;
  try {
    const YAML::Node doc = YAML::LoadFile(file.string());
    index.metric = doc["metric"].as<std::string>();
    index.mode = doc["mode"].as<std::string>();
    for (const auto& model : doc["models"]) {
      const auto step = model["step"].as<std::int64_t>();
      const auto value = model["value"].as<double>();
      if (fs::is_regular_file(folder_of(root, step) / "state.yaml", ec)) {
        index.entries.emplace_back(step, value);
      }
    }
  } catch (const YAML::Exception& e) {
    throw UserError(fmt::format(
        "{} is corrupt ({}): it should hold metric, mode and models: [{{step, value}}, ...]; "
        "delete {} to start the ranking anew",
        file.string(), e.what(), root.string()));
  }
  return index;
}

void write_index(const fs::path& root, const Index& index) {
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "metric" << YAML::Value << index.metric << YAML::Key
      << "mode" << YAML::Value << index.mode << YAML::Key << "models" << YAML::Value
      << YAML::BeginSeq;
  for (const auto& [step, value] : index.entries) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "step" << YAML::Value << step << YAML::Key
        << "value" << YAML::Value << formats::files::yaml_number(value) << YAML::Key << "dir"
        << YAML::Value << fmt::format("ckpt-{}", step) << YAML::EndMap;
  }
  out << YAML::EndSeq << YAML::EndMap;
  formats::files::replace_file_atomically(root / kIndexFile, std::string(out.c_str()) + "\n");
}

}  // namespace

BestModels::BestModels(fs::path logdir, std::string metric, std::string mode, int keep)
    : logdir_(std::move(logdir)), metric_(std::move(metric)), mode_(std::move(mode)), keep_(keep) {
  if (mode_ != "min" && mode_ != "max") {
    throw std::invalid_argument(
        fmt::format("BestModels: mode must be min or max (resolve auto first), got '{}'", mode_));
  }
  const fs::path root = logdir_ / "best_models";
  if (auto index = read_index(root)) {
    if (index->metric != metric_ || index->mode != mode_) {
      throw UserError(fmt::format(
          "{} ranks checkpoints by {} ({}), but this run's best_model_metric / best_model_mode "
          "are {} ({}); set them back, or move {} away to start a new ranking",
          (root / kIndexFile).string(), index->metric, index->mode, metric_, mode_, root.string()));
    }
    entries_ = std::move(index->entries);
  }
}

bool BestModels::improves(double value) const {
  if (keep_ <= 0 || std::isnan(value)) return false;
  if (static_cast<int>(entries_.size()) < keep_) return true;
  const double worst = entries_[static_cast<std::size_t>(keep_) - 1].second;
  // Strictly better: on a tie the earlier checkpoint stays.
  return mode_ == "min" ? value < worst : value > worst;
}

void BestModels::record(std::int64_t step, double value) {
  if (keep_ <= 0) return;
  const fs::path root = logdir_ / "best_models";
  std::erase_if(entries_, [&](const auto& e) { return e.first == step; });
  auto better = [&](double a, double b) { return mode_ == "min" ? a < b : a > b; };
  // After every entry at least as good, so that ties keep the earlier ones first.
  auto pos = entries_.begin();
  while (pos != entries_.end() && !better(value, pos->second)) ++pos;
  entries_.insert(pos, {step, value});
  if (static_cast<int>(entries_.size()) > keep_) entries_.resize(static_cast<std::size_t>(keep_));

  // The index first, then the deletions: a stop in between leaves only
  // unlisted folders, which the next record() removes.
  write_index(root, Index{metric_, mode_, entries_});
  std::set<std::int64_t> kept;
  for (const auto& e : entries_) kept.insert(e.first);
  std::vector<fs::path> dropped;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto ckpt_step = formats::files::checkpoint_step(entry.path());
    if (ckpt_step && kept.count(*ckpt_step) == 0) dropped.push_back(entry.path());
  }
  for (const auto& dir : dropped) {
    fs::remove_all(dir, ec);
    if (ec) throw RunError(fmt::format("cannot delete {}: {}", dir.string(), ec.message()));
  }
  prune_checkpoints(root, 0);  // only the temp folders of a stopped save
}

std::optional<fs::path> best_checkpoint(const fs::path& logdir) {
  const fs::path root = logdir / "best_models";
  const auto index = read_index(root);
  if (!index || index->entries.empty()) return std::nullopt;
  return folder_of(root, index->entries.front().first);
}

}  // namespace rig::engine
