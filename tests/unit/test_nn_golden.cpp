// rig::nn layers against PyTorch (tests/golden/nn.json, from gen_nn.py): the
// same weights are copied into each layer's parameters by name, the same input
// and upstream gradient go through forward and backward, and the outputs and
// the gradients of the inputs and of every parameter must match.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>

#include "golden.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "test_nn_blocks.hpp"

namespace {

using rig::Tensor;
using rig_test::GoldenCase;
namespace nn = rig::nn;
namespace ops = rig::ops;

const std::set<std::string> kDataInputs{"x", "memory", "ids", "mask", "upstream"};

rig::ops::Activation activation_of(const std::string& name) {
  if (name == "relu") return ops::Activation::relu;
  if (name == "gelu") return ops::Activation::gelu;
  if (name == "tanh") return ops::Activation::tanh;
  if (name == "sigmoid") return ops::Activation::sigmoid;
  return ops::Activation::none;
}

// A layer built for one case: `forward` maps the case's data inputs to y.
struct Built {
  std::string root;  // the layer's name; golden parameter names are relative to it
  std::function<Tensor(const Tensor& x, const GoldenCase& c)> forward;
  std::shared_ptr<void> keep;  // the layer object
};

template <class Layer>
std::shared_ptr<Layer> keep(Layer layer) {
  return std::make_shared<Layer>(std::move(layer));
}

Built build(const GoldenCase& c, rig::ParameterStore& store) {
  const std::string& n = c.name;
  const auto& p = c.params;
  if (n.rfind("linear_", 0) == 0) {
    auto layer = keep(nn::Linear(store, "proj", p["in"], p["out"], p["bias"].get<bool>()));
    const auto act = activation_of(p["activation"]);
    return {"proj",
            [layer, act](const Tensor& x, const GoldenCase&) { return layer->forward(x, act); },
            layer};
  }
  if (n == "embedding") {
    auto layer = keep(nn::Embedding(store, "embed", p["vocab"], p["dim"]));
    return {"embed",
            [layer](const Tensor&, const GoldenCase& g) { return layer->forward(g.input("ids")); },
            layer};
  }
  if (n == "layer_norm") {
    auto layer = keep(nn::LayerNorm(store, "norm", p["dim"], p["eps"].get<float>()));
    return {"norm", [layer](const Tensor& x, const GoldenCase&) { return layer->forward(x); },
            layer};
  }
  if (n.rfind("mha_", 0) == 0) {
    auto layer =
        keep(nn::MultiHeadAttention(store, "dec.layers.3.attention", p["model_dim"], p["heads"]));
    const bool causal = p["causal"];
    const bool self = p["self"];
    return {"dec.layers.3.attention",
            [layer, causal, self](const Tensor& x, const GoldenCase& g) {
              nn::MultiHeadAttention::Options options;
              options.causal = causal;
              if (g.inputs.count("mask") != 0) options.mask = g.input("mask");
              // The memory input is a leaf of its own: tests fetch its grad by name.
              return layer->forward(x, self ? x : g.inputs.at("memory"), options);
            },
            layer};
  }
  if (n.rfind("feed_forward_", 0) == 0) {
    auto layer = keep(
        nn::FeedForward(store, "ffn", p["model_dim"], p["hidden"], activation_of(p["activation"])));
    return {"ffn",
            [layer](const Tensor& x, const GoldenCase&) { return layer->forward(x, true, {}); },
            layer};
  }
  if (n.rfind("conv2d", 0) == 0) {
    ops::Conv2dOptions options;
    options.stride_h = options.stride_w = p["stride"];
    options.pad_h = options.pad_w = p["pad"];
    options.groups = p["groups"];
    auto layer =
        keep(nn::Conv2d(store, "conv", p["in"], p["out"], p["kernel"], options, p["bias"]));
    return {"conv", [layer](const Tensor& x, const GoldenCase&) { return layer->forward(x); },
            layer};
  }
  if (n.rfind("batch_norm2d", 0) == 0) {
    auto layer = keep(nn::BatchNorm2d(store, "bn", p["channels"], p["momentum"].get<float>(),
                                      p["eps"].get<float>()));
    const bool training = p["training"];
    return {"bn",
            [layer, training](const Tensor& x, const GoldenCase&) {
              return layer->forward(x, training);
            },
            layer};
  }
  if (n == "encoder_layer") {
    auto layer = keep(
        rig_test::EncoderLayer(store, "enc.layers.0", p["model_dim"], p["heads"], p["hidden"]));
    return {"enc.layers.0",
            [layer](const Tensor& x, const GoldenCase& g) {
              return layer->forward(x, g.input("mask"), true, {});
            },
            layer};
  }
  if (n == "decoder_layer") {
    auto layer = keep(
        rig_test::DecoderLayer(store, "dec.layers.0", p["model_dim"], p["heads"], p["hidden"]));
    return {"dec.layers.0",
            [layer](const Tensor& x, const GoldenCase& g) {
              return layer->forward(x, g.inputs.at("memory"), g.input("mask"), true, {});
            },
            layer};
  }
  ADD_FAILURE() << "no layer for golden case " << n;
  return {};
}

class NnGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(NnGolden, ForwardAndBackwardMatchTorch) {
  GoldenCase c = rig_test::golden_case("nn", GetParam());
  rig::ParameterStore store;
  const Built layer = build(c, store);
  ASSERT_TRUE(layer.forward);
  store.allocate(0);

  // Every parameter and buffer of the layer has a golden value under the same name.
  std::set<std::string> expected_names;
  for (const auto& [key, value] : c.inputs) {
    if (kDataInputs.count(key) == 0) expected_names.insert(layer.root + "." + key);
  }
  std::set<std::string> names;
  for (const auto& info : store.parameters()) names.insert(info.name);
  for (const auto& info : store.buffer_infos()) names.insert(info.name);
  EXPECT_EQ(names, expected_names);

  for (const auto& [key, value] : c.inputs) {
    if (kDataInputs.count(key) != 0) continue;
    Tensor target = store.find(layer.root + "." + key).value;
    target.copy_from(value);
  }
  // Fresh leaves for the floating data inputs, so their gradients are ours.
  for (const char* key : {"x", "memory"}) {
    if (c.inputs.count(key) == 0) continue;
    Tensor leaf = c.inputs.at(key).clone().detach();
    leaf.set_requires_grad(true);
    c.inputs[key] = leaf;
  }
  const Tensor x = c.inputs.count("x") != 0 ? c.inputs.at("x") : Tensor();
  const Tensor y = layer.forward(x, c);
  EXPECT_TRUE(rig_test::tensors_close(y, c.output("y"), 1e-4, 1e-5));
  for (const char* buffer : {"running_mean", "running_var"}) {
    if (c.outputs.count(buffer) == 0) continue;
    EXPECT_TRUE(rig_test::tensors_close(store.find(layer.root + "." + buffer).value,
                                        c.output(buffer), 1e-5, 1e-6))
        << buffer;
  }

  ops::sum(ops::mul(y, c.input("upstream"))).backward();
  for (const auto& [key, expected] : c.grads) {
    const Tensor grad = kDataInputs.count(key) != 0
                            ? c.inputs.at(key).grad()
                            : store.find(layer.root + "." + key).value.grad();
    ASSERT_TRUE(grad.defined()) << key;
    EXPECT_TRUE(rig_test::tensors_close(grad, expected, 1e-4, 1e-5)) << "gradient of " << key;
  }
  // Buffers never get gradients.
  for (const auto& info : store.buffer_infos()) EXPECT_FALSE(info.value.requires_grad());
}

// The cases of tests/golden/nn.json, listed here rather than read from the
// file: GoogleTest evaluates the parameters in every process of this binary,
// one per ctest test, and parsing the file took a tenth of a second in each
// under the sanitizers. EveryCaseOfTheFileIsListed keeps the two in step.
const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = {"linear_none",
                                                 "linear_relu",
                                                 "linear_gelu",
                                                 "linear_tanh",
                                                 "linear_sigmoid",
                                                 "linear_no_bias",
                                                 "embedding",
                                                 "layer_norm",
                                                 "mha_self",
                                                 "mha_cross",
                                                 "mha_causal",
                                                 "mha_padding",
                                                 "mha_causal_padding",
                                                 "feed_forward_relu",
                                                 "feed_forward_gelu",
                                                 "conv2d",
                                                 "conv2d_stride2_groups",
                                                 "batch_norm2d_train",
                                                 "batch_norm2d_eval",
                                                 "encoder_layer",
                                                 "decoder_layer"};
  return names;
}

INSTANTIATE_TEST_SUITE_P(Layers, NnGolden, ::testing::ValuesIn(case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(NnGoldenFile, EveryCaseOfTheFileIsListed) {
  std::vector<std::string> in_file;
  for (const auto& c : rig_test::load_golden("nn")) in_file.push_back(c.name);
  EXPECT_EQ(in_file, case_names());
}

}  // namespace
