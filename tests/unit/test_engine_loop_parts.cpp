// Pieces of the training loop that need no plugins: the progress bar line,
// the global gradient norm and clipping, and interactive_infer's line loop.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "engine/console.hpp"
#include "engine/gradient_norm.hpp"
#include "engine/interactive.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"

namespace rig::engine {
namespace {

TEST(ProgressBar, ShowsCountPercentRateAndEta) {
  const std::string line = format_progress(30, 120, 10.0, "loss 0.5000", 20);
  EXPECT_EQ(line, " 30/120 [====>               ]  25%  3.0 steps/s  ETA 0:00:30  loss 0.5000");
}

TEST(ProgressBar, FullAndUnknownRate) {
  EXPECT_EQ(format_progress(4, 4, 2.0, "", 4), "4/4 [====] 100%  2.0 steps/s  ETA 0:00:00");
  EXPECT_EQ(format_progress(0, 4, 0.0, "", 4), "0/4 [    ]   0%  0.0 steps/s  ETA ?");
}

TEST(ProgressBar, HiddenWhenDisabled) {
  const Console console(true, false);
  EXPECT_FALSE(console.progress_bar());
  const Console quiet_rank(false, true);
  EXPECT_FALSE(quiet_rank.progress_bar());
}

ParameterStore store_with_grads(const std::vector<float>& grads) {
  ParameterStore params;
  params.declare("w", {static_cast<std::int64_t>(grads.size())}, Initializer::zeros());
  params.allocate(0);
  Tensor g = params.grads();
  std::copy(grads.begin(), grads.end(), g.data<float>());
  return params;
}

TEST(GradientNorm, MatchesADoubleReferenceOverManyChunks) {
  std::vector<float> grads(300'001);
  double squares = 0.0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    grads[i] = std::sin(static_cast<float>(i)) * 0.01F;
    squares += static_cast<double>(grads[i]) * grads[i];
  }
  ParameterStore params = store_with_grads(grads);
  const double norm = ops::gradient_stats(params.grads()).norm;
  EXPECT_NEAR(norm, std::sqrt(squares), 1e-6 * std::sqrt(squares));
  // The same bits every time, whatever the threads did.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ops::gradient_stats(params.grads()).norm, norm);
}

TEST(GradientNorm, StatsGiveNormAndLargestMagnitudeInOnePass) {
  ParameterStore params = store_with_grads({3.0F, -4.0F, 0.5F});
  const GradientStats stats = ops::gradient_stats(params.grads());
  EXPECT_DOUBLE_EQ(stats.norm, std::sqrt(25.25));
  EXPECT_DOUBLE_EQ(stats.amax, 4.0);
  ParameterStore nan_params = store_with_grads({1.0F, NAN});
  EXPECT_EQ(ops::gradient_stats(nan_params.grads()).amax, INFINITY);
}

TEST(GradientNorm, NonFiniteGradientGivesNonFiniteNorm) {
  ParameterStore params = store_with_grads({1.0F, INFINITY, 2.0F});
  EXPECT_FALSE(std::isfinite(ops::gradient_stats(params.grads()).norm));
  ParameterStore nan_params = store_with_grads({1.0F, NAN});
  EXPECT_FALSE(std::isfinite(ops::gradient_stats(nan_params.grads()).norm));
}

TEST(GradientNorm, StatsSayWhetherTheStepsLossIsFinite) {
  ParameterStore params = store_with_grads({3.0F, -4.0F});
  EXPECT_TRUE(ops::gradient_stats(params.grads()).loss_finite);  // no loss given
  EXPECT_TRUE(ops::gradient_stats(params.grads(), Tensor::scalar(2.5F)).loss_finite);
  for (const float loss : {NAN, INFINITY, -INFINITY}) {
    const GradientStats stats = ops::gradient_stats(params.grads(), Tensor::scalar(loss));
    EXPECT_FALSE(stats.loss_finite) << loss;
    EXPECT_DOUBLE_EQ(stats.norm, 5.0);  // the gradients' statistics are still computed
  }
}

TEST(GradientNorm, ClipScalesOnlyAboveTheLimit) {
  ParameterStore params = store_with_grads({3.0F, 4.0F});
  clip_gradients(params, ops::gradient_stats(params.grads()).norm, 10.0);
  EXPECT_FLOAT_EQ(params.grads().data<float>()[0], 3.0F);
  clip_gradients(params, ops::gradient_stats(params.grads()).norm, 1.0);
  // torch.nn.utils.clip_grad_norm_: g * max_norm / (norm + 1e-6).
  EXPECT_FLOAT_EQ(params.grads().data<float>()[0], static_cast<float>(3.0 / (5.0 + 1e-6)));
  EXPECT_FLOAT_EQ(params.grads().data<float>()[1], static_cast<float>(4.0 / (5.0 + 1e-6)));
}

// Doubles its single input feature; lines hold one number.
class DoublingModel final : public Model {
 public:
  ModelOutput forward(const Batch&, Mode) override { return {}; }
  Tensor infer(const Batch& batch) override { return ops::mul_scalar(batch.at("x"), 2.0F); }
};

// A data layer without data: only what interactive_infer touches matters.
class NoInteractiveData : public DataLayer {
 public:
  YAML::Node info() const override { return {}; }
  std::int64_t epoch_size() const override { return 0; }
  void start_epoch(std::int64_t) override {}
  std::optional<Batch> next_batch() override { return std::nullopt; }
  YAML::Node position() const override { return {}; }
  void seek(const YAML::Node&) override {}
  std::vector<std::string> decode(const Batch&, const Tensor&) const override { return {}; }
};

class OneNumberData final : public NoInteractiveData {
 public:
  std::vector<std::string> decode(const Batch&, const Tensor& predictions) const override {
    return {fmt::format("{}", predictions.data<float>()[0])};
  }
  Batch encode_lines(const std::vector<std::string>& lines) const override {
    Batch batch;
    if (lines.empty()) return batch;
    std::size_t used = 0;
    float value = 0.0F;
    try {
      value = std::stof(lines.front(), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0) throw UserError("not a number: " + lines.front());
    batch.tensors["x"] = Tensor::from_vector(std::vector<float>{value}, {1});
    batch.indices = {0};
    return batch;
  }
};

TEST(InteractiveInfer, AnswersEachLineSkipsBlanksAndReportsBadOnes) {
  DoublingModel model;
  OneNumberData data;
  std::istringstream in("1.5\n\n  \nabc\n-2\r\n");
  std::ostringstream out;
  const Console console(false, false);
  EXPECT_EQ(interactive_infer(model, data, in, out, console), 2);
  EXPECT_EQ(out.str(), "3\n-4\n");
}

TEST(InteractiveInfer, DataLayerWithoutSupportIsRefusedBeforeReading) {
  DoublingModel model;
  NoInteractiveData data;
  std::istringstream in("1\n");
  std::ostringstream out;
  const Console console(false, false);
  try {
    interactive_infer(model, data, in, out, console);
    FAIL() << "expected a UserError";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support interactive_infer"), std::string::npos);
  }
  EXPECT_EQ(in.tellg(), 0);
}

}  // namespace
}  // namespace rig::engine
