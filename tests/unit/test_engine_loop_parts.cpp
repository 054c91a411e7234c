// Pieces of the training loop that need no plugins: the progress bar line,
// the global gradient norm, its queued statistics and clipping, and
// interactive_infer's line loop.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "engine/console.hpp"
#include "engine/device_data.hpp"
#include "engine/gradient_norm.hpp"
#include "engine/interactive.hpp"
#include "engine/queued_gradient_stats.hpp"
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

// Queued statistics are those gradient_stats reads at once, record by record.
TEST(GradientNorm, QueuedStatsAreTheReadOnes) {
  ParameterStore a = store_with_grads({3.0F, -4.0F, 0.5F});
  ParameterStore b = store_with_grads({1.0F, INFINITY});
  Tensor records = Tensor::zeros({3 * kGradientStatsWords}, DType::i64);
  ops::gradient_stats_into(a.grads(), Tensor::scalar(1.25F), records, 2);
  ops::gradient_stats_into(b.grads(), Tensor{}, records, 0);
  ops::gradient_stats_into(a.grads(), Tensor::scalar(NAN), records, 1);
  const std::vector<GradientStats> read = ops::read_gradient_stats(records, 3);
  ASSERT_EQ(read.size(), 3U);
  const GradientStats at_once = ops::gradient_stats(a.grads(), Tensor::scalar(1.25F));
  EXPECT_EQ(read[2].norm, at_once.norm);
  EXPECT_EQ(read[2].amax, at_once.amax);
  EXPECT_TRUE(read[2].loss_finite);
  EXPECT_EQ(read[2].loss, 1.25F);
  EXPECT_EQ(read[0].norm, INFINITY);
  EXPECT_TRUE(read[0].loss_finite);  // no loss given
  EXPECT_FALSE(read[1].loss_finite);
  EXPECT_EQ(read[1].norm, at_once.norm);
  EXPECT_TRUE(ops::read_gradient_stats(records, 0).empty());
  // The records' tensor is checked: dtype, room, slot.
  Tensor f32 = Tensor::zeros({3 * kGradientStatsWords});
  EXPECT_THROW(ops::gradient_stats_into(a.grads(), Tensor{}, f32, 0), std::invalid_argument);
  EXPECT_THROW(ops::gradient_stats_into(a.grads(), Tensor{}, records, 3), std::invalid_argument);
  EXPECT_THROW(ops::gradient_stats_into(a.grads(), Tensor{}, records, -1), std::invalid_argument);
  EXPECT_THROW(ops::read_gradient_stats(records, 4), std::invalid_argument);
}

// Clipping by the queued norm gives clip_gradients' bits, without a read.
TEST(GradientNorm, ClipByTheRecordedNormIsTheHostsClip) {
  for (const double max_norm : {1.0, 10.0}) {
    ParameterStore host = store_with_grads({3.0F, -4.0F, 0.5F});
    ParameterStore device = store_with_grads({3.0F, -4.0F, 0.5F});
    clip_gradients(host, ops::gradient_stats(host.grads()).norm, max_norm);
    QueuedGradientStats queue(Device::cpu());
    Tensor g = device.grads();
    EXPECT_THROW(queue.clip_by_last_norm(g, max_norm), std::logic_error);
    queue.push(0, g, Tensor{});
    queue.clip_by_last_norm(g, max_norm);
    EXPECT_EQ(g.to_vector(), host.grads().to_vector()) << max_norm;
  }
  ParameterStore params = store_with_grads({3.0F, 4.0F});
  Tensor records = Tensor::zeros({kGradientStatsWords}, DType::i64);
  Tensor g = params.grads();
  EXPECT_THROW(ops::clip_by_recorded_norm_(g, records, 1, 1.0), std::invalid_argument);
  EXPECT_THROW(ops::clip_by_recorded_norm_(g, records, -1, 1.0), std::invalid_argument);
}

TEST(QueuedGradientStats, TakesEveryQueuedStepInOrderAndEmpties) {
  ParameterStore a = store_with_grads({3.0F, -4.0F});
  QueuedGradientStats queue(Device::cpu());
  EXPECT_TRUE(queue.empty());
  EXPECT_TRUE(queue.take().empty());
  queue.push(7, a.grads(), Tensor::scalar(2.0F));
  queue.push(8, a.grads(), Tensor::scalar(NAN));
  EXPECT_FALSE(queue.empty());
  const std::vector<QueuedGradientStats::Record> taken = queue.take();
  ASSERT_EQ(taken.size(), 2U);
  EXPECT_EQ(taken[0].step, 7);
  EXPECT_EQ(taken[0].stats.norm, 5.0);
  EXPECT_EQ(taken[0].stats.loss, 2.0F);
  EXPECT_EQ(taken[1].step, 8);
  EXPECT_FALSE(taken[1].stats.loss_finite);
  EXPECT_TRUE(queue.empty());
  for (std::int64_t step = 0; step < QueuedGradientStats::kCapacity; ++step) {
    EXPECT_FALSE(queue.full());
    queue.push(step, a.grads(), Tensor{});
  }
  EXPECT_TRUE(queue.full());
  EXPECT_THROW(queue.push(0, a.grads(), Tensor{}), std::logic_error);
  const std::vector<QueuedGradientStats::Record> all = queue.take();
  ASSERT_EQ(all.size(), static_cast<std::size_t>(QueuedGradientStats::kCapacity));
  EXPECT_EQ(all.back().step, QueuedGradientStats::kCapacity - 1);
  EXPECT_FALSE(queue.full());
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

// Batch k holds k; its position is the next k; `fetched` counts batches made.
class CountingData final : public NoInteractiveData {
 public:
  explicit CountingData(std::int64_t per_epoch) : per_epoch_(per_epoch) {}
  void start_epoch(std::int64_t) override { next_ = 0; }
  std::optional<Batch> next_batch() override {
    if (next_ == per_epoch_) return std::nullopt;
    Batch batch;
    batch.tensors["k"] = Tensor::from_vector(std::vector<float>{static_cast<float>(next_)}, {1});
    batch.indices = {next_++};
    ++fetched;
    return batch;
  }
  YAML::Node position() const override {
    YAML::Node p;
    p["next"] = next_;
    return p;
  }
  void seek(const YAML::Node& p) override { next_ = p["next"].as<std::int64_t>(); }
  std::int64_t fetched = 0;

 private:
  std::int64_t per_epoch_ = 0;
  std::int64_t next_ = 0;
};

std::int64_t next_position(const DataLayer& data) {
  return data.position()["next"].as<std::int64_t>();
}

float only_value(const std::optional<Batch>& batch) {
  return batch.value().at("k").to_host().to_vector().at(0);
}

// On a device the engine fetches (and starts copying) one batch ahead; the
// position is the one before that batch, so checkpoints do not see it.
TEST(DeviceData, FetchesOneBatchAheadAndReportsThePositionBeforeIt) {
  const auto counting = std::make_shared<CountingData>(3);
  EXPECT_EQ(on_device(counting, Device::cpu()), counting) << "the CPU's batches stay as they are";
  const std::shared_ptr<DataLayer> data = on_device(counting, Device::sim());
  data->start_epoch(0);
  const std::optional<Batch> first = data->next_batch();
  EXPECT_EQ(first.value().at("k").device(), Device::sim());
  EXPECT_EQ(only_value(first), 0.0F);
  EXPECT_EQ(counting->fetched, 2) << "the next batch is fetched ahead";
  EXPECT_EQ(next_position(*data), 1);
  EXPECT_EQ(only_value(data->next_batch()), 1.0F);
  EXPECT_EQ(next_position(*data), 2);
  EXPECT_EQ(only_value(data->next_batch()), 2.0F);
  EXPECT_EQ(next_position(*data), 3);
  EXPECT_FALSE(data->next_batch()) << "the epoch's end";
  data->start_epoch(1);
  EXPECT_EQ(only_value(data->next_batch()), 0.0F);
  EXPECT_EQ(next_position(*data), 1);
  // seek drops the batch fetched ahead.
  YAML::Node at_two;
  at_two["next"] = 2;
  data->seek(at_two);
  EXPECT_EQ(next_position(*data), 2);
  EXPECT_EQ(only_value(data->next_batch()), 2.0F);
  EXPECT_FALSE(data->next_batch());
}

// The trainer fetches ahead itself (once a step's forward is queued): then
// next_batch fetches nothing more, fetch_ahead fetches one batch (once), and
// a next_batch without it uploads its batch there and then.
TEST(DeviceData, FetchesAheadWhenTheTrainerSays) {
  const auto counting = std::make_shared<CountingData>(3);
  const std::shared_ptr<DataLayer> data = on_device(counting, Device::sim());
  fetch_ahead_explicitly(*data);
  data->start_epoch(0);
  EXPECT_EQ(only_value(data->next_batch()), 0.0F);
  EXPECT_EQ(counting->fetched, 1) << "nothing fetched ahead by next_batch";
  EXPECT_EQ(next_position(*data), 1);
  EXPECT_TRUE(fetch_ahead(*data));
  EXPECT_FALSE(fetch_ahead(*data)) << "already fetched";
  EXPECT_EQ(counting->fetched, 2) << "one batch fetched ahead, once";
  EXPECT_EQ(next_position(*data), 1) << "the position before the batch fetched ahead";
  const std::optional<Batch> second = data->next_batch();
  EXPECT_EQ(second.value().at("k").device(), Device::sim());
  EXPECT_EQ(only_value(second), 1.0F);
  EXPECT_EQ(only_value(data->next_batch()), 2.0F) << "not fetched ahead: uploaded when taken";
  fetch_ahead(*data);
  EXPECT_FALSE(data->next_batch()) << "the epoch's end, fetched ahead";
  data->start_epoch(1);
  EXPECT_EQ(only_value(data->next_batch()), 0.0F);
  // The CPU's layers have nothing to fetch ahead.
  const auto on_cpu = std::make_shared<CountingData>(3);
  fetch_ahead_explicitly(*on_cpu);
  on_cpu->start_epoch(0);
  EXPECT_FALSE(fetch_ahead(*on_cpu));
  EXPECT_EQ(on_cpu->fetched, 0);
}

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
