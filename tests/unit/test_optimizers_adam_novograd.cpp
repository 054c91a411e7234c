// The adam, LazyAdam and novograd optimizer plugins against golden runs of
// 100 steps (tests/golden/gen_optimizers.py: torch.optim.Adam / AdamW, and a
// transcription of OpenSeq2Seq's NovoGrad), state save/load mid-run, and errors.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "golden.hpp"
#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

constexpr int kSteps = 100;

// The golden run's data: three parameters with their initial values, and per
// step the flat gradient buffer and a learning rate.
struct OptimizerData {
  std::vector<std::string> names{"p0", "p1", "p2"};
  std::vector<Tensor> initial;
  std::vector<std::vector<float>> grads;  // [step] -> flat gradient (p0, p1, p2)
  std::vector<float> lr;                  // [step]

  OptimizerData() {
    auto data = rig_test::golden_case("optimizers", "data");
    for (std::size_t i = 0; i < names.size(); ++i) {
      initial.push_back(data.input(names[i]));
    }
    grads.resize(kSteps);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const auto g = data.input(fmt::format("g{}", i)).to_vector();
      const std::size_t per_step = g.size() / kSteps;
      for (int s = 0; s < kSteps; ++s) {
        grads[s].insert(grads[s].end(), g.begin() + static_cast<std::ptrdiff_t>(s * per_step),
                        g.begin() + static_cast<std::ptrdiff_t>((s + 1) * per_step));
      }
    }
    lr = data.input("lr").to_vector();
  }

  void init(rig::ParameterStore& store) const {
    for (std::size_t i = 0; i < names.size(); ++i) {
      store.declare(names[i], initial[i].shape(), rig::Initializer::zeros());
    }
    store.allocate(0);
    for (std::size_t i = 0; i < names.size(); ++i) {
      Tensor view = store.find(names[i]).value;  // a view into values()
      view.copy_from(initial[i]);
    }
  }
};

const OptimizerData& data() {
  static const OptimizerData d;
  return d;
}

// lr_spec: a number (constant) or "data" (the per-step rate).
double lr_at(const nlohmann::json& lr_spec, int step) {
  return lr_spec.is_string() ? static_cast<double>(data().lr[step]) : lr_spec.get<double>();
}

void run(rig::Optimizer& opt, rig::ParameterStore& store, const nlohmann::json& lr_spec, int first,
         int last) {
  for (int s = first; s < last; ++s) {
    store.grads().copy_from(Tensor::from_vector(data().grads[s], {store.numel()}));
    opt.step(lr_at(lr_spec, s));
  }
}

struct Plugin {
  rig_test::LoadedPlugin plugin;
  explicit Plugin(const std::string& name) : plugin("optimizer", name) {}
  std::unique_ptr<rig::Optimizer> make(rig::ParameterStore& store, const std::string& params) {
    return plugin.descriptor->make_optimizer(plugin.params(params), {{}, store});
  }
};

// Runs the golden case `name` with plugin `plugin_name` (default: the case's
// optimizer) and compares the parameters after 1, 10 and 100 steps.
void check_golden(const std::string& name, const std::string& plugin_name = "") {
  const auto golden = rig_test::golden_case("optimizers", name);
  Plugin plugin(plugin_name.empty() ? golden.params["optimizer"].get<std::string>() : plugin_name);
  rig::ParameterStore store;
  data().init(store);
  auto opt = plugin.make(store, golden.params["optimizer_params"].dump());
  int done = 0;
  for (int checkpoint : {1, 10, 100}) {
    run(*opt, store, golden.params["lr"], done, checkpoint);
    done = checkpoint;
    for (const auto& p : data().names) {
      const std::string key = fmt::format("{}@{}", p, checkpoint);
      EXPECT_TRUE(rig_test::tensors_close(store.find(p).value, golden.output(key), 1e-5, 1e-6))
          << name << ": " << key;
    }
  }
}

TEST(OptimizerAdam, Golden) {
  for (const char* name :
       {"adam_default", "adam_varying_lr", "adam_l2", "adamw", "adam_amsgrad_l2"}) {
    check_golden(name);
  }
}

// LazyAdam is the same dense Adam under another name.
TEST(OptimizerLazyAdam, GoldenIsDenseAdam) {
  Plugin lazy("LazyAdam");
  EXPECT_EQ(std::string(lazy.plugin.descriptor->name), "LazyAdam");
  check_golden("adam_default", "LazyAdam");
  check_golden("adamw", "LazyAdam");
}

TEST(OptimizerNovoGrad, Golden) {
  for (const char* name : {"novograd_default", "novograd_varying_lr", "novograd_wd_averaging"}) {
    check_golden(name);
  }
}

// Saving the state after `split` steps and loading it into a fresh optimizer
// continues exactly like the uninterrupted run.
void check_resume(const std::string& plugin_name, const std::string& params,
                  const std::vector<std::string>& expected_state) {
  const nlohmann::json lr_spec = "data";
  const int split = 37;
  Plugin plugin(plugin_name);
  rig::ParameterStore straight;
  data().init(straight);
  {
    auto opt = plugin.make(straight, params);
    run(*opt, straight, lr_spec, 0, kSteps);
  }
  rig::ParameterStore resumed;
  data().init(resumed);
  std::map<std::string, Tensor> state;
  {
    auto first = plugin.make(resumed, params);
    run(*first, resumed, lr_spec, 0, split);
    state = first->state();
  }
  std::vector<std::string> names;
  for (const auto& entry : state) names.push_back(entry.first);
  EXPECT_EQ(names, expected_state) << plugin_name << " " << params;
  auto second = plugin.make(resumed, params);
  second->load_state(state);
  run(*second, resumed, lr_spec, split, kSteps);
  EXPECT_EQ(resumed.values().to_vector(), straight.values().to_vector())
      << plugin_name << " " << params;
}

TEST(OptimizerAdam, StateRoundTripResumesExactly) {
  check_resume("adam", "{weight_decay: 0.01}", {"exp_avg", "exp_avg_sq", "step"});
  check_resume("adam", "{weight_decay: 0.01, decoupled_weight_decay: true, amsgrad: true}",
               {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"});
  check_resume("LazyAdam", "{}", {"exp_avg", "exp_avg_sq", "step"});
}

TEST(OptimizerNovoGrad, StateRoundTripResumesExactly) {
  check_resume("novograd", "{}", {"grads_ema", "momentum"});
  check_resume("novograd", "{weight_decay: 0.01, grad_averaging: true}", {"grads_ema", "momentum"});
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
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] { opt->load_state(bad); }),
                                 "model has 19 f32 parameters"));
  bad = good();
  bad["momentum_buffer"] = Tensor::zeros({19});
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] { opt->load_state(bad); }),
                                 "unknown optimizer state 'momentum_buffer'"));
  bad = good();
  bad.erase("exp_avg_sq");
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] { opt->load_state(bad); }),
                                 "lacks 'exp_avg_sq'"));
  bad = good();
  bad["step"] = Tensor::zeros({1});
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] { opt->load_state(bad); }),
                                 "step must be one i64"));
  // Without amsgrad there is no max_exp_avg_sq; with it, it is required.
  bad = good();
  bad["max_exp_avg_sq"] = Tensor::zeros({19});
  EXPECT_THROW(opt->load_state(bad), rig::UserError);
  auto ams = plugin.make(store, "{amsgrad: true}");
  EXPECT_TRUE(
      rig_test::contains(rig_test::error_of<rig::UserError>([&] { ams->load_state(good()); }),
                         "lacks 'max_exp_avg_sq'"));
  rig::ParameterStore unallocated;
  EXPECT_THROW(plugin.make(unallocated, "{}"), std::logic_error);
}

TEST(OptimizerNovoGrad, Errors) {
  Plugin plugin("novograd");
  rig::ParameterStore store;
  data().init(store);
  EXPECT_THROW(plugin.make(store, "{beta1: 1.5}"), rig::UserError);
  EXPECT_THROW(plugin.make(store, "{epsilon: -1}"), rig::UserError);
  auto opt = plugin.make(store, "{}");
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of<rig::UserError>([&] {
        opt->load_state({{"momentum", Tensor::zeros({19})}, {"grads_ema", Tensor::zeros({4})}});
      }),
      "3 parameter tensors"));
  EXPECT_TRUE(rig_test::contains(
      rig_test::error_of<rig::UserError>([&] {
        opt->load_state({{"momentum", Tensor::zeros({18})}, {"grads_ema", Tensor::zeros({3})}});
      }),
      "model has 19 f32 parameters"));
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] {
                                   opt->load_state({{"exp_avg", Tensor::zeros({19})}});
                                 }),
                                 "unknown optimizer state 'exp_avg'"));
  EXPECT_TRUE(rig_test::contains(rig_test::error_of<rig::UserError>([&] {
                                   opt->load_state({{"momentum", Tensor::zeros({19})}});
                                 }),
                                 "lacks 'grads_ema'"));
}

}  // namespace
