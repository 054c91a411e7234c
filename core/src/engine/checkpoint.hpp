// Checkpoints: logdir/checkpoints/ckpt-<step>/ with model.safetensors,
// optimizer.safetensors and state.yaml, written atomically (temp dir, fsync, rename).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "formats/safetensors.hpp"
#include "rig/optimizer.hpp"
#include "rig/parameter_store.hpp"

namespace rig::engine {

struct TrainingState {
  std::int64_t step = 0;     // optimizer steps done
  std::int64_t epoch = 0;    // current data epoch
  YAML::Node data_position;  // DataLayer::position()
  std::string config_hash;   // of the resolved train config
  // RNG state: every stream is Philox keyed by (seed, step, rank, purpose),
  // so the seed and the step restore all of them (saved as rng: {generator,
  // seed, step}).
  std::uint64_t random_seed = 0;
  YAML::Node loss_scaler;   // LossScaler::state(); null without loss scaling
  double loss_scale = 1.0;  // for people reading state.yaml
  // The max_steps of the run that wrote it, so that a resume can tell when the
  // schedule changes; 0 in checkpoints written before it was kept.
  std::int64_t max_steps = 0;
  // The last train loss that run printed (the mean over its print interval)
  // and the step it was printed at; empty when none was printed before it.
  std::optional<double> train_loss;
  std::int64_t train_loss_step = 0;
  // Parameter-server runs (mpi_ps): the servers' global step and each
  // worker's clock when it was written; undefined otherwise.
  YAML::Node parameter_server;
  // The processes and iter_size that wrote it (0 when not recorded): their
  // product is the micro-batches of a step, which an elastic restart keeps.
  int processes = 0;
  std::int64_t iter_size = 0;
};

struct Checkpoint {
  std::filesystem::path dir;
  formats::NamedTensors model;
  formats::NamedTensors optimizer;
  TrainingState state;
};

// Writes root/ckpt-<state.step>/ (root is logdir/checkpoints or
// logdir/best_models) atomically: a temp folder, every file fsynced, state.yaml
// (with each file's size and CRC-32C) last, rename, fsync of root. Returns
// the folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& root,
                                      const ParameterStore& params, const Optimizer* optimizer,
                                      const TrainingState& state, const std::string& config_yaml);

// The newest ckpt-<step> folder in logdir/checkpoints, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& logdir);

// Keeps the newest `keep` ckpt-<step> folders under root and deletes the
// rest (keep <= 0 keeps all).
void prune_checkpoints(const std::filesystem::path& root, int keep);

// Reads a checkpoint folder, checking each file against the sizes and
// checksums in state.yaml; throws UserError naming the bad file.
Checkpoint load_checkpoint(const std::filesystem::path& dir);

// Copies the checkpoint's weights into the f32 masters of `params` (then
// publish_values()): every parameter and buffer must be present with the
// same shape.
void restore_parameters(const Checkpoint& checkpoint, ParameterStore& params);

// logdir/best_models/: the best `keep` evaluations by one eval metric, each a
// full checkpoint folder, listed in best_models/index.yaml (step, metric,
// value), best first.
class BestModels {
 public:
  // mode: "min" or "max".
  BestModels(std::filesystem::path logdir, std::string metric, std::string mode, int keep);
  const std::string& metric() const { return metric_; }
  // Whether `value` ranks among the best `keep` seen so far (in this run and
  // in the existing index.yaml, so a resumed run continues the ranking).
  bool improves(double value) const;
  // After save_checkpoint(logdir/best_models, ...) for `step`: records it,
  // deletes folders that fell out of the best `keep`, rewrites index.yaml.
  void record(std::int64_t step, double value);

 private:
  std::filesystem::path logdir_;
  std::string metric_;
  std::string mode_;
  int keep_;
  std::vector<std::pair<std::int64_t, double>> entries_;  // best first
};

// The best checkpoint of logdir/best_models (first in index.yaml), if any.
std::optional<std::filesystem::path> best_checkpoint(const std::filesystem::path& logdir);

// load_model: copies every parameter / buffer whose name and shape match from
// `source` (a ckpt-<step> folder, a logdir (its latest checkpoint), or a
// .safetensors file) into `params`; the rest keep their initial values.
struct TransferReport {
  std::filesystem::path source;         // the model.safetensors actually read
  std::vector<std::string> loaded;      // copied
  std::vector<std::string> mismatched;  // "name: checkpoint [a,b] vs model [c,d]"
  std::vector<std::string> missing;     // in the model, not in the checkpoint
  std::vector<std::string> unused;      // in the checkpoint, not in the model
};
TransferReport load_matching_parameters(const std::filesystem::path& source,
                                        ParameterStore& params);

}  // namespace rig::engine
