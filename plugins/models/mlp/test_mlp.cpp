

// The mlp model: parameters, forward/infer contracts, and learning the
// synthetic task with sgd (forward, backward and step called directly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

class PluginMlp : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin mlp{"model", "mlp"};
  rig_test::LoadedPlugin synthetic{"data_layer", "synthetic"};
  rig_test::LoadedPlugin sgd{"optimizer", "sgd"};

  std::unique_ptr<rig::DataLayer> data(const std::string& params, rig::Mode mode,
                                       std::int64_t batch_size = 32) {
    rig::DataLayerContext ctx;
    ctx.run.mode = mode;
    ctx.batch_size = batch_size;
    return synthetic.descriptor->make_data_layer(synthetic.params(params), ctx);
  }

  std::unique_ptr<rig::Model> model(const std::string& params, const YAML::Node& info,
                                    rig::ParameterStore& store) {
    const rig::RunContext run;
    const rig::ModelContext ctx{run, info, store};
    return mlp.descriptor->make_model(mlp.params(params), ctx);
  }

  // Trains for `steps` and returns the mean train loss of the last 50 steps.
  double train(rig::Model& net, rig::DataLayer& train_data, rig::ParameterStore& store,
               const std::string& sgd_params, double lr, int steps) {
    const rig::RunContext run;
    const rig::OptimizerContext ctx{run, store};
    auto opt = sgd.descriptor->make_optimizer(sgd.params(sgd_params), ctx);
    std::int64_t epoch = 0;
    double recent = 0.0;
    for (int step = 0; step < steps; ++step) {
      auto batch = train_data.next_batch();
      if (!batch) {
        train_data.start_epoch(++epoch);
        batch = train_data.next_batch();
      }
      store.zero_grad();
      rig::ModelOutput out = net.forward(*batch, rig::Mode::train);
      out.loss.backward();
      opt->step(lr);
      if (step >= steps - 50) recent += out.loss.item() / 50.0;
    }
    return recent;
  }

  // Metrics summed over the whole eval split.
  rig::Metrics evaluate(rig::Model& net, rig::DataLayer& eval_data) {
    rig::Metrics total;
    eval_data.start_epoch(0);
    while (auto batch = eval_data.next_batch()) {
      rig::ModelOutput out = net.forward(*batch, rig::Mode::eval);
      EXPECT_FALSE(out.loss.requires_grad());
      for (const auto& [name, m] : out.metrics) {
        total[name].sum += m.sum;
        total[name].count += m.count;
      }
    }
    return total;
  }
};

TEST_F(PluginMlp, DeclaresNamedLayers) {
  auto d = data("{num_features: 5, num_classes: 3}", rig::Mode::train);
  rig::ParameterStore store;
  auto net = model("{hidden_sizes: [7, 6]}", d->info(), store);
  // nn::Linear layers: weights [out, in] as torch.nn.Linear.
  EXPECT_EQ(store.find("layers.0.weight").shape, (rig::Shape{7, 5}));
  EXPECT_EQ(store.find("layers.0.bias").shape, (rig::Shape{7}));
  EXPECT_EQ(store.find("layers.1.weight").shape, (rig::Shape{6, 7}));
  EXPECT_EQ(store.find("layers.2.weight").shape, (rig::Shape{3, 6}));
  EXPECT_EQ(store.find("layers.2.bias").shape, (rig::Shape{3}));
  EXPECT_EQ(store.numel(), 5 * 7 + 7 + 7 * 6 + 6 + 6 * 3 + 3);
}

TEST_F(PluginMlp, Initialisers) {
  const YAML::Node info = YAML::Load("{num_features: 400, num_classes: 300, task: classification}");
  {
    // xavier_uniform: U(+-sqrt(6 / (in + out))) weights, zero biases.
    rig::ParameterStore store;
    auto net = model("{hidden_sizes: []}", info, store);
    store.allocate(3);
    const auto w = store.find("layers.0.weight").value.to_vector();
    const float bound = std::sqrt(6.0F / 700.0F);
    float largest = 0.0F;
    for (float v : w) largest = std::max(largest, std::abs(v));
    EXPECT_LE(largest, bound);
    EXPECT_GT(largest, 0.95F * bound);
    for (float v : store.find("layers.0.bias").value.to_vector()) EXPECT_EQ(v, 0.0F);
  }
  {
    // fan_in_uniform: torch.nn.Linear's U(+-1/sqrt(in)) for weights and biases.
    rig::ParameterStore store;
    auto net = model("{hidden_sizes: [], init: fan_in_uniform}", info, store);
    store.allocate(3);
    const float bound = 1.0F / std::sqrt(400.0F);
    for (const char* name : {"layers.0.weight", "layers.0.bias"}) {
      float largest = 0.0F;
      for (float v : store.find(name).value.to_vector()) largest = std::max(largest, std::abs(v));
      EXPECT_LE(largest, bound) << name;
      EXPECT_GT(largest, 0.9F * bound) << name;
    }
  }
}

TEST_F(PluginMlp, LearnsSyntheticClassification) {
  auto train_data = data("{}", rig::Mode::train);
  auto eval_data = data("{}", rig::Mode::eval, 100);
  rig::ParameterStore store;
  auto net = model("{}", train_data->info(), store);
  store.allocate(1);
  const auto before = evaluate(*net, *eval_data);
  const double loss = train(*net, *train_data, store, "{momentum: 0.9}", 0.1, 300);
  const auto after = evaluate(*net, *eval_data);
  std::cout << "mlp classification: eval loss " << before.at("loss").value() << " -> "
            << after.at("loss").value() << ", accuracy " << before.at("accuracy").value() << " -> "
            << after.at("accuracy").value() << ", train loss (last 50) " << loss << "\n";
  EXPECT_EQ(after.at("loss").count, 1024);  // the whole eval split, once
  EXPECT_GT(before.at("loss").value(), 1.0);
  // noise 0.1 flips ~5% of the labels: ~0.9 is about what 300 steps reach.
  EXPECT_LT(loss, 0.35);
  EXPECT_LT(after.at("loss").value(), 0.35);
  EXPECT_GT(after.at("accuracy").value(), 0.85);

  auto infer_data = data("{}", rig::Mode::infer, 16);
  auto batch = infer_data->next_batch();
  ASSERT_TRUE(batch);
  Tensor predictions = net->infer(*batch);
  EXPECT_EQ(predictions.dtype(), rig::DType::i64);
  EXPECT_EQ(predictions.shape(), (rig::Shape{16}));
  EXPECT_FALSE(predictions.requires_grad());
  EXPECT_EQ(infer_data->decode(*batch, predictions).size(), 16U);
}

TEST_F(PluginMlp, LearnsSyntheticRegression) {
  const std::string params = "{task: regression, num_outputs: 2}";
  auto train_data = data(params, rig::Mode::train);
  auto eval_data = data(params, rig::Mode::eval, 100);
  rig::ParameterStore store;
  auto net = model("{activation: relu, init: fan_in_uniform}", train_data->info(), store);
  store.allocate(2);
  const auto before = evaluate(*net, *eval_data);
  const double loss = train(*net, *train_data, store, "{momentum: 0.9}", 0.05, 300);
  const auto after = evaluate(*net, *eval_data);
  std::cout << "mlp regression: eval mse " << before.at("loss").value() << " -> "
            << after.at("loss").value() << ", train mse (last 50) " << loss << "\n";
  EXPECT_EQ(after.count("accuracy"), 0U);
  EXPECT_LT(loss, 0.05);  // the noise variance, 0.01, is the floor
  EXPECT_LT(after.at("loss").value(), 0.05);
  eval_data->start_epoch(0);
  auto batch = eval_data->next_batch();
  ASSERT_TRUE(batch);
  EXPECT_EQ(net->infer(*batch).shape(), (rig::Shape{100, 2}));
}

TEST_F(PluginMlp, Errors) {
  rig::ParameterStore store;
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>(
                                     [&] { model("{}", YAML::Load("{task: regression}"), store); }),
                                 "does not say 'num_features'"));
  auto d = data("{num_features: 3}", rig::Mode::train, 4);
  auto net = model("{}", d->info(), store);
  store.allocate(0);
  rig::Batch batch;
  batch.tensors["features"] = Tensor::zeros({4, 5});
  batch.tensors["labels"] = Tensor::zeros({4}, rig::DType::i64);
  EXPECT_TRUE(rig_test::contains(rig_test::error_of([&] { net->forward(batch, rig::Mode::train); }),
                                 "mlp: features f32 [4,5], expected f32 [batch,3]"));
  batch.tensors.erase("labels");
  batch.tensors["features"] = Tensor::zeros({4, 3});
  EXPECT_TRUE(rig_test::contains(rig_test::error_of([&] { net->forward(batch, rig::Mode::eval); }),
                                 "no tensor 'labels'"));
}

}  // namespace
