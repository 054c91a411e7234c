// Data-layer plugin interface.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "rig/batch.hpp"
#include "rig/context.hpp"
#include "rig/export.hpp"

namespace rig {

// Constructed as DataLayer(const YAML::Node& params, const DataLayerContext& ctx).
// It yields this rank's share of every global batch.
class RIG_API DataLayer {
 public:
  virtual ~DataLayer() = default;
  // Facts the model is built from (feature counts, class counts, vocabularies).
  virtual YAML::Node info() const = 0;
  // Samples in one epoch over all ranks; -1 when unknown.
  virtual std::int64_t epoch_size() const = 0;
  // Starts epoch `epoch` (0-based); the order depends only on (seed, epoch).
  virtual void start_epoch(std::int64_t epoch) = 0;
  // The next batch of the current epoch, or nullopt when the epoch is over.
  virtual std::optional<Batch> next_batch() = 0;
  // A resumable position (epoch and offset), and a way back to it.
  virtual YAML::Node position() const = 0;
  virtual void seek(const YAML::Node& position) = 0;
  // Output lines for the predictions a model made on `batch` (infer mode).
  virtual std::vector<std::string> decode(const Batch& batch, const Tensor& predictions) const = 0;
  // The reference output of each sample of `batch`, in decode()'s format, for
  // the samples printed every print_samples_steps. The default knows none.
  virtual std::vector<std::string> decode_targets(const Batch& batch) const;
  // interactive_infer: one batch from lines a user typed (a sample each; the
  // batch's indices number them 0..n-1). The default refuses with a UserError:
  // a data layer opts in by overriding it.
  virtual Batch encode_lines(const std::vector<std::string>& lines) const;
};

}  // namespace rig
