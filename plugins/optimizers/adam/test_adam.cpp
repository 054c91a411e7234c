// The adam optimizer plugin against golden runs of 100 steps (torch.optim.Adam /
// AdamW), state save/load mid-run, and errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/optimizer_test.hpp"
#include "rig/error.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;
using rig_test::contains;
using rig_test::error_of;
using namespace rig_test::optimizers;

TEST(OptimizerAdam, Golden) {
  for (const char* name :
       {"adam_default", "adam_varying_lr", "adam_l2", "adamw", "adam_amsgrad_l2"}) {
    check_golden(name);
  }
}

TEST(OptimizerAdam, StateRoundTripResumesExactly) {
  check_resume("adam", "{weight_decay: 0.01}", {"exp_avg", "exp_avg_sq", "step"});
  check_resume("adam", "{weight_decay: 0.01, decoupled_weight_decay: true, amsgrad: true}",
               {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"});
}

TEST(OptimizerAdam, StateShapes) {
  Plugin plugin("adam");
  rig::ParameterStore store;
  data().init(store);
  auto opt = plugin.make(store, "{}");
  EXPECT_TRUE(opt->state().empty());  // no step yet, as in PyTorch
  run(*opt, store, 0.01, 0, 3);
  auto state = opt->state();
  EXPECT_EQ(state.at("exp_avg").shape(), (rig::Shape{store.numel()}));
  EXPECT_EQ(state.at("exp_avg_sq").shape(), (rig::Shape{store.numel()}));
  ASSERT_EQ(state.at("step").dtype(), rig::DType::i64);
  EXPECT_EQ(state.at("step").data<std::int64_t>()[0], 3);
}

TEST(OptimizerAdam, Errors) {
  Plugin plugin("adam");
  rig::ParameterStore store;
  data().init(store);  // 19 parameters
  EXPECT_THROW(plugin.make(store, "{beta1: 1.0}"), rig::UserError);
  EXPECT_THROW(plugin.make(store, "{beta2: -0.1}"), rig::UserError);
  EXPECT_THROW(plugin.make(store, "{epsilon: 0}"), rig::UserError);
  EXPECT_THROW(plugin.make(store, "{weight_decay: -1}"), rig::UserError);
  auto opt = plugin.make(store, "{}");
  const auto good = [&] {
    return std::map<std::string, Tensor>{
        {"exp_avg", Tensor::zeros({19})},
        {"exp_avg_sq", Tensor::zeros({19})},
        {"step", Tensor::from_vector(std::vector<std::int64_t>{5}, {1})}};
  };
  EXPECT_NO_THROW(opt->load_state(good()));
  auto bad = good();
  bad["exp_avg"] = Tensor::zeros({4});
  EXPECT_TRUE(contains(error_of<rig::UserError>([&] { opt->load_state(bad); }),
                       "model has 19 f32 parameters"));
  bad = good();
  bad["momentum_buffer"] = Tensor::zeros({19});
  EXPECT_TRUE(contains(error_of<rig::UserError>([&] { opt->load_state(bad); }),
                       "unknown optimizer state 'momentum_buffer'"));
  bad = good();
  bad.erase("exp_avg_sq");
  EXPECT_TRUE(
      contains(error_of<rig::UserError>([&] { opt->load_state(bad); }), "lacks 'exp_avg_sq'"));
  bad = good();
  bad["step"] = Tensor::zeros({1});
  EXPECT_TRUE(
      contains(error_of<rig::UserError>([&] { opt->load_state(bad); }), "step must be one i64"));
  // Without amsgrad there is no max_exp_avg_sq; with it, it is required.
  bad = good();
  bad["max_exp_avg_sq"] = Tensor::zeros({19});
  EXPECT_THROW(opt->load_state(bad), rig::UserError);
  auto ams = plugin.make(store, "{amsgrad: true}");
  EXPECT_TRUE(contains(error_of<rig::UserError>([&] { ams->load_state(good()); }),
                       "lacks 'max_exp_avg_sq'"));
  rig::ParameterStore unallocated;
  EXPECT_THROW(plugin.make(unallocated, "{}"), std::logic_error);
}

}  // namespace
