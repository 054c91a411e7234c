// The loss scalers of OpenSeq2Seq (open_seq2seq/optimizers/automatic_loss_scaler.py):
// a fixed scale, BackoffScaler and LogMaxScaler with their parameter names,
// defaults, initial scales and update rules, computed in double.
#include "engine/loss_scaler.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::engine {

namespace {

// Doubles are written as their shortest round-tripping text ({} in fmt), so
// a resumed scaler continues bit-exactly.
std::string exact(double value) {
  return fmt::format("{}", value);
}

double clip(double value, double low, double high) {
  return std::min(std::max(value, low), high);
}

// A key of a saved scaler state; a missing or malformed one is a corrupt checkpoint.
template <class T>
T state_value(const YAML::Node& state, const char* algorithm, const char* key) {
  const YAML::Node node = state[key];
  try {
    if (node && node.IsScalar()) return node.as<T>();
  } catch (const YAML::Exception&) {
  }
  throw UserError(
      fmt::format("loss scaler state ({}): '{}' is missing or not a number", algorithm, key));
}

void check_algorithm(const YAML::Node& state, const char* algorithm) {
  const YAML::Node node = state["algorithm"];
  const std::string found = node && node.IsScalar() ? node.as<std::string>() : "(none)";
  if (found != algorithm) {
    throw UserError(
        fmt::format("loss scaler state: saved by the '{}' scaler, but the experiment uses '{}'",
                    found, algorithm));
  }
}

class FixedScaler final : public LossScaler {
 public:
  explicit FixedScaler(double scale) : scale_(scale) {}
  double scale() const override { return scale_; }
  bool automatic() const override { return false; }
  void update(bool /*overflow*/, double /*grad_amax*/) override {}
  YAML::Node state() const override {
    YAML::Node s;
    s["algorithm"] = "fixed";
    s["scale"] = exact(scale_);
    return s;
  }
  void load_state(const YAML::Node& state) override {
    check_algorithm(state, "fixed");
    const auto saved = state_value<double>(state, "fixed", "scale");
    if (saved != scale_) {
      throw UserError(fmt::format(
          "loss scaler state: the checkpoint's fixed loss scale {} differs from loss_scaling {}",
          saved, scale_));
    }
  }
  std::string describe() const override { return fmt::format("fixed (scale {})", scale_); }

 private:
  double scale_;
};

// The keys each automatic scaler reads, with OpenSeq2Seq's defaults.
using Params = std::map<std::string, double>;

const Params kBackoffDefaults = {{"scale_min", 1.0},
                                 {"scale_max", 16777216.0},  // 2^24
                                 {"step_factor", 2.0},
                                 {"step_window", 2000.0}};

const Params kLogMaxDefaults = {{"scale_min", 1.0}, {"scale_max", 16777216.0},
                                {"log_max", 16.0},  {"beta1", 0.99},
                                {"beta2", 0.999},   {"overflow_std_dev", 3.09}};

std::string key_list(const Params& defaults) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : defaults) keys.push_back(key);
  return fmt::format("{}", fmt::join(keys, ", "));
}

// The defaults overridden by loss_scaling_params; a key the scaler does not
// read, or a value that is not a number, is refused naming it.
Params read_params(const std::string& algorithm, const Params& defaults, const YAML::Node& given) {
  Params params = defaults;
  if (!given || given.IsNull()) return params;
  if (!given.IsMap()) {
    throw UserError(fmt::format("loss_scaling_params must be a mapping of {}'s parameters ({})",
                                algorithm, key_list(defaults)));
  }
  for (const auto& entry : given) {
    const auto key = entry.first.as<std::string>();
    if (defaults.count(key) == 0) {
      throw UserError(fmt::format(
          "loss_scaling_params.{} does not apply to loss_scaling {}; its parameters are: {}", key,
          algorithm, key_list(defaults)));
    }
    try {
      params[key] = entry.second.as<double>();
    } catch (const YAML::Exception&) {
      throw UserError(
          fmt::format("loss_scaling_params.{} must be a number, found '{}'", key,
                      entry.second.IsScalar() ? entry.second.Scalar() : "a collection"));
    }
    if (!std::isfinite(params[key])) {
      throw UserError(fmt::format("loss_scaling_params.{} must be finite", key));
    }
  }
  const double low = params.at("scale_min");
  const double high = params.at("scale_max");
  if (!(low > 0.0) || !(low <= high)) {
    throw UserError(fmt::format(
        "loss_scaling_params: scale_min {} and scale_max {} must satisfy 0 < scale_min <= "
        "scale_max",
        low, high));
  }
  return params;
}

// BackoffScaler: starts at scale_max; an overflow divides the scale by
// step_factor; every step_window steps since the last overflow (or since the
// start) multiply it by step_factor; always clipped to [scale_min, scale_max].
// OpenSeq2Seq's graph reads the iteration counter before incrementing it.
class BackoffScaler final : public LossScaler {
 public:
  explicit BackoffScaler(const Params& p)
      : scale_min_(p.at("scale_min")),
        scale_max_(p.at("scale_max")),
        step_factor_(p.at("step_factor")),
        scale_(scale_max_) {
    const double window = p.at("step_window");
    if (!(step_factor_ > 1.0)) {
      throw UserError(fmt::format("loss_scaling_params.step_factor {} must be > 1", step_factor_));
    }
    if (window < 1.0 || window != std::floor(window) || window > 1e15) {
      throw UserError(
          fmt::format("loss_scaling_params.step_window {} must be a whole number >= 1", window));
    }
    step_window_ = static_cast<std::int64_t>(window);
  }
  double scale() const override { return scale_; }
  bool automatic() const override { return true; }
  void update(bool overflow, double grad_amax) override {
    if (overflow || !std::isfinite(grad_amax)) {
      scale_ = clip(scale_ / step_factor_, scale_min_, scale_max_);
      last_overflow_iteration_ = iteration_;
    } else if ((iteration_ - last_overflow_iteration_) % step_window_ == 0) {
      scale_ = clip(scale_ * step_factor_, scale_min_, scale_max_);
    }
    ++iteration_;
  }
  YAML::Node state() const override {
    YAML::Node s;
    s["algorithm"] = "Backoff";
    s["scale"] = exact(scale_);
    s["iteration"] = iteration_;
    s["last_overflow_iteration"] = last_overflow_iteration_;
    return s;
  }
  void load_state(const YAML::Node& state) override {
    check_algorithm(state, "Backoff");
    scale_ = state_value<double>(state, "Backoff", "scale");
    iteration_ = state_value<std::int64_t>(state, "Backoff", "iteration");
    last_overflow_iteration_ =
        state_value<std::int64_t>(state, "Backoff", "last_overflow_iteration");
  }
  std::string describe() const override { return fmt::format("Backoff (scale {})", scale_); }

 private:
  double scale_min_;
  double scale_max_;
  double step_factor_;
  std::int64_t step_window_ = 2000;
  double scale_;
  std::int64_t iteration_ = 0;
  std::int64_t last_overflow_iteration_ = -1;
};

// LogMaxScaler: starts at 1; tracks bias-corrected moving moments of
// x = log2(max |gradient|) (x = 2^log_max on an overflow, as OpenSeq2Seq
// writes it) and sets scale = 2^(16 - (mean + overflow_std_dev x std)),
// clipped to [scale_min, scale_max]. The 16 is a literal in OpenSeq2Seq
// (log2 of float16's range), not log_max.
class LogMaxScaler final : public LossScaler {
 public:
  explicit LogMaxScaler(const Params& p)
      : scale_min_(p.at("scale_min")),
        scale_max_(p.at("scale_max")),
        log_max_(p.at("log_max")),
        beta1_(p.at("beta1")),
        beta2_(p.at("beta2")),
        overflow_std_dev_(p.at("overflow_std_dev")) {
    for (const auto& [key, value] : {std::pair{"beta1", beta1_}, std::pair{"beta2", beta2_}}) {
      if (!(value >= 0.0 && value < 1.0)) {
        throw UserError(fmt::format("loss_scaling_params.{} {} must be in [0, 1)", key, value));
      }
    }
  }
  double scale() const override { return scale_; }
  bool automatic() const override { return true; }
  void update(bool overflow, double grad_amax) override {
    ++iteration_;
    const bool nonfinite = overflow || !std::isfinite(grad_amax);
    // All-zero gradients say nothing about the range (and log2(0) = -inf would
    // poison the moments for good): the statistics and the scale stay.
    if (!nonfinite && !(grad_amax > 0.0)) return;
    const double x = nonfinite ? std::pow(2.0, log_max_) : std::log2(grad_amax);
    x_hat_ = beta1_ * x_hat_ + (1.0 - beta1_) * x;
    b1_correction_ *= beta1_;
    const double mu = x_hat_ / (1.0 - b1_correction_);
    slow_x_hat_ = beta2_ * slow_x_hat_ + (1.0 - beta2_) * x;
    xsquared_hat_ = beta2_ * xsquared_hat_ + (1.0 - beta2_) * (x * x);
    b2_correction_ *= beta2_;
    const double e_xsquared = xsquared_hat_ / (1.0 - b2_correction_);
    const double slow_mu = slow_x_hat_ / (1.0 - b2_correction_);
    const double sigma = std::sqrt(std::max(e_xsquared - slow_mu * slow_mu, 0.0));
    const double log_cutoff = sigma * overflow_std_dev_ + mu;
    scale_ = clip(std::pow(2.0, 16.0 - log_cutoff), scale_min_, scale_max_);
  }
  YAML::Node state() const override {
    YAML::Node s;
    s["algorithm"] = "LogMax";
    s["scale"] = exact(scale_);
    s["iteration"] = iteration_;
    s["x_hat"] = exact(x_hat_);
    s["slow_x_hat"] = exact(slow_x_hat_);
    s["xsquared_hat"] = exact(xsquared_hat_);
    s["b1_correction"] = exact(b1_correction_);
    s["b2_correction"] = exact(b2_correction_);
    return s;
  }
  void load_state(const YAML::Node& state) override {
    check_algorithm(state, "LogMax");
    scale_ = state_value<double>(state, "LogMax", "scale");
    iteration_ = state_value<std::int64_t>(state, "LogMax", "iteration");
    x_hat_ = state_value<double>(state, "LogMax", "x_hat");
    slow_x_hat_ = state_value<double>(state, "LogMax", "slow_x_hat");
    xsquared_hat_ = state_value<double>(state, "LogMax", "xsquared_hat");
    b1_correction_ = state_value<double>(state, "LogMax", "b1_correction");
    b2_correction_ = state_value<double>(state, "LogMax", "b2_correction");
  }
  std::string describe() const override { return fmt::format("LogMax (scale {})", scale_); }

 private:
  double scale_min_;
  double scale_max_;
  double log_max_;
  double beta1_;
  double beta2_;
  double overflow_std_dev_;
  double scale_ = 1.0;
  std::int64_t iteration_ = 0;
  double x_hat_ = 0.0;
  double slow_x_hat_ = 0.0;
  double xsquared_hat_ = 0.0;
  double b1_correction_ = 1.0;
  double b2_correction_ = 1.0;
};

bool given(const YAML::Node& node) {
  return node && !node.IsNull();
}

}  // namespace

std::unique_ptr<LossScaler> make_loss_scaler(const YAML::Node& loss_scaling,
                                             const YAML::Node& loss_scaling_params) {
  if (given(loss_scaling) && !loss_scaling.IsScalar()) {
    throw UserError("loss_scaling must be a positive number, Backoff or LogMax");
  }
  const std::string text = given(loss_scaling) ? loss_scaling.Scalar() : "";
  if (text == "Backoff") {
    return std::make_unique<BackoffScaler>(
        read_params("Backoff", kBackoffDefaults, loss_scaling_params));
  }
  if (text == "LogMax") {
    return std::make_unique<LogMaxScaler>(
        read_params("LogMax", kLogMaxDefaults, loss_scaling_params));
  }
  double scale = 1.0;
  if (given(loss_scaling)) {
    try {
      scale = loss_scaling.as<double>();
    } catch (const YAML::Exception&) {
      throw UserError(fmt::format(
          "loss_scaling must be a positive number, Backoff or LogMax; found '{}'", text));
    }
    if (!(scale > 0.0) || !std::isfinite(scale)) {
      throw UserError(fmt::format("loss_scaling {} must be a positive finite number", text));
    }
  }
  if (given(loss_scaling_params)) {
    const std::string key = loss_scaling_params.IsMap() && loss_scaling_params.size() > 0
                                ? loss_scaling_params.begin()->first.as<std::string>()
                                : std::string();
    if (!key.empty() || !loss_scaling_params.IsMap()) {
      throw UserError(fmt::format(
          "loss_scaling_params{} applies only to loss_scaling Backoff or LogMax, but loss_scaling "
          "is {}",
          key.empty() ? "" : "." + key, given(loss_scaling) ? text : "not set (no scaling)"));
    }
  }
  return std::make_unique<FixedScaler>(scale);
}

}  // namespace rig::engine
