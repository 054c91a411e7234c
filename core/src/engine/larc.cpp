// LARC as OpenSeq2Seq's post_process_gradients (open_seq2seq/optimizers/optimizers.py):
// per variable, with v_norm = ||v||_2 and g_norm = ||g||_2,
//   clip:  g *= min(max(eta v_norm / (lr (g_norm + eps)), min_update), 1)
//   scale: g *= max(eta v_norm / (g_norm + eps), min_update)
#include "engine/larc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "cpu/parallel.hpp"
#include "cpu/reduce.hpp"
#include "rig/error.hpp"

namespace rig::engine {

namespace {

double number(const YAML::Node& node, const char* key) {
  try {
    const auto value = node.as<double>();
    if (std::isfinite(value)) return value;
  } catch (const YAML::Exception&) {
  }
  throw UserError(fmt::format("larc_params.{} must be a finite number, found '{}'", key,
                              node.IsScalar() ? node.Scalar() : "a collection"));
}

}  // namespace

LarcSettings read_larc_settings(const YAML::Node& larc_params) {
  if (!larc_params || !larc_params.IsMap()) {
    throw UserError(
        "larc_params must be a mapping with larc_eta (and optionally larc_mode, "
        "min_update, epsilon)");
  }
  LarcSettings s;
  bool has_eta = false;
  for (const auto& entry : larc_params) {
    const auto key = entry.first.as<std::string>();
    if (key == "larc_eta") {
      s.eta = number(entry.second, "larc_eta");
      has_eta = true;
    } else if (key == "larc_mode") {
      s.mode = entry.second.IsScalar() ? entry.second.Scalar() : "";
      if (s.mode != "clip" && s.mode != "scale") {
        throw UserError(
            fmt::format("larc_params.larc_mode must be clip or scale, found '{}'", s.mode));
      }
    } else if (key == "min_update") {
      s.min_update = number(entry.second, "min_update");
    } else if (key == "epsilon") {
      s.epsilon = number(entry.second, "epsilon");
    } else {
      throw UserError(fmt::format(
          "larc_params.{} is not a LARC parameter (larc_eta, larc_mode, min_update, epsilon)",
          key));
    }
  }
  if (!has_eta) throw UserError("larc_params needs larc_eta (the trust coefficient)");
  if (!(s.eta > 0.0)) throw UserError(fmt::format("larc_params.larc_eta {} must be > 0", s.eta));
  if (!(s.min_update >= 0.0)) {
    throw UserError(fmt::format("larc_params.min_update {} must be >= 0", s.min_update));
  }
  if (!(s.epsilon > 0.0)) {
    throw UserError(fmt::format("larc_params.epsilon {} must be > 0", s.epsilon));
  }
  return s;
}

void apply_larc(ParameterStore& params, const LarcSettings& settings, double learning_rate) {
  const bool clip = settings.mode == "clip";
  if (!clip && settings.mode != "scale") {
    throw std::invalid_argument(fmt::format("apply_larc: unknown mode '{}'", settings.mode));
  }
  const float* values = params.values().data<float>();
  float* grads = params.grads().data<float>();
  for (const auto& p : params.parameters()) {
    const std::int64_t n = shape_numel(p.shape);
    const float* v = values + p.offset;
    float* g = grads + p.offset;
    const double v_norm = std::sqrt(cpu::sum_squares(v, n));
    const double g_norm = std::sqrt(cpu::sum_squares(g, n));
    double ratio = 1.0;
    if (clip) {
      // A zero learning rate makes no update; OpenSeq2Seq's inf (or 0/0) becomes 1.
      const double denominator = learning_rate * (g_norm + settings.epsilon);
      if (denominator > 0.0) {
        ratio = std::min(std::max(settings.eta * v_norm / denominator, settings.min_update), 1.0);
      }
    } else {
      ratio = std::max(settings.eta * v_norm / (g_norm + settings.epsilon), settings.min_update);
    }
    if (ratio == 1.0) continue;
    // tf.saturate_cast to the f32 variable: a huge ratio stays finite.
    const auto r = static_cast<float>(std::min(ratio, double{std::numeric_limits<float>::max()}));
    cpu::parallel_for(n, 1 << 15, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) g[i] *= r;
    });
  }
}

}  // namespace rig::engine
