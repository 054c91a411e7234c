// Optimizer plugin interface.
#pragma once

#include <map>
#include <stdexcept>
#include <string>

#include "rig/context.hpp"
#include "rig/export.hpp"
#include "rig/mixed_precision_step.hpp"
#include "rig/tensor.hpp"

namespace rig {

// Constructed as Optimizer(const YAML::Node& params, const OptimizerContext& ctx);
// it updates ctx.params.values() from ctx.params.grads() in one pass (or,
// with step_mixed, from the model's 16-bit gradients).
class RIG_API Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(double learning_rate) = 0;
  // Named state buffers (e.g. "momentum"), laid out like the flat parameter buffer.
  virtual std::map<std::string, Tensor> state() const = 0;
  virtual void load_state(const std::map<std::string, Tensor>& state) = 0;
  // Each element's update depends on that element alone (sgd, adam): a
  // parameter server may then split one parameter among several servers.
  // Layer-wise optimizers (novograd) keep the default.
  virtual bool element_wise() const { return false; }
  // Whether step_mixed folds mixed precision's work into the update's pass
  // (rig/mixed_precision_step.hpp: ops::adam_update and sgd_update take it).
  // Under a 16-bit compute dtype the engine then hands it the model's 16-bit
  // gradients and values instead of unscaling and publishing in passes of
  // its own; the result must have the bits of step() between those passes.
  virtual bool folds_mixed_precision() const { return false; }
  // One step with that work folded in: called only where folds_mixed_precision().
  virtual void step_mixed(double /*learning_rate*/, const MixedPrecisionStep& /*mixed*/) {
    throw std::logic_error("Optimizer::step_mixed on an optimizer that does not fold it");
  }
};

}  // namespace rig
