// Loss scaling for float16 / mixed training, as OpenSeq2Seq: a fixed number,
// or an automatic scaler (Backoff, LogMax) that reacts to gradient overflow.
// The engine multiplies the loss by scale() before backward, divides the
// gradients by it afterwards, and calls update() once per attempted step.
#pragma once

#include <memory>
#include <string>

#include <yaml-cpp/yaml.h>

namespace rig::engine {

class LossScaler {
 public:
  virtual ~LossScaler() = default;
  virtual double scale() const = 0;
  // True for Backoff / LogMax: an overflow then skips the update instead of
  // stopping the run.
  virtual bool automatic() const = 0;
  // After backward and unscaling: `overflow` when any gradient is inf / NaN;
  // `grad_amax` the largest |gradient| after unscaling, as
  // ops::gradient_stats gives it (LogMax's statistic; OpenSeq2Seq
  // gives its scalers the unscaled gradients). A non-finite grad_amax counts
  // as an overflow.
  virtual void update(bool overflow, double grad_amax) = 0;
  // Everything needed to resume bit-exactly (saved in state.yaml): a map with
  // "algorithm" and the scaler's variables, doubles as shortest round-trip text.
  // load_state refuses (UserError) a state of another algorithm or a missing key.
  virtual YAML::Node state() const = 0;
  virtual void load_state(const YAML::Node& state) = 0;
  virtual std::string describe() const = 0;  // e.g. "Backoff (scale 16384)"
};

// loss_scaling: absent / null (scale 1), a positive number (fixed scale), or
// "Backoff" / "LogMax" with loss_scaling_params (OpenSeq2Seq's names and
// defaults; unknown keys are refused by the experiment schema).
std::unique_ptr<LossScaler> make_loss_scaler(const YAML::Node& loss_scaling,
                                             const YAML::Node& loss_scaling_params);

}  // namespace rig::engine
