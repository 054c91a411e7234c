// For the optimizer plugins' tests (test_<name>.cpp): golden runs of 100 steps
// (tests/golden/optimizers.json from tests/golden/gen_optimizers.py:
// torch.optim.Adam / AdamW, and a transcription of OpenSeq2Seq's NovoGrad) and
// state saved mid-run and loaded into a fresh optimizer.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "golden.hpp"
#include "test_plugins_util.hpp"

namespace rig_test::optimizers {

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
    auto data = golden_case("optimizers", "data");
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

inline const OptimizerData& data() {
  static const OptimizerData d;
  return d;
}

// lr_spec: a number (constant) or "data" (the per-step rate).
inline double lr_at(const nlohmann::json& lr_spec, int step) {
  return lr_spec.is_string() ? static_cast<double>(data().lr[step]) : lr_spec.get<double>();
}

inline void run(rig::Optimizer& opt, rig::ParameterStore& store, const nlohmann::json& lr_spec,
                int first, int last) {
  for (int s = first; s < last; ++s) {
    store.grads().copy_from(Tensor::from_vector(data().grads[s], {store.numel()}));
    opt.step(lr_at(lr_spec, s));
  }
}

struct Plugin {
  LoadedPlugin plugin;
  explicit Plugin(const std::string& name) : plugin("optimizer", name) {}
  std::unique_ptr<rig::Optimizer> make(rig::ParameterStore& store, const std::string& params) {
    return plugin.descriptor->make_optimizer(plugin.params(params), {{}, store});
  }
};

// Runs the golden case `name` with plugin `plugin_name` (default: the case's
// optimizer) and compares the parameters after 1, 10 and 100 steps.
inline void check_golden(const std::string& name, const std::string& plugin_name = "") {
  const auto golden = golden_case("optimizers", name);
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
      EXPECT_TRUE(tensors_close(store.find(p).value, golden.output(key), 1e-5, 1e-6))
          << name << ": " << key;
    }
  }
}

// Saving the state after `split` steps and loading it into a fresh optimizer
// continues exactly like the uninterrupted run.
inline void check_resume(const std::string& plugin_name, const std::string& params,
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

}  // namespace rig_test::optimizers
