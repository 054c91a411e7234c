// The novograd optimizer plugin against golden runs of 100 steps (a
// transcription of OpenSeq2Seq's NovoGrad), state save/load mid-run, and errors.
#include <gtest/gtest.h>

#include <map>
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

TEST(OptimizerNovoGrad, Golden) {
  for (const char* name : {"novograd_default", "novograd_varying_lr", "novograd_wd_averaging"}) {
    check_golden(name);
  }
}

TEST(OptimizerNovoGrad, StateRoundTripResumesExactly) {
  check_resume("novograd", "{}", {"grads_ema", "momentum"});
  check_resume("novograd", "{weight_decay: 0.01, grad_averaging: true}", {"grads_ema", "momentum"});
}

TEST(OptimizerNovoGrad, StateShapes) {
  Plugin plugin("novograd");
  rig::ParameterStore store;
  data().init(store);
  auto opt = plugin.make(store, "{}");
  run(*opt, store, 0.01, 0, 2);
  auto state = opt->state();
  EXPECT_EQ(state.at("momentum").shape(), (rig::Shape{store.numel()}));
  EXPECT_EQ(state.at("grads_ema").shape(), (rig::Shape{3}));
  for (float v : state.at("grads_ema").to_vector()) EXPECT_GT(v, 0.0F);
}

TEST(OptimizerNovoGrad, Errors) {
  Plugin plugin("novograd");
  rig::ParameterStore store;
  data().init(store);
  EXPECT_THROW(plugin.make(store, "{beta1: 1.5}"), rig::UserError);
  EXPECT_THROW(plugin.make(store, "{epsilon: -1}"), rig::UserError);
  auto opt = plugin.make(store, "{}");
  EXPECT_TRUE(contains(
      error_of<rig::UserError>([&] {
        opt->load_state({{"momentum", Tensor::zeros({19})}, {"grads_ema", Tensor::zeros({4})}});
      }),
      "3 parameter tensors"));
  EXPECT_TRUE(contains(
      error_of<rig::UserError>([&] {
        opt->load_state({{"momentum", Tensor::zeros({18})}, {"grads_ema", Tensor::zeros({3})}});
      }),
      "model has 19 f32 parameters"));
  EXPECT_TRUE(contains(error_of<rig::UserError>([&] {
                         opt->load_state({{"exp_avg", Tensor::zeros({19})}});
                       }),
                       "unknown optimizer state 'exp_avg'"));
  EXPECT_TRUE(contains(error_of<rig::UserError>([&] {
                         opt->load_state({{"momentum", Tensor::zeros({19})}});
                       }),
                       "lacks 'grads_ema'"));
}

}  // namespace
