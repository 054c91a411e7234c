#include "engine/resume.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "engine/run_parts.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

// Keys that may change between a run and its resumption without making the
// checkpoint belong to a different experiment.
constexpr const char* kScheduleKeys[] = {
    "max_steps",
    "num_epochs",
    "logdir",
    "print_loss_steps",
    "eval_steps",
    "save_checkpoint_steps",
    "checkpoint_every_s",
    "target_loss",
    "save_summaries_steps",
    "print_samples_steps",
    "num_checkpoints",
    "best_model_metric",
    "best_model_mode",
    "num_best_models",
    "load_model",
    "device",            // a run may resume on another device
    "matmul_precision",  // or at another matmul precision
    "cudnn_benchmark",   // or choosing convolution engines otherwise
    // or with other processes: a parameter-server job (mpi_ps, another number
    // of servers) resumes on mpi and back
    "communicator",
    "communicator_params",
    // and with another iter_size: an elastic restart on fewer processes keeps
    // processes x iter_size, and so the global batch (the resume notes a change)
    "iter_size",
};

}  // namespace

std::string identity_yaml(const config::ResolvedConfig& cfg) {
  YAML::Node copy = YAML::Clone(cfg.root);
  for (const char* key : kScheduleKeys) copy.remove(key);
  YAML::Emitter out;
  out << copy;
  return out.c_str();
}

ResumePoint find_resume_point(const fs::path& logdir, bool continue_learning,
                              const std::string& identity) {
  const auto existing = latest_checkpoint(logdir);
  if (!continue_learning) {
    if (existing) {
      throw UserError(
          fmt::format("logdir {} already holds checkpoints from an earlier run; resume it with "
                      "--continue_learning, or start fresh with another --logdir (or delete {})",
                      logdir.string(), logdir.string()));
    }
    return {};
  }
  if (!existing) {
    throw UserError(
        fmt::format("--continue_learning: {} holds no checkpoint to resume from; drop the flag "
                    "to start a new run",
                    (logdir / "checkpoints").string()));
  }
  Checkpoint ckpt = load_checkpoint(*existing);
  if (ckpt.state.config_hash != config::fnv1a64_hex(identity)) {
    const YAML::Node saved = YAML::LoadFile((ckpt.dir / "state.yaml").string())["config"];
    // Both sides are identity configs: the schedule keys are already gone.
    const std::vector<std::string> diffs = config_differences(saved, YAML::Load(identity));
    throw UserError(fmt::format(
        "--continue_learning: checkpoint {} was written by a different experiment config "
        "(only max_steps, num_epochs, logdir, logging intervals, the device, the communicator and "
        "iter_size may change); differences "
        "(checkpoint -> now): {}",
        ckpt.dir.string(), diffs.empty() ? "unknown" : fmt::format("{}", fmt::join(diffs, "; "))));
  }
  TrainingState state = ckpt.state;
  return {std::move(state), std::move(ckpt)};
}

Checkpoint checkpoint_for_evaluation(const fs::path& logdir, const std::string& mode,
                                     const std::string& which) {
  if (which == "best") {
    auto best = best_checkpoint(logdir);
    if (!best) {
      throw UserError(fmt::format(
          "--checkpoint best: {} holds no best model; train with --mode train_eval (which keeps "
          "num_best_models by best_model_metric) or use --checkpoint latest",
          (logdir / "best_models").string()));
    }
    return load_checkpoint(*best);
  }
  if (which != "latest") {
    if (!fs::is_directory(which)) {
      throw UserError(fmt::format(
          "--checkpoint {}: no such folder (expected latest, best or a ckpt-<step> folder)",
          which));
    }
    return load_checkpoint(which);
  }
  auto latest = latest_checkpoint(logdir);
  if (!latest) {
    throw UserError(
        fmt::format("{} mode needs a trained model, but {} holds no checkpoint; train first "
                    "(rig run EXP --mode train) or point --logdir at a trained run",
                    mode, (logdir / "checkpoints").string()));
  }
  return load_checkpoint(*latest);
}

std::string schedule_change_note(const LrPolicy& now, const LrPolicy& before,
                                 const std::string& policy, std::int64_t step,
                                 std::int64_t old_max_steps, std::int64_t new_max_steps) {
  const std::int64_t span = std::max(old_max_steps, new_max_steps);
  constexpr std::int64_t kSamples = 64;
  bool depends = now.learning_rate(step) != before.learning_rate(step);
  for (std::int64_t i = 0; i <= kSamples && !depends; ++i) {
    const std::int64_t s = span * i / kSamples;
    depends = now.learning_rate(s) != before.learning_rate(s);
  }
  if (!depends) return "";
  return fmt::format(
      "max_steps changed from {} (checkpoint) to {} and lr policy {} depends on it: from step {} "
      "on the rates are the {}-step schedule's ({:.6g} at step {}; the {}-step schedule gives "
      "{:.6g} there)",
      old_max_steps, new_max_steps, policy, step, new_max_steps, now.learning_rate(step), step,
      old_max_steps, before.learning_rate(step));
}

}  // namespace rig::engine
