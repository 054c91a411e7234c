#include "engine/settings.hpp"

namespace rig::engine {
namespace {

template <class T>
std::optional<T> optional_key(const YAML::Node& root, const char* key) {
  YAML::Node node = root[key];
  if (!node || node.IsNull()) return std::nullopt;
  return node.as<T>();
}

}  // namespace

EngineSettings read_settings(const config::ResolvedConfig& config) {
  const YAML::Node& root = config.root;
  EngineSettings s;
  s.batch_size_per_gpu = root["batch_size_per_gpu"].as<std::int64_t>();
  s.max_steps = optional_key<std::int64_t>(root, "max_steps");
  s.num_epochs = optional_key<double>(root, "num_epochs");
  s.print_loss_steps = root["print_loss_steps"].as<std::int64_t>();
  s.eval_steps = root["eval_steps"].as<std::int64_t>();
  s.save_checkpoint_steps = root["save_checkpoint_steps"].as<std::int64_t>();
  s.logdir = root["logdir"].as<std::string>();
  s.random_seed = root["random_seed"].as<std::uint64_t>();
  s.iter_size = root["iter_size"].as<std::int64_t>();
  s.max_grad_norm = optional_key<double>(root, "max_grad_norm");
  s.target_loss = optional_key<double>(root, "target_loss");
  return s;
}

}  // namespace rig::engine
