// The sgd optimizer against torch.optim.SGD's update rule, computed by hand.
#include <gtest/gtest.h>

#include <vector>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

// One parameter [3] = {1, -2, 3}; each step sees the next of three gradients.
const std::vector<std::vector<float>> kGrads{
    {0.5F, -1.0F, 0.25F}, {0.1F, 0.2F, -0.3F}, {-0.4F, 0.0F, 0.6F}};

class PluginSgd : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin plugin{"optimizer", "sgd"};

  static void init(rig::ParameterStore& store) {
    store.declare("p", {3}, rig::Initializer::constant(0.0F));
    store.allocate(0);
    store.values().copy_from(Tensor::from_vector(std::vector<float>{1.0F, -2.0F, 3.0F}, {3}));
  }

  std::unique_ptr<rig::Optimizer> make(rig::ParameterStore& store, const std::string& params) {
    return plugin.descriptor->make_optimizer(plugin.params(params), {{}, store});
  }

  // Runs steps [first, last) of kGrads at learning rate 0.1.
  static void run(rig::Optimizer& opt, rig::ParameterStore& store, std::size_t first,
                  std::size_t last) {
    for (std::size_t s = first; s < last; ++s) {
      store.grads().copy_from(Tensor::from_vector(kGrads[s], {3}));
      opt.step(0.1);
    }
  }

  std::vector<float> three_steps(const std::string& params) {
    rig::ParameterStore store;
    init(store);
    auto opt = make(store, params);
    run(*opt, store, 0, 3);
    return store.values().to_vector();
  }
};

void expect_near(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << "at " << i;
}

// Reference: p -= lr * d, d = g + wd * p; with momentum buf = g (first step)
// then buf = mu * buf + d; d = buf, or d + mu * buf with Nesterov.
TEST_F(PluginSgd, PlainWithWeightDecay) {
  expect_near(three_steps("{weight_decay: 0.1}"), {0.951394, -1.862388, 2.8560945});
}

TEST_F(PluginSgd, Momentum) {
  // By hand: buf = g1; 0.9 g1 + g2; 0.9 (0.9 g1 + g2) + g3 = {0.095, -0.63, 0.5325}.
  expect_near(three_steps("{momentum: 0.9}"), {0.8855, -1.767, 2.92925});
}

TEST_F(PluginSgd, MomentumWithWeightDecay) {
  expect_near(three_steps("{momentum: 0.9, weight_decay: 0.01}"),
              {0.880094749, -1.756149498, 2.912499372});
}

TEST_F(PluginSgd, NesterovWithWeightDecay) {
  expect_near(three_steps("{momentum: 0.9, nesterov: true, weight_decay: 0.1}"),
              {0.803319646, -1.561595292, 2.6454811755});
}

TEST_F(PluginSgd, StateRoundTripResumesExactly) {
  const std::string params = "{momentum: 0.9, nesterov: true, weight_decay: 0.1}";
  rig::ParameterStore resumed;
  init(resumed);
  std::map<std::string, Tensor> state;
  {
    auto first = make(resumed, params);
    EXPECT_TRUE(first->state().empty());  // no buffer before the first step, as in PyTorch
    run(*first, resumed, 0, 2);
    state = first->state();
  }
  ASSERT_EQ(state.size(), 1U);
  EXPECT_EQ(state.at("momentum_buffer").shape(), (rig::Shape{3}));
  auto second = make(resumed, params);
  second->load_state(state);
  run(*second, resumed, 2, 3);
  EXPECT_EQ(resumed.values().to_vector(), three_steps(params));
}

TEST_F(PluginSgd, Errors) {
  rig::ParameterStore store;
  init(store);
  EXPECT_THROW(make(store, "{nesterov: true}"), rig::UserError);
  auto opt = make(store, "{momentum: 0.5}");
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] {
                                   opt->load_state({{"momentum_buffer", Tensor::zeros({4})}});
                                 }),
                                 "model has 3 f32 parameters"));
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] {
                                   opt->load_state({{"exp_avg", Tensor::zeros({3})}});
                                 }),
                                 "unknown optimizer state 'exp_avg'"));
  rig::ParameterStore unallocated;
  EXPECT_THROW(make(unallocated, "{}"), std::logic_error);
}

}  // namespace
