// rig_bench resnet20_train: one whole training step of ResNet-20 as rig runs
// it, through the real plugins: the `resnet` model (cifar style, depth 20,
// projection shortcuts) on 28x28x1 images (Fashion-MNIST's shape), batch
// 128, 10 classes, and the `sgd` optimizer (momentum 0.9, weight decay 1e-4).
// A step: zero the gradients, forward to the loss (the model computes its
// Acc@1 / Acc@5 metrics only in eval), backward, optimizer step, the loss read. The batch is made
// before timing, so no data loading is timed. tools/bench/torch_layers.py resnet20_train is the
// same step in PyTorch.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include <yaml-cpp/yaml.h>

#include "bench_plugin.hpp"
#include "bench_util.hpp"
#include "rig/plugin.hpp"

namespace rig_bench {

namespace {

constexpr std::int64_t kBatch = 128, kChannels = 1, kSize = 28, kClasses = 10;

}  // namespace

void bench_resnet20_train(const Settings& s) {
  const Plugin resnet("model", "resnet");  // outlives the objects it makes
  const Plugin sgd("optimizer", "sgd");
  rig::ParameterStore store;
  YAML::Node info;
  info["task"] = "classification";
  info["channels"] = kChannels;
  info["num_classes"] = kClasses;
  const rig::RunContext run;
  const std::unique_ptr<rig::Model> model = resnet.descriptor->make_model(
      resnet.params("{style: cifar, depth: 20, shortcut: B}"), rig::ModelContext{run, info, store});
  store.allocate(1);
  const std::unique_ptr<rig::Optimizer> optimizer = sgd.descriptor->make_optimizer(
      sgd.params("{momentum: 0.9, weight_decay: 0.0001}"), rig::OptimizerContext{run, store});

  rig::Batch batch;
  batch.tensors["images"] = random_tensor({kBatch, kChannels, kSize, kSize}, 6);
  rig::Tensor labels = rig::Tensor::empty({kBatch}, rig::DType::i64);
  for (std::int64_t i = 0; i < kBatch; ++i) {
    labels.data<std::int64_t>()[i] = static_cast<std::int64_t>(
        rig::random_bits({1, 0, 0, 7}, i) % static_cast<std::uint32_t>(kClasses));
  }
  batch.tensors["labels"] = labels;
  batch.num_objects = kBatch;

  const long rss_before = max_rss_bytes();
  const std::size_t baseline = rig::allocator_stats().current_bytes;
  rig::reset_peak_bytes();
  double loss = 0.0;
  const Timing t = time_steps(s, [&](int) {
    store.zero_grad();
    const rig::ModelOutput out = model->forward(batch, rig::Mode::train);
    out.loss.backward();
    optimizer->step(0.05);
    loss = out.loss.item();
  });
  char extra[192];
  std::snprintf(extra, sizeof extra,
                " images_per_s=%.1f rss_peak_bytes=%ld parameters=%lld last_loss=%.4f",
                1e3 * static_cast<double>(kBatch) / t.median_ms, max_rss_bytes(),
                static_cast<long long>(store.numel()), loss);
  report("resnet20_train", t, rig::allocator_stats(), baseline, rss_before, extra);
}

}  // namespace rig_bench
