// LARC as OpenSeq2Seq's post_process_gradients (open_seq2seq/optimizers/optimizers.py):
// the settings read here, the per-parameter ratios computed by ops::larc_.
#include "engine/larc.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/ops.hpp"

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
  std::vector<FlatSlice> slices;
  slices.reserve(params.parameters().size());
  for (const auto& p : params.parameters()) slices.push_back({p.offset, shape_numel(p.shape)});
  Tensor grads = params.grads();
  ops::larc_(grads, params.values(), slices,
             {settings.eta, clip, settings.min_update, settings.epsilon, learning_rate});
}

}  // namespace rig::engine
