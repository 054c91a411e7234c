// Saving, finding, pruning, verifying and loading ckpt-<step> folders.
#include "engine/checkpoint.hpp"

#include <system_error>

#include <fmt/format.h>

#include "config/expansion_limit.hpp"
#include "formats/checkpoint_files.hpp"
#include "launch/test_faults.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "state.yaml";

// The f32 master copy of a parameter or buffer (its model-facing `value`
// before mixed precision, or in stores that only have one).
Tensor master_of(const ParameterInfo& p) {
  return p.master.defined() ? p.master : p.value;
}

std::vector<ParameterInfo> all_parameters(const ParameterStore& params) {
  std::vector<ParameterInfo> all = params.parameters();
  all.insert(all.end(), params.buffer_infos().begin(), params.buffer_infos().end());
  return all;
}

void emit_digest(YAML::Emitter& out, const char* name, const formats::files::FileDigest& digest) {
  out << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "bytes"
      << YAML::Value << digest.bytes << YAML::Key << "crc32c" << YAML::Value << digest.crc32c
      << YAML::EndMap;
}

std::string state_yaml(const TrainingState& state, const formats::files::FileDigest& model,
                       const formats::files::FileDigest& optimizer,
                       const std::string& config_yaml) {
  auto or_null = [](const YAML::Node& node) {
    return node ? node : YAML::Node(YAML::NodeType::Null);
  };
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "step" << YAML::Value << state.step;
  out << YAML::Key << "epoch" << YAML::Value << state.epoch;
  out << YAML::Key << "data_position" << YAML::Value << or_null(state.data_position);
  out << YAML::Key << "rng" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "generator" << YAML::Value << "philox4x32-10" << YAML::Key << "seed" << YAML::Value
      << state.random_seed << YAML::Key << "step" << YAML::Value << state.step << YAML::EndMap;
  out << YAML::Key << "loss_scale" << YAML::Value << formats::files::yaml_number(state.loss_scale);
  out << YAML::Key << "loss_scaler" << YAML::Value << or_null(state.loss_scaler);
  out << YAML::Key << "max_steps" << YAML::Value << state.max_steps;
  if (state.processes > 0) {
    out << YAML::Key << "global_batch" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
        << "processes" << YAML::Value << state.processes << YAML::Key << "iter_size" << YAML::Value
        << state.iter_size << YAML::EndMap;
  }
  out << YAML::Key << "train_loss" << YAML::Value;
  if (state.train_loss) {
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "value" << YAML::Value
        << formats::files::yaml_number(*state.train_loss) << YAML::Key << "step" << YAML::Value
        << state.train_loss_step << YAML::EndMap;
  } else {
    out << YAML::Null;
  }
  if (state.parameter_server && !state.parameter_server.IsNull()) {
    out << YAML::Key << "parameter_server" << YAML::Value << YAML::Flow << state.parameter_server;
  }
  out << YAML::Key << "config_hash" << YAML::Value << state.config_hash;
  out << YAML::Key << "files" << YAML::Value << YAML::BeginMap;
  emit_digest(out, kModelFile, model);
  emit_digest(out, kOptimizerFile, optimizer);
  out << YAML::EndMap;
  out << YAML::Key << "config" << YAML::Value << or_null(YAML::Load(config_yaml));
  out << YAML::EndMap;
  if (!out.good()) throw RunError(fmt::format("cannot format state.yaml: {}", out.GetLastError()));
  return std::string(out.c_str()) + "\n";
}

// A state.yaml that cannot be trusted.
UserError corrupt_state(const fs::path& file, const std::string& why) {
  return UserError(
      fmt::format("checkpoint file {} is corrupt: {}; delete {} to fall back to an "
                  "earlier checkpoint",
                  file.string(), why, file.parent_path().string()));
}

template <class T>
T state_value(const YAML::Node& root, const char* key, const fs::path& file, const char* type) {
  const YAML::Node node = root[key];
  if (!node) throw corrupt_state(file, fmt::format("it has no '{}'", key));
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    YAML::Emitter e;
    e << YAML::Flow << node;
    throw corrupt_state(file, fmt::format("'{}' should be {}, found '{}'", key, type, e.c_str()));
  }
}

YAML::Node load_state_file(const fs::path& dir) {
  const fs::path file = dir / kStateFile;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw UserError(fmt::format("checkpoint {} does not exist or is not a folder", dir.string()));
  }
  if (!fs::is_regular_file(file, ec)) {
    throw UserError(
        fmt::format("checkpoint folder {} has no {}: it is incomplete (a run that stopped while "
                    "saving it?) or not a checkpoint",
                    dir.string(), kStateFile));
  }
  YAML::Node root;
  try {
    root = YAML::LoadFile(file.string());
  } catch (const YAML::Exception& e) {
    throw corrupt_state(file, fmt::format("it is not valid YAML ({})", e.what()));
  }
  // Its config is compared and printed node by node: no alias bomb gets there.
  config::check_expansion(root, file.string());
  if (!root.IsMap()) {
    throw corrupt_state(file, "it should be a map with step, epoch, files and config");
  }
  return root;
}

// Checks one file against the size and CRC-32C state.yaml recorded for it.
void verify_file(const fs::path& dir, const YAML::Node& listed, const char* name) {
  const fs::path state_file = dir / kStateFile;
  const fs::path file = dir / name;
  const YAML::Node entry = listed[name];
  if (!entry || !entry.IsMap()) {
    throw corrupt_state(state_file, fmt::format("'files' does not list {}", name));
  }
  const formats::files::FileDigest expected{
      state_value<std::uint64_t>(entry, "bytes", state_file, "a size"),
      state_value<std::uint32_t>(entry, "crc32c", state_file, "a 32-bit checksum")};
  const std::string fallback =
      fmt::format("delete {} to fall back to an earlier checkpoint", dir.string());
  const auto found = formats::files::digest_file(file);
  if (!found) {
    throw UserError(
        fmt::format("checkpoint file {} is missing or unreadable (state.yaml lists it "
                    "with {} bytes); {}",
                    file.string(), expected.bytes, fallback));
  }
  if (found->bytes != expected.bytes) {
    throw UserError(fmt::format(
        "checkpoint file {} is truncated or corrupt: it is {} bytes, but state.yaml says {}; {}",
        file.string(), found->bytes, expected.bytes, fallback));
  }
  if (found->crc32c != expected.crc32c) {
    throw UserError(fmt::format(
        "checkpoint file {} is truncated or corrupt: its CRC-32C is {:08x}, but state.yaml says "
        "{:08x} (its bytes changed after it was written); {}",
        file.string(), found->crc32c, expected.crc32c, fallback));
  }
}

TrainingState read_state(const YAML::Node& root, const fs::path& file) {
  TrainingState state;
  state.step = state_value<std::int64_t>(root, "step", file, "an integer");
  state.epoch = state_value<std::int64_t>(root, "epoch", file, "an integer");
  state.config_hash = state_value<std::string>(root, "config_hash", file, "a string");
  if (root["data_position"] && !root["data_position"].IsNull()) {
    state.data_position = YAML::Clone(root["data_position"]);
  }
  // Checkpoints written before these keys existed load with the defaults.
  if (const YAML::Node rng = root["rng"]; rng && rng.IsMap() && rng["seed"]) {
    state.random_seed = state_value<std::uint64_t>(rng, "seed", file, "an unsigned integer");
  }
  if (root["loss_scale"]) {
    state.loss_scale = state_value<double>(root, "loss_scale", file, "a number");
  }
  if (root["loss_scaler"] && !root["loss_scaler"].IsNull()) {
    state.loss_scaler = YAML::Clone(root["loss_scaler"]);
  }
  if (root["parameter_server"] && !root["parameter_server"].IsNull()) {
    state.parameter_server = YAML::Clone(root["parameter_server"]);
  }
  if (root["max_steps"]) {
    state.max_steps = state_value<std::int64_t>(root, "max_steps", file, "an integer");
  }
  if (const YAML::Node batch = root["global_batch"]; batch && batch.IsMap()) {
    state.processes = state_value<int>(batch, "processes", file, "an integer");
    state.iter_size = state_value<std::int64_t>(batch, "iter_size", file, "an integer");
  }
  if (const YAML::Node loss = root["train_loss"]; loss && !loss.IsNull()) {
    if (!loss.IsMap())
      throw corrupt_state(file, "'train_loss' should be a map with value and step");
    state.train_loss = state_value<double>(loss, "value", file, "a number");
    state.train_loss_step = state_value<std::int64_t>(loss, "step", file, "an integer");
  }
  return state;
}

void remove_folder(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) throw RunError(fmt::format("cannot delete {}: {}", dir.string(), ec.message()));
}

}  // namespace

fs::path save_checkpoint(const fs::path& root, const ParameterStore& params,
                         const Optimizer* optimizer, const TrainingState& state,
                         const std::string& config_yaml) {
  const fs::path final_dir = root / fmt::format("ckpt-{}", state.step);
  const fs::path temp_dir = root / fmt::format(".tmp-ckpt-{}", state.step);
  std::error_code ec;
  const bool root_existed = fs::is_directory(root, ec);
  fs::create_directories(root, ec);
  if (ec) throw RunError(fmt::format("cannot create {}: {}", root.string(), ec.message()));
  if (!root_existed && root.has_parent_path()) formats::files::sync_directory(root.parent_path());
  remove_folder(temp_dir);  // left by a run that stopped while saving this step
  fs::create_directory(temp_dir, ec);
  if (ec) throw RunError(fmt::format("cannot create {}: {}", temp_dir.string(), ec.message()));

  formats::NamedTensors model;
  for (const auto& p : all_parameters(params)) model.emplace(p.name, master_of(p));
  const auto model_digest =
      formats::write_safetensors(temp_dir / kModelFile, model, {{"format", "rig"}});
  launch::test_fault_in_checkpoint_write(state.step);
  formats::NamedTensors optimizer_state;
  if (optimizer != nullptr) {
    for (auto& [name, tensor] : optimizer->state()) optimizer_state.emplace(name, tensor);
  }
  const auto optimizer_digest =
      formats::write_safetensors(temp_dir / kOptimizerFile, optimizer_state, {{"format", "rig"}});
  // state.yaml last: a folder with it holds complete files.
  formats::files::write_synced(temp_dir / kStateFile,
                               state_yaml(state, model_digest, optimizer_digest, config_yaml));
  formats::files::sync_directory(temp_dir);

  // Saving a step twice (a signal right after a periodic save) replaces the
  // old folder; it is moved aside first so that a complete one always exists.
  const fs::path old_dir = root / fmt::format(".old-ckpt-{}", state.step);
  const bool replacing = fs::exists(final_dir, ec);
  if (replacing) {
    remove_folder(old_dir);
    fs::rename(final_dir, old_dir, ec);
    if (ec) {
      throw RunError(fmt::format("cannot move {} aside: {}", final_dir.string(), ec.message()));
    }
  }
  fs::rename(temp_dir, final_dir, ec);
  if (ec) {
    throw RunError(fmt::format("cannot move {} to {}: {}", temp_dir.string(), final_dir.string(),
                               ec.message()));
  }
  formats::files::sync_directory(root);
  if (replacing) remove_folder(old_dir);
  return final_dir;
}

std::optional<fs::path> latest_checkpoint(const fs::path& logdir) {
  const auto all = formats::files::complete_checkpoints(logdir / "checkpoints");
  if (all.empty()) return std::nullopt;
  return all.back().second;
}

void prune_checkpoints(const fs::path& root, int keep) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  // Folders a stopped run left half-written are never used again.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".tmp-ckpt-", 0) == 0 || name.rfind(".old-ckpt-", 0) == 0) {
      stale.push_back(entry.path());
    }
  }
  for (const auto& dir : stale) remove_folder(dir);
  if (keep <= 0) return;
  const auto all = formats::files::complete_checkpoints(root);
  const auto excess = static_cast<std::ptrdiff_t>(all.size()) - keep;
  for (std::ptrdiff_t i = 0; i < excess; ++i)
    remove_folder(all[static_cast<std::size_t>(i)].second);
}

Checkpoint load_checkpoint(const fs::path& dir) {
  const YAML::Node root = load_state_file(dir);
  const fs::path state_file = dir / kStateFile;
  Checkpoint ckpt;
  ckpt.dir = dir;
  ckpt.state = read_state(root, state_file);
  if (const YAML::Node listed = root["files"]; listed && !listed.IsNull()) {
    if (!listed.IsMap()) throw corrupt_state(state_file, "'files' should be a map");
    verify_file(dir, listed, kModelFile);
    verify_file(dir, listed, kOptimizerFile);
  }
  ckpt.model = formats::read_safetensors(dir / kModelFile);
  ckpt.optimizer = formats::read_safetensors(dir / kOptimizerFile);
  return ckpt;
}

void restore_parameters(const Checkpoint& checkpoint, ParameterStore& params) {
  const fs::path file = checkpoint.dir / kModelFile;
  for (const auto& p : all_parameters(params)) {
    auto it = checkpoint.model.find(p.name);
    if (it == checkpoint.model.end()) {
      throw UserError(
          fmt::format("checkpoint {} has no parameter '{}': it was written by a "
                      "different model (use load_model to copy only the matching ones)",
                      file.string(), p.name));
    }
    const Tensor& saved = it->second;
    if (saved.shape() != p.shape || !is_floating(saved.dtype())) {
      throw UserError(fmt::format("checkpoint {}: parameter '{}' is {} {} but the model has {} {}",
                                  file.string(), p.name, dtype_name(saved.dtype()),
                                  to_string(saved.shape()), dtype_name(DType::f32),
                                  to_string(p.shape)));
    }
    Tensor target = master_of(p);
    target.copy_from(saved);
  }
  if (params.compute_dtype() != DType::f32) params.publish_values();
}

}  // namespace rig::engine
