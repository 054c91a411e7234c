#include "engine/checkpoint.hpp"

#include <fstream>
#include <regex>
#include <system_error>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

std::optional<std::int64_t> checkpoint_step(const fs::path& dir) {
  static const std::regex pattern(R"(ckpt-(\d+))");
  std::smatch match;
  std::string name = dir.filename().string();
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoll(match[1].str());
}

}  // namespace

fs::path save_checkpoint(const fs::path& logdir, const ParameterStore& params,
                         const Optimizer* optimizer, const TrainingState& state,
                         const std::string& config_yaml) {
  const fs::path root = logdir / "checkpoints";
  const fs::path final_dir = root / fmt::format("ckpt-{}", state.step);
  const fs::path temp_dir = root / fmt::format(".tmp-ckpt-{}", state.step);
  std::error_code ec;
  fs::create_directories(root, ec);
  fs::remove_all(temp_dir, ec);
  fs::create_directories(temp_dir, ec);
  if (ec) throw RunError(fmt::format("cannot create {}: {}", temp_dir.string(), ec.message()));

  NamedTensors model;
  for (const auto& p : params.parameters()) model.emplace(p.name, p.value);
  for (const auto& b : params.buffer_infos()) model.emplace(b.name, b.value);
  write_safetensors(temp_dir / "model.safetensors", model, {{"format", "rig"}});
  NamedTensors optimizer_state;
  if (optimizer != nullptr) {
    for (auto& [name, tensor] : optimizer->state()) optimizer_state.emplace(name, tensor);
  }
  write_safetensors(temp_dir / "optimizer.safetensors", optimizer_state, {{"format", "rig"}});

  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "step" << YAML::Value << state.step << YAML::Key << "epoch"
      << YAML::Value << state.epoch << YAML::Key << "data_position" << YAML::Value
      << (state.data_position ? state.data_position : YAML::Node(YAML::NodeType::Map)) << YAML::Key
      << "config_hash" << YAML::Value << state.config_hash << YAML::Key << "config" << YAML::Value
      << YAML::Load(config_yaml) << YAML::EndMap;
  {
    std::ofstream file(temp_dir / "state.yaml");
    file << out.c_str() << "\n";
    if (!file) throw RunError(fmt::format("cannot write {}", (temp_dir / "state.yaml").string()));
  }
  fs::remove_all(final_dir, ec);
  fs::rename(temp_dir, final_dir, ec);
  if (ec) {
    throw RunError(fmt::format("cannot move {} to {}: {}", temp_dir.string(), final_dir.string(),
                               ec.message()));
  }
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& logdir) {
  std::error_code ec;
  const fs::path root = logdir / "checkpoints";
  if (!fs::is_directory(root, ec)) return std::nullopt;
  std::optional<fs::path> best;
  std::int64_t best_step = -1;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    auto step = checkpoint_step(entry.path());
    if (step && *step > best_step && entry.is_directory()) {
      best_step = *step;
      best = entry.path();
    }
  }
  return best;
}

Checkpoint load_checkpoint(const fs::path& dir) {
  Checkpoint ckpt;
  ckpt.dir = dir;
  const fs::path state_file = dir / "state.yaml";
  YAML::Node state;
  try {
    state = YAML::LoadFile(state_file.string());
    ckpt.state.step = state["step"].as<std::int64_t>();
    ckpt.state.epoch = state["epoch"].as<std::int64_t>();
    ckpt.state.data_position = state["data_position"];
    ckpt.state.config_hash = state["config_hash"].as<std::string>();
  } catch (const YAML::Exception& e) {
    throw UserError(
        fmt::format("checkpoint file {} is missing or corrupt: {}", state_file.string(), e.what()));
  }
  ckpt.model = read_safetensors(dir / "model.safetensors");
  ckpt.optimizer = read_safetensors(dir / "optimizer.safetensors");
  return ckpt;
}

void restore_parameters(const Checkpoint& checkpoint, ParameterStore& params) {
  std::vector<ParameterInfo> all = params.parameters();
  all.insert(all.end(), params.buffer_infos().begin(), params.buffer_infos().end());
  for (const auto& p : all) {
    auto it = checkpoint.model.find(p.name);
    if (it == checkpoint.model.end()) {
      throw UserError(
          fmt::format("checkpoint {} has no parameter '{}': it was written by a "
                      "different model",
                      (checkpoint.dir / "model.safetensors").string(), p.name));
    }
    if (it->second.shape() != p.shape || it->second.dtype() != p.value.dtype()) {
      throw UserError(fmt::format("checkpoint {}: parameter '{}' is {} but the model has {}",
                                  (checkpoint.dir / "model.safetensors").string(), p.name,
                                  to_string(it->second.shape()), to_string(p.shape)));
    }
    Tensor target = p.value;
    target.copy_from(it->second);
  }
}

}  // namespace rig::engine
