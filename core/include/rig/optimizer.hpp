// Optimizer plugin interface.
#pragma once

#include <map>
#include <string>

#include "rig/context.hpp"
#include "rig/export.hpp"
#include "rig/tensor.hpp"

namespace rig {

// Constructed as Optimizer(const YAML::Node& params, const OptimizerContext& ctx);
// it updates ctx.params.values() from ctx.params.grads() in one pass.
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
};

}  // namespace rig
