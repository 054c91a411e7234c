// Learning-rate policy plugin interface.
#pragma once

#include <cstdint>

#include "rig/context.hpp"
#include "rig/export.hpp"

namespace rig {

// Constructed as LrPolicy(const YAML::Node& params, const LrPolicyContext& ctx).
class RIG_API LrPolicy {
 public:
  virtual ~LrPolicy() = default;
  // The learning rate at global step `step` (0-based). A pure function.
  virtual double learning_rate(std::int64_t step) const = 0;
};

}  // namespace rig
