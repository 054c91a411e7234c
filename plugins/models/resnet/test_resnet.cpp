// The resnet model plugin: torchvision's parameter names, shapes and counts,
// forward and backward against PyTorch (tests/golden/resnet.json, written by
// tests/golden/gen_resnet.py), Acc@1 / Acc@5 on a constructed case,
// initialisation, bad labels and parameters, and a few steps of learning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "golden.hpp"
#include "rig/error.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

using rig::Tensor;

// The golden value of element i of a named tensor (gen_resnet.py's golden_value).
float golden_value(std::uint32_t name_hash, std::int64_t i, double center, double scale) {
  std::uint32_t h = name_hash + static_cast<std::uint32_t>(i) * 2654435761U;
  h ^= h >> 15;
  h *= 2246822519U;
  h ^= h >> 13;
  const double u = static_cast<double>(h) / 4294967296.0;
  return static_cast<float>(center + scale * (2.0 * u - 1.0));
}

YAML::Node image_info(std::int64_t channels, std::int64_t classes) {
  YAML::Node info;
  info["task"] = "classification";
  info["channels"] = channels;
  info["num_classes"] = classes;
  info["height"] = 12;
  info["width"] = 12;
  info["num_samples"] = 100;
  return info;
}

rig::Batch image_batch(const Tensor& images, const std::vector<std::int64_t>& labels) {
  rig::Batch batch;
  batch.tensors["images"] = images;
  batch.tensors["labels"] = Tensor::from_vector(labels, {static_cast<std::int64_t>(labels.size())});
  batch.num_objects = static_cast<std::int64_t>(labels.size());
  for (std::size_t i = 0; i < labels.size(); ++i) {
    batch.indices.push_back(100 + static_cast<std::int64_t>(i));
  }
  return batch;
}

Tensor random_images(rig::Shape shape, std::uint32_t purpose) {
  Tensor t = Tensor::empty(std::move(shape));
  rig::fill_normal({7, 0, 0, purpose}, t.data<float>(), t.numel());
  return t;
}

class PluginResnet : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin resnet{"model", "resnet"};
  rig_test::LoadedPlugin sgd{"optimizer", "sgd"};

  std::unique_ptr<rig::Model> model(const std::string& params, const YAML::Node& info,
                                    rig::ParameterStore& store,
                                    rig::DType dtype = rig::DType::f32) {
    rig::RunContext run;
    run.dtype = dtype;
    const rig::ModelContext ctx{run, info, store};
    return resnet.descriptor->make_model(resnet.params(params), ctx);
  }

  static std::string params_of(const nlohmann::json& p) {
    return fmt::format("{{style: {}, depth: {}, shortcut: {}, label_smoothing: {}}}",
                       p.at("style").get<std::string>(), p.at("depth").get<int>(),
                       p.at("shortcut").get<std::string>(), p.value("label_smoothing", 0.0));
  }
};

// ---- names, shapes and counts ------------------------------------------------

TEST_F(PluginResnet, TorchvisionNamesShapesAndCounts) {
  for (const char* name : {"resnet20_B", "resnet20_A", "resnet18", "resnet50"}) {
    SCOPED_TRACE(name);
    const rig_test::GoldenCase c = rig_test::golden_case("resnet", name);
    rig::ParameterStore store;
    auto net = model(params_of(c.params),
                     image_info(c.params.at("channels"), c.params.at("num_classes")), store);
    // Same names, shapes and order as the torch replica's state_dict.
    const auto& expected = c.params.at("parameters");
    ASSERT_EQ(store.parameters().size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(store.parameters()[i].name, expected[i][0].get<std::string>());
      EXPECT_EQ(store.parameters()[i].shape, expected[i][1].get<rig::Shape>())
          << store.parameters()[i].name;
    }
    const auto& expected_buffers = c.params.at("buffers");
    ASSERT_EQ(store.buffer_infos().size(), expected_buffers.size());
    for (std::size_t i = 0; i < expected_buffers.size(); ++i) {
      EXPECT_EQ(store.buffer_infos()[i].name, expected_buffers[i][0].get<std::string>());
      EXPECT_EQ(store.buffer_infos()[i].shape, expected_buffers[i][1].get<rig::Shape>());
    }
    EXPECT_EQ(store.numel(), c.params.at("numel").get<std::int64_t>());
  }
  // The published counts: torchvision's resnet18 / resnet50 with 1000 classes,
  // and He et al.'s 0.27M for ResNet-20 (1 input channel, 10 classes).
  const auto count = [&](const std::string& params, std::int64_t channels, std::int64_t classes) {
    rig::ParameterStore store;
    auto net = model(params, image_info(channels, classes), store);
    return store.numel();
  };
  EXPECT_EQ(count("{style: imagenet, depth: 18}", 3, 1000), 11'689'512);
  EXPECT_EQ(count("{style: imagenet, depth: 34}", 3, 1000), 21'797'672);
  EXPECT_EQ(count("{style: imagenet, depth: 50}", 3, 1000), 25'557'032);
  EXPECT_EQ(count("{style: imagenet, depth: 101}", 3, 1000), 44'549'160);
  EXPECT_EQ(count("{}", 1, 10), 272'186);             // ResNet-20, shortcut B
  EXPECT_EQ(count("{shortcut: A}", 1, 10), 269'434);  // ResNet-20, shortcut A
  EXPECT_EQ(count("{depth: 56, shortcut: A}", 3, 10), 853'018);
}

// ---- forward and backward against PyTorch -------------------------------------

// A golden case, in one data format: channels_last must give PyTorch's values too.
struct GoldenRun {
  const char* name;
  const char* data_format;
};

class PluginResnetGolden : public PluginResnet, public ::testing::WithParamInterface<GoldenRun> {
 protected:
  // Every parameter and buffer set to its golden value, gradients zeroed.
  static void set_weights(rig::ParameterStore& store, const nlohmann::json& weights) {
    std::size_t seen = 0;
    for (const auto* infos : {&store.parameters(), &store.buffer_infos()}) {
      for (const rig::ParameterInfo& info : *infos) {
        ASSERT_TRUE(weights.contains(info.name)) << "no golden weight for " << info.name;
        const double center = weights.at(info.name)[0].get<double>();
        const double scale = weights.at(info.name)[1].get<double>();
        Tensor master = info.master;
        float* v = master.data<float>();
        const std::uint32_t hash = rig::purpose_id(info.name);  // FNV-1a, as the script
        for (std::int64_t i = 0; i < master.numel(); ++i) {
          v[i] = golden_value(hash, i, center, scale);
        }
        ++seen;
      }
    }
    EXPECT_EQ(seen, weights.size());  // and no golden weight without a rig tensor
    store.publish_values();
    store.zero_grad();
  }
};

TEST_P(PluginResnetGolden, MatchesPyTorch) {
  const rig_test::GoldenCase c = rig_test::golden_case("resnet", GetParam().name);
  const bool training = c.params.at("training").get<bool>();
  const rig::Mode mode = training ? rig::Mode::train : rig::Mode::eval;
  const std::int64_t classes = c.params.at("num_classes");
  rig::ParameterStore store;
  std::string params = params_of(c.params);
  params.insert(params.size() - 1, fmt::format(", data_format: {}", GetParam().data_format));
  auto net = model(params, image_info(c.params.at("channels"), classes), store);
  store.allocate(1);
  const nlohmann::json& weights = c.params.at("weights");
  set_weights(store, weights);

  const Tensor& images = c.input("images");
  const std::vector<std::int64_t> labels = c.input("labels").to_int_vector();
  rig::ModelOutput out = net->forward(image_batch(images, labels), mode);
  EXPECT_TRUE(rig_test::tensors_close(out.loss, c.output("loss"), 1e-5, 1e-5));
  EXPECT_EQ(out.loss.requires_grad(), training);
  const auto rows = static_cast<double>(labels.size());
  if (training) {
    // Training reads nothing back: the metrics are eval's.
    EXPECT_TRUE(out.metrics.empty());
  } else {
    EXPECT_NEAR(out.metrics.at("loss").sum, out.loss.item() * rows, 1e-5);
    EXPECT_EQ(out.metrics.at("loss").count, rows);
  }
  if (training) {
    out.loss.backward();
    for (const auto& [name, expected] : c.grads) {
      // Relative to the tensor's largest gradient: small entries are differences of large ones.
      const std::vector<float> e = expected.to_vector();
      float largest = 0.0F;
      for (float x : e) largest = std::max(largest, std::abs(x));
      const Tensor grad = store.find(name).value.grad();
      ASSERT_TRUE(grad.defined()) << name;
      EXPECT_TRUE(rig_test::tensors_close(grad, expected, 1e-4, 1e-4 * largest)) << name;
    }
    // The running statistics after one training step (unbiased variance, momentum 0.1).
    std::size_t checked = 0;
    for (const rig::ParameterInfo& info : store.buffer_infos()) {
      EXPECT_TRUE(rig_test::tensors_close(info.master, c.output(info.name), 1e-5, 1e-5))
          << info.name;
      ++checked;
    }
    EXPECT_GT(checked, 0U);
  } else {
    for (const rig::ParameterInfo& info : store.buffer_infos()) {  // eval leaves them alone
      const std::vector<float> now = info.master.to_vector();
      const double center = weights.at(info.name)[0].get<double>();
      const double scale = weights.at(info.name)[1].get<double>();
      for (std::size_t i = 0; i < now.size(); ++i) {
        ASSERT_EQ(now[i], golden_value(rig::purpose_id(info.name), static_cast<std::int64_t>(i),
                                       center, scale))
            << info.name;
      }
    }
  }

  // The logits, up to each row's constant (all the loss depends on): moving
  // sample i's label from 0 to k changes the mean loss by (z_i0 - z_ik) / N.
  const Tensor logits = c.output("logits");
  const auto n = static_cast<std::int64_t>(labels.size());
  const double smoothing = c.params.at("label_smoothing").get<double>();
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<double> loss_with(classes);
    for (std::int64_t k = 0; k < classes; ++k) {
      set_weights(store, weights);  // undo the running-statistics update
      std::vector<std::int64_t> relabelled = labels;
      relabelled[i] = k;
      rig::NoGradGuard no_grad;
      loss_with[k] = net->forward(image_batch(images, relabelled), mode).loss.item();
    }
    for (std::int64_t k = 1; k < classes; ++k) {
      const double expected = logits.to_vector()[i * classes + k] - logits.to_vector()[i * classes];
      // With smoothing s only (1 - s) of the one-hot part moves with the label.
      const double measured = (loss_with[0] - loss_with[k]) * n / (1.0 - smoothing);
      EXPECT_NEAR(measured, expected, 2e-4 * (1.0 + std::abs(expected)))
          << "row " << i << " class " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, PluginResnetGolden,
                         ::testing::Values(GoldenRun{"tiny_B_train", "channels_first"},
                                           GoldenRun{"tiny_B_eval", "channels_first"},
                                           GoldenRun{"tiny_A_train_smoothing", "channels_first"},
                                           GoldenRun{"tiny_B_train", "channels_last"},
                                           GoldenRun{"tiny_B_eval", "channels_last"},
                                           GoldenRun{"tiny_A_train_smoothing", "channels_last"}),
                         [](const ::testing::TestParamInfo<GoldenRun>& info) {
                           return fmt::format("{}_{}", info.param.name, info.param.data_format);
                         });

// ---- metrics --------------------------------------------------------------------

// With fc.weight = 0 the logits are fc.bias for every image, so the metrics are known.
TEST_F(PluginResnet, TopOneAndTopFiveAccuracy) {
  rig::ParameterStore store;
  auto net = model("{depth: 8}", image_info(1, 8), store);
  store.allocate(3);
  Tensor fc_weight = store.find("fc.weight").master;
  fc_weight.zero_();
  const std::vector<float> bias{0.1F, 0.7F, 0.3F, 0.9F, 0.5F, 0.2F, 0.8F, 0.4F};
  Tensor fc_bias = store.find("fc.bias").master;
  fc_bias.copy_from(Tensor::from_vector(bias, {8}));
  // Ranking: 3, 6, 1, 4, 7 | 2, 5, 0.
  const std::vector<std::int64_t> labels{3, 6, 0, 2, 7, 3};
  const rig::Batch batch = image_batch(random_images({6, 1, 12, 12}, 1), labels);
  double lse = 0.0;
  for (float b : bias) lse += std::exp(static_cast<double>(b));
  lse = std::log(lse);
  double loss_sum = 0.0;
  for (std::int64_t y : labels) loss_sum += lse - bias[static_cast<std::size_t>(y)];
  EXPECT_TRUE(net->forward(batch, rig::Mode::train).metrics.empty());  // training reads nothing
  {
    const rig::ModelOutput out = net->forward(batch, rig::Mode::eval);
    EXPECT_EQ(out.metrics.at("Acc@1").sum, 2.0);  // labels 3, 3
    EXPECT_EQ(out.metrics.at("Acc@1").count, 6.0);
    EXPECT_EQ(out.metrics.at("Acc@5").sum, 4.0);  // labels 3, 6, 7, 3
    EXPECT_EQ(out.metrics.at("Acc@5").count, 6.0);
    EXPECT_NEAR(out.metrics.at("loss").sum, loss_sum, 1e-4);
    EXPECT_EQ(out.metrics.at("loss").count, 6.0);
  }
  const Tensor predicted = net->infer(batch);
  EXPECT_EQ(predicted.dtype(), rig::DType::i64);
  EXPECT_EQ(predicted.to_int_vector(), std::vector<std::int64_t>(6, 3));
  EXPECT_FALSE(predicted.requires_grad());

  // Fewer than 5 classes: no Acc@5.
  rig::ParameterStore small_store;
  auto small = model("{depth: 8}", image_info(1, 4), small_store);
  small_store.allocate(3);
  const rig::ModelOutput out =
      small->forward(image_batch(random_images({2, 1, 12, 12}, 2), {0, 3}), rig::Mode::eval);
  EXPECT_EQ(out.metrics.count("Acc@5"), 0U);
  EXPECT_EQ(out.metrics.at("Acc@1").count, 2.0);
}

// ---- initialisation ---------------------------------------------------------------

TEST_F(PluginResnet, InitialisedAsTorchvision) {
  rig::ParameterStore store;
  auto net = model("{}", image_info(1, 10), store);
  store.allocate(11);
  // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std sqrt(2 / (64 x 3 x 3)).
  const std::vector<float> w = store.find("layer3.0.conv2.weight").value.to_vector();
  double mean = 0.0, square = 0.0;
  for (float x : w) mean += x / static_cast<double>(w.size());
  for (float x : w) square += (x - mean) * (x - mean) / static_cast<double>(w.size());
  EXPECT_NEAR(std::sqrt(square), std::sqrt(2.0 / 576.0), 0.02 * std::sqrt(2.0 / 576.0));
  EXPECT_NEAR(mean, 0.0, 0.002);
  // torch.nn.Linear: U(+-1/sqrt(64)) weights and biases.
  for (const char* name : {"fc.weight", "fc.bias"}) {
    for (float x : store.find(name).value.to_vector()) EXPECT_LE(std::abs(x), 0.125F) << name;
  }
  const auto all_equal = [&](const std::string& name, float value) {
    const std::vector<float> v = store.find(name).master.to_vector();
    return std::all_of(v.begin(), v.end(), [&](float x) { return x == value; });
  };
  EXPECT_TRUE(all_equal("layer1.0.bn2.weight", 1.0F));
  EXPECT_TRUE(all_equal("layer1.0.bn2.bias", 0.0F));
  EXPECT_TRUE(all_equal("layer2.0.downsample.1.running_mean", 0.0F));
  EXPECT_TRUE(all_equal("layer2.0.downsample.1.running_var", 1.0F));

  // zero_init_residual: the last batch norm of every block starts at 0.
  rig::ParameterStore zero_store;
  auto zero_net = model("{zero_init_residual: true, depth: 8}", image_info(1, 10), zero_store);
  zero_store.allocate(11);
  for (const rig::ParameterInfo& info : zero_store.parameters()) {
    const std::vector<float> v = info.value.to_vector();
    const bool last_bn = info.name.ends_with(".bn2.weight");
    const float expected = last_bn ? 0.0F : 1.0F;
    if (info.name.ends_with("bn1.weight") || last_bn) {
      EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](float x) { return x == expected; }))
          << info.name;
    }
  }
}

TEST_F(PluginResnet, ZeroInitResidualBottleneck) {
  rig::ParameterStore store;
  auto net =
      model("{style: imagenet, depth: 50, zero_init_residual: true}", image_info(3, 10), store);
  store.allocate(1);
  int zeroed = 0;
  for (const rig::ParameterInfo& info : store.parameters()) {
    if (!info.name.ends_with("bn2.weight") && !info.name.ends_with("bn3.weight")) continue;
    const std::vector<float> v = info.value.to_vector();
    const float expected = info.name.ends_with("bn3.weight") ? 0.0F : 1.0F;
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [&](float x) { return x == expected; }))
        << info.name;
    zeroed += info.name.ends_with("bn3.weight") ? 1 : 0;
  }
  EXPECT_EQ(zeroed, 16);  // 3 + 4 + 6 + 3 bottlenecks
}

// ---- inputs and errors ---------------------------------------------------------------

TEST_F(PluginResnet, ImageNetStyleRunsOnSmallImages) {
  // resnet18 on 3x32x32 (stem /4, stages /8 more): 1x1 before the pool.
  rig::ParameterStore store;
  auto net = model("{style: imagenet, depth: 18}", image_info(3, 10), store);
  store.allocate(2);
  const rig::Batch batch = image_batch(random_images({2, 3, 32, 32}, 3), {1, 9});
  rig::ModelOutput out = net->forward(batch, rig::Mode::train);
  out.loss.backward();
  EXPECT_TRUE(std::isfinite(out.loss.item()));
  EXPECT_TRUE(store.find("layer4.1.bn2.weight").value.grad().defined());
  EXPECT_EQ(net->infer(batch).shape(), (rig::Shape{2}));
}

TEST_F(PluginResnet, ChannelsLastTrainsAsChannelsFirst) {
  // resnet18 (7x7 stem, max pool, projection shortcuts), both layouts from
  // the same parameters: the same loss and gradients (up to the convolutions'
  // and batch norms' summation order) and the same running statistics. 4
  // images of 64x64, so the last batch norms see 16 values a channel: at 2
  // (2 images of 32x32) their gradients reach thousands and amplify the
  // last bits of any summation order.
  const rig::Batch batch = image_batch(random_images({4, 3, 64, 64}, 5), {1, 9, 0, 4});
  std::vector<rig::ParameterStore> stores(2);
  std::vector<double> losses;
  for (std::size_t i = 0; i < 2; ++i) {
    auto net = model(i == 0 ? "{style: imagenet, depth: 18}"
                            : "{style: imagenet, depth: 18, data_format: channels_last}",
                     image_info(3, 10), stores[i]);
    stores[i].allocate(2);
    rig::ModelOutput out = net->forward(batch, rig::Mode::train);
    out.loss.backward();
    losses.push_back(out.loss.item());
    EXPECT_EQ(net->infer(batch).shape(), (rig::Shape{4}));
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
  for (const rig::ParameterInfo& info : stores[0].parameters()) {
    const Tensor a = info.value.grad();
    const Tensor b = stores[1].find(info.name).value.grad();
    ASSERT_TRUE(a.defined() && b.defined()) << info.name;
    float largest = 0.0F;
    for (float x : a.to_vector()) largest = std::max(largest, std::abs(x));
    EXPECT_TRUE(rig_test::tensors_close(b, a, 1e-4, 1e-4 * largest)) << info.name;
  }
  for (const rig::ParameterInfo& info : stores[0].buffer_infos()) {
    EXPECT_TRUE(rig_test::tensors_close(stores[1].find(info.name).value, info.value, 1e-5, 1e-5))
        << info.name;
  }
}

TEST_F(PluginResnet, RecomputedActivationsGiveTheSameBitsAndRunningStatistics) {
  // ResNet-20 with projection shortcuts (their batch norms fused into the
  // block's last), both layouts, f32 and bf16: the loss, every gradient and
  // the running statistics (moved once, not twice) are the plain run's bits.
  const rig::Batch batch = image_batch(random_images({4, 3, 16, 16}, 6), {1, 9, 0, 4});
  for (const char* layout : {"channels_first", "channels_last"}) {
    for (const rig::DType dtype : {rig::DType::f32, rig::DType::bf16}) {
      std::vector<rig::ParameterStore> stores(2);
      std::vector<float> losses;
      for (std::size_t i = 0; i < 2; ++i) {
        auto net = model(fmt::format("{{style: cifar, depth: 20, shortcut: B, data_format: {}, "
                                     "recompute_activations: {}}}",
                                     layout, i == 1),
                         image_info(3, 10), stores[i], dtype);
        stores[i].allocate(2, dtype);
        rig::ModelOutput out = net->forward(batch, rig::Mode::train);
        out.loss.backward();
        losses.push_back(out.loss.to(rig::DType::f32).item());
      }
      const std::string what = fmt::format("{} {}", layout, rig::dtype_name(dtype));
      EXPECT_EQ(losses[1], losses[0]) << what;
      for (const rig::ParameterInfo& info : stores[0].parameters()) {
        const Tensor b = stores[1].find(info.name).value.grad();
        ASSERT_TRUE(b.defined()) << info.name;
        EXPECT_EQ(b.to_vector(), info.value.grad().to_vector()) << info.name << " " << what;
      }
      for (const rig::ParameterInfo& info : stores[0].buffer_infos()) {
        EXPECT_EQ(stores[1].find(info.name).value.to_vector(), info.value.to_vector())
            << info.name << " " << what;
      }
    }
  }
}

TEST_F(PluginResnet, ChannelsLastCifarShortcutA) {
  // Option A's subsampled, zero-padded shortcut on the channel axis of NHWC.
  const rig::Batch batch = image_batch(random_images({3, 1, 12, 12}, 6), {0, 1, 2});
  std::vector<double> losses;
  for (const char* format : {"channels_first", "channels_last"}) {
    rig::ParameterStore store;
    auto net = model(fmt::format("{{depth: 8, shortcut: A, data_format: {}}}", format),
                     image_info(1, 4), store);
    store.allocate(3);
    losses.push_back(net->forward(batch, rig::Mode::train).loss.item());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
}

TEST_F(PluginResnet, LowPrecisionComputeIsCloseToF32) {
  const rig::Batch batch = image_batch(random_images({4, 1, 12, 12}, 4), {0, 1, 2, 3});
  std::vector<double> losses;
  for (const rig::DType dtype : {rig::DType::f32, rig::DType::bf16, rig::DType::f16}) {
    rig::ParameterStore store;
    auto net = model("{depth: 8}", image_info(1, 4), store, dtype);
    store.allocate(5, dtype);
    rig::ModelOutput out = net->forward(batch, rig::Mode::train);
    EXPECT_EQ(out.loss.dtype(), rig::DType::f32);
    out.loss.backward();
    losses.push_back(out.loss.item());
  }
  EXPECT_NEAR(losses[1], losses[0], 0.03 * losses[0]);
  EXPECT_NEAR(losses[2], losses[0], 0.01 * losses[0]);
}

TEST_F(PluginResnet, LabelOutsideTheClassesIsAUserError) {
  rig::ParameterStore store;
  auto net = model("{depth: 8}", image_info(1, 10), store);
  store.allocate(0);
  const Tensor images = random_images({3, 1, 12, 12}, 5);
  for (const rig::Mode mode : {rig::Mode::train, rig::Mode::eval}) {
    const std::string message = rig_test::user_error_of([&] {
      net->forward(image_batch(images, {1, 2, 10}), mode);
    });
    EXPECT_TRUE(rig_test::contains(message, "label 10 at batch position 2 (data-set index 102)"));
    EXPECT_TRUE(rig_test::contains(message, "outside [0, 10)"));
  }
  EXPECT_TRUE(rig_test::contains(rig_test::user_error_of([&] {
                                   net->forward(image_batch(images, {-1, 2, 3}), rig::Mode::eval);
                                 }),
                                 "label -1 at batch position 0"));
  // A batch of the wrong channel count is a bug between data layer and model.
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of([&] {
        net->forward(image_batch(random_images({3, 3, 12, 12}, 6), {1, 2, 3}), rig::Mode::eval);
      }),
      "resnet: images f32 [3,3,12,12], expected f32 [batch,1,"));
}

TEST_F(PluginResnet, BadParametersAndDataAreUserErrors) {
  const auto error = [&](const std::string& params, const YAML::Node& info) {
    rig::ParameterStore store;
    return rig_test::user_error_of([&] { model(params, info, store); });
  };
  EXPECT_TRUE(rig_test::contains(error("{depth: 21}", image_info(1, 10)),
                                 "depth 21 does not fit style cifar: it must be 6n + 2"));
  EXPECT_TRUE(rig_test::contains(error("{style: imagenet, depth: 20}", image_info(3, 10)),
                                 "depth 20 does not fit style imagenet: expected 18, 34, 50"));
  EXPECT_TRUE(
      rig_test::contains(error("{style: imagenet, depth: 18, shortcut: A}", image_info(3, 10)),
                         "shortcut A is only for style cifar"));
  YAML::Node no_channels = image_info(1, 10);
  no_channels.remove("channels");
  EXPECT_TRUE(rig_test::contains(error("{}", no_channels),
                                 "the data layer does not say 'channels' in its info()"));
  YAML::Node regression = image_info(1, 10);
  regression["task"] = "regression";
  EXPECT_TRUE(rig_test::contains(error("{}", regression), "task is 'regression'"));
}

// ---- learning --------------------------------------------------------------------------

TEST_F(PluginResnet, FitsASmallBatchWithSgd) {
  rig::ParameterStore store;
  auto net = model("{depth: 8}", image_info(1, 4), store);
  store.allocate(9);
  const rig::RunContext run;
  auto opt = sgd.descriptor->make_optimizer(sgd.params("{momentum: 0.9}"),
                                            rig::OptimizerContext{run, store});
  const rig::Batch batch = image_batch(random_images({8, 1, 12, 12}, 7), {0, 1, 2, 3, 3, 2, 1, 0});
  double first = 0.0;
  double last = 0.0;
  for (int step = 0; step < 30; ++step) {
    store.zero_grad();
    rig::ModelOutput out = net->forward(batch, rig::Mode::train);
    out.loss.backward();
    opt->step(0.05);
    (step == 0 ? first : last) = out.loss.item();
  }
  EXPECT_LT(last, 0.2 * first);
  const rig::ModelOutput eval = net->forward(batch, rig::Mode::eval);
  EXPECT_EQ(eval.metrics.at("Acc@1").sum, 8.0);
}

}  // namespace
