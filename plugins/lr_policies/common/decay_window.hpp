// What OpenSeq2Seq's decaying learning-rate policies share: an optional linear
// warm-up, decay that starts at begin_decay_at (never before the warm-up has
// ended) and runs over decay_steps (the run's max_steps when not given, as
// OpenSeq2Seq auto-filled it). Header-only: each policy is its own plugin.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "rig/context.hpp"
#include "rig/error.hpp"

namespace rig_lr {

struct DecayWindow {
  std::int64_t warmup_steps = 0;
  std::int64_t begin_decay_at = 0;  // max(warmup_steps, begin_decay_at)
  std::int64_t decay_steps = 0;

  static DecayWindow from(const YAML::Node& params, const rig::LrPolicyContext& ctx,
                          const std::string& policy) {
    auto optional_int = [&](const char* key) {
      return params[key] ? params[key].as<std::int64_t>() : std::int64_t{0};
    };
    DecayWindow w;
    w.warmup_steps = optional_int("warmup_steps");
    const std::int64_t begin = optional_int("begin_decay_at");
    if (begin < 0) throw rig::UserError(policy + ": begin_decay_at must be >= 0");
    if (w.warmup_steps < 0) throw rig::UserError(policy + ": warmup_steps must be >= 0");
    w.begin_decay_at = std::max(w.warmup_steps, begin);
    w.decay_steps =
        params["decay_steps"] ? params["decay_steps"].as<std::int64_t>() : ctx.max_steps;
    if (w.decay_steps <= 0) {
      throw rig::UserError(
          fmt::format("{}: decay_steps must be > 0 (got {}; when absent it is the run's max_steps)",
                      policy, w.decay_steps));
    }
    return w;
  }

  // learning_rate scaled linearly from 0 during the warm-up.
  double warmed_up(double learning_rate, std::int64_t step) const {
    if (warmup_steps > 0 && step < warmup_steps) {
      return learning_rate * static_cast<double>(step) / static_cast<double>(warmup_steps);
    }
    return learning_rate;
  }
  bool decaying(std::int64_t step) const { return step >= begin_decay_at; }
  // Steps into the decay, capped at decay_steps.
  double decay_position(std::int64_t step) const {
    return std::min(static_cast<double>(step - begin_decay_at), static_cast<double>(decay_steps));
  }
};

}  // namespace rig_lr
