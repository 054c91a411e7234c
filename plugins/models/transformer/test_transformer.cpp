// The transformer model plugin (plugins/models/transformer): parameter names
// and counts, the data layer checks, forward and backward against a PyTorch
// transcription (tests/golden/transformer.json from
// tests/golden/gen_transformer.py), cached decoding against the full decoder,
// beam search (a toy language model with known answers, greedy decoding,
// scores), learning to reverse sequences through the plugin, and the
// evaluator's BLEU of its teacher-forced predictions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "beam_search.hpp"
#include "config/defaults.hpp"
#include "engine/evaluator.hpp"
#include "golden.hpp"
#include "network.hpp"
#include "params.hpp"
#include "rig/autograd.hpp"
#include "rig/bleu.hpp"
#include "rig/error.hpp"
#include "rig/nn.hpp"
#include "rig/ops.hpp"
#include "rig/random.hpp"
#include "teacher_forcing.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"
#include "user_error_of.hpp"

namespace {

using rig::Tensor;
namespace ops = rig::ops;
using Rows = std::vector<std::vector<std::int64_t>>;

constexpr std::int64_t kPad = 0;
constexpr std::int64_t kEos = 1;

YAML::Node text_info(std::int64_t src_vocab, std::int64_t tgt_vocab) {
  YAML::Node info;
  info["task"] = "text2text";
  info["src_vocab_size"] = src_vocab;
  info["tgt_vocab_size"] = tgt_vocab;
  info["pad_id"] = 0;
  info["eos_id"] = 1;
  info["go_id"] = 2;
  info["unk_id"] = 3;
  return info;
}

// `overrides` with the schema's defaults filled in by the host's own
// config::fill_defaults (nested maps included).
YAML::Node with_defaults(const YAML::Node& schema, const YAML::Node& overrides) {
  YAML::Node out = overrides.IsMap() ? YAML::Clone(overrides) : YAML::Node(YAML::NodeType::Map);
  for (const auto& entry : out) {
    const auto key = entry.first.as<std::string>();
    EXPECT_TRUE(schema["properties"][key].IsDefined()) << "unknown parameter " << key;
  }
  rig::config::fill_defaults(rig::config::SchemaDoc(schema, "model 'transformer'"), schema, out, "",
                             nullptr);
  return out;
}

struct Tiny {
  std::int64_t hidden = 16, heads = 2, filter = 32, encoder_layers = 1, decoder_layers = 1;
  float dropout = 0.0F, smoothing = 0.1F, alpha = 0.6F;
  std::int64_t beam = 1, extra = 3;
  bool remove_padding = true, pad_to_eight = true, recompute = false;

  std::string yaml() const {
    const std::string stack = fmt::format(
        "hidden_size: {}, num_heads: {}, filter_size: {}, attention_dropout: {}, relu_dropout: "
        "{}, layer_postprocess_dropout: {}",
        hidden, heads, filter, dropout, dropout, dropout);
    return fmt::format(
        "{{recompute_activations: {}, encoder_params: {{encoder_layers: {}, {}, remove_padding: "
        "{}, pad_embeddings_2_eight: {}}}, decoder_params: {{num_hidden_layers: {}, {}, "
        "beam_size: {}, alpha: {}, extra_decode_length: {}}}, loss_params: {{label_smoothing: "
        "{}}}}}",
        recompute, encoder_layers, stack, remove_padding, pad_to_eight, decoder_layers, stack, beam,
        alpha, extra, smoothing);
  }
};

// Rows of ids padded with PAD to the longest: [rows, width].
Tensor ids_tensor(const Rows& rows) {
  std::size_t width = 0;
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<std::int64_t> ids(rows.size() * width, kPad);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), ids.begin() + static_cast<std::ptrdiff_t>(i * width));
  }
  return Tensor::from_vector(
      ids, {static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(width)});
}

// A text2text batch per the contract: rows (EOS included) padded with PAD.
rig::Batch text_batch(const Rows& source, const Rows& target) {
  const auto pack = [](const Rows& rows, rig::Batch& batch, const std::string& name) {
    std::vector<std::int64_t> lengths;
    for (const auto& r : rows) lengths.push_back(static_cast<std::int64_t>(r.size()));
    batch.tensors[name + "_ids"] = ids_tensor(rows);
    batch.tensors[name + "_lengths"] =
        Tensor::from_vector(lengths, {static_cast<std::int64_t>(rows.size())});
  };
  rig::Batch batch;
  pack(source, batch, "source");
  std::int64_t tokens = 0;
  if (!target.empty()) {
    pack(target, batch, "target");
    for (const auto& r : target) tokens += static_cast<std::int64_t>(r.size());
  }
  batch.num_objects = tokens;
  for (std::size_t i = 0; i < source.size(); ++i)
    batch.indices.push_back(static_cast<std::int64_t>(i));
  return batch;
}

// Deterministic pseudo-random tokens in [4, vocab).
std::vector<std::int64_t> random_tokens(std::uint32_t seed, std::int64_t n, std::int64_t vocab) {
  std::vector<std::int64_t> out;
  std::uint32_t h = seed * 2654435761U + 12345U;
  for (std::int64_t i = 0; i < n; ++i) {
    h ^= h >> 13;
    h *= 2246822519U;
    h ^= h >> 16;
    out.push_back(4 + static_cast<std::int64_t>(h % static_cast<std::uint32_t>(vocab - 4)));
  }
  return out;
}

std::vector<std::int64_t> with_eos(std::vector<std::int64_t> tokens) {
  tokens.push_back(kEos);
  return tokens;
}

class PluginTransformer : public ::testing::Test {
 protected:
  rig_test::LoadedPlugin transformer{"model", "transformer"};
  rig_test::LoadedPlugin adam{"optimizer", "adam"};

  YAML::Node params(const std::string& overrides) const {
    return with_defaults(transformer.schema(), YAML::Load(overrides));
  }

  std::unique_ptr<rig::Model> model(const std::string& overrides, const YAML::Node& info,
                                    rig::ParameterStore& store,
                                    rig::DType dtype = rig::DType::f32) {
    rig::RunContext run;
    run.dtype = dtype;
    const rig::ModelContext ctx{run, info, store};
    return transformer.descriptor->make_model(params(overrides), ctx);
  }

  // The network alone (for logits and decode steps), over its own store.
  rig_transformer::Params network_params(const Tiny& tiny, std::int64_t vocab) const {
    return rig_transformer::parse_params(params(tiny.yaml()), text_info(vocab, vocab));
  }
};

// ---- parameters ------------------------------------------------------------------

std::int64_t expected_count(std::int64_t vocab, std::int64_t d, std::int64_t f,
                            std::int64_t encoder_layers, std::int64_t decoder_layers) {
  const std::int64_t norm = 2 * d;
  const std::int64_t attention = 4 * d * d;  // q, k, v, output; no biases
  const std::int64_t ffn = d * f + f + f * d + d;
  return vocab * d + encoder_layers * (2 * norm + attention + ffn) + norm +
         decoder_layers * (3 * norm + 2 * attention + ffn) + norm;
}

TEST_F(PluginTransformer, ParameterNamesShapesAndCount) {
  Tiny tiny;
  tiny.encoder_layers = 2;
  tiny.decoder_layers = 3;
  rig::ParameterStore store;
  auto net = model(tiny.yaml(), text_info(21, 21), store);
  // 21 rounded up to 24 rows by pad_embeddings_2_eight.
  EXPECT_EQ(store.numel(), expected_count(24, 16, 32, 2, 3));
  EXPECT_EQ(store.find("embedding_and_softmax.weights").shape, (rig::Shape{24, 16}));
  EXPECT_EQ(store.find("encoder.layer_1.self_attention.attention.query.weight").shape,
            (rig::Shape{16, 16}));
  EXPECT_EQ(store.find("decoder.layer_2.encdec_attention.attention.output.weight").shape,
            (rig::Shape{16, 16}));
  EXPECT_EQ(store.find("decoder.layer_0.ffn.filter_layer.weight").shape, (rig::Shape{32, 16}));
  EXPECT_EQ(store.find("decoder.layer_0.ffn.filter_layer.bias").shape, (rig::Shape{32}));
  EXPECT_EQ(store.find("encoder.layer_0.ffn.output_layer.weight").shape, (rig::Shape{16, 32}));
  EXPECT_EQ(store.find("encoder.output_normalization.weight").shape, (rig::Shape{16}));
  EXPECT_EQ(store.find("decoder.output_normalization.bias").shape, (rig::Shape{16}));
  EXPECT_THROW(store.find("encoder.layer_0.self_attention.attention.query.bias"),
               std::exception);  // OpenSeq2Seq's attention has no biases
  EXPECT_EQ(store.parameters().size(), 1U + 2U * (4 + 4 + 4) + 2U + 3U * (6 + 8 + 4) + 2U);

  Tiny unpadded = tiny;
  unpadded.pad_to_eight = false;
  rig::ParameterStore unpadded_store;
  auto net2 = model(unpadded.yaml(), text_info(21, 21), unpadded_store);
  EXPECT_EQ(unpadded_store.find("embedding_and_softmax.weights").shape, (rig::Shape{21, 16}));

  // transformer-base (the schema's defaults) over a 32768-token joint vocabulary:
  // 6 + 6 layers of width 512, filter 2048.
  rig::ParameterStore base;
  auto net3 = model("{}", text_info(32768, 32768), base);
  EXPECT_EQ(base.numel(), expected_count(32768, 512, 2048, 6, 6));
  EXPECT_EQ(base.numel(), 60'880'896);
}

TEST_F(PluginTransformer, InitialisedAsOpenSeq2Seq) {
  rig::ParameterStore store;
  Tiny tiny;
  tiny.hidden = 64;
  tiny.filter = 128;
  auto net = model(tiny.yaml(), text_info(512, 512), store);
  store.allocate(3);
  // The embedding: N(0, d^-0.5).
  const std::vector<float> e = store.find("embedding_and_softmax.weights").value.to_vector();
  double square = 0.0;
  for (float x : e) square += static_cast<double>(x) * x / static_cast<double>(e.size());
  EXPECT_NEAR(std::sqrt(square), 0.125, 0.005);
  // Dense kernels: glorot uniform, bound sqrt(6 / (fan_in + fan_out)); biases 0.
  const float bound = std::sqrt(6.0F / (64.0F + 128.0F));
  float largest = 0.0F;
  for (float x : store.find("encoder.layer_0.ffn.filter_layer.weight").value.to_vector()) {
    largest = std::max(largest, std::abs(x));
  }
  EXPECT_LE(largest, bound);
  EXPECT_GT(largest, 0.95F * bound);
  for (float x : store.find("encoder.layer_0.ffn.filter_layer.bias").value.to_vector()) {
    EXPECT_EQ(x, 0.0F);
  }
  for (float x : store.find("decoder.layer_0.self_attention.layer_norm.weight").value.to_vector()) {
    EXPECT_EQ(x, 1.0F);
  }
}

TEST_F(PluginTransformer, BadConfigurationsAreUserErrors) {
  const auto error = [&](const std::string& params, const YAML::Node& info) {
    rig::ParameterStore store;
    return rig_test::user_error_of([&] { model(params, info, store); });
  };
  const Tiny tiny;
  EXPECT_TRUE(rig_test::contains(error(tiny.yaml(), text_info(24, 32)),
                                 "src_vocab_size 24 and tgt_vocab_size 32 of the data layer "
                                 "differ"));
  Tiny odd_heads = tiny;
  odd_heads.heads = 3;
  EXPECT_TRUE(rig_test::contains(error(odd_heads.yaml(), text_info(24, 24)),
                                 "hidden_size 16 is not a multiple of num_heads 3"));
  EXPECT_TRUE(rig_test::contains(
      error("{encoder_params: {hidden_size: 256}}", text_info(24, 24)),
      "encoder_params.hidden_size 256 and decoder_params.hidden_size 512 differ"));
  YAML::Node other_pad = text_info(24, 24);
  other_pad["pad_id"] = 3;
  EXPECT_TRUE(rig_test::contains(error(tiny.yaml(), other_pad),
                                 "PAD_SYMBOL is 0 but the data layer's pad_id is 3"));
  YAML::Node images = text_info(24, 24);
  images["task"] = "classification";
  EXPECT_TRUE(rig_test::contains(error(tiny.yaml(), images), "task is 'classification'"));
  YAML::Node no_vocab = text_info(24, 24);
  no_vocab.remove("src_vocab_size");
  EXPECT_TRUE(rig_test::contains(error(tiny.yaml(), no_vocab),
                                 "does not say 'src_vocab_size' in its info()"));
  // The schema shows the three OpenSeq2Seq sections.
  const YAML::Node schema = transformer.schema();
  for (const char* key : {"encoder_layers", "pad_embeddings_2_eight", "remove_padding"}) {
    EXPECT_TRUE(schema["properties"]["encoder_params"]["properties"][key].IsDefined()) << key;
  }
  for (const char* key : {"num_hidden_layers", "beam_size", "alpha", "extra_decode_length",
                          "GO_SYMBOL", "END_SYMBOL", "PAD_SYMBOL"}) {
    EXPECT_TRUE(schema["properties"]["decoder_params"]["properties"][key].IsDefined()) << key;
  }
  EXPECT_TRUE(schema["properties"]["loss_params"]["properties"]["label_smoothing"].IsDefined());
}

TEST_F(PluginTransformer, BadBatchesAreReported) {
  rig::ParameterStore store;
  auto net = model(Tiny{}.yaml(), text_info(24, 24), store);
  store.allocate(1);
  EXPECT_TRUE(
      rig_test::contains(rig_test::user_error_of([&] {
                           net->forward(text_batch({{5, 30, 1}}, {{5, 1}}), rig::Mode::eval);
                         }),
                         "source token id 30 at batch position 0 (data-set index 0) is "
                         "outside the vocabulary [0, 24)"));
  rig::Batch batch = text_batch({{5, 6, 1}}, {{5, 1}});
  batch.tensors["target_lengths"] = Tensor::from_vector(std::vector<std::int64_t>{3}, {1});
  EXPECT_TRUE(rig_test::contains(
      rig_test::user_error_of([&] { net->forward(batch, rig::Mode::eval); }),
      "target_lengths 3 at batch position 0 (data-set index 0) is outside [1, 2]"));
}

// ---- against PyTorch ----------------------------------------------------------------

void load_weights(rig::ParameterStore& store, const rig_test::GoldenCase& c) {
  std::size_t golden = 0;
  for (const auto& [key, tensor] : c.inputs) golden += key.starts_with("w:") ? 1 : 0;
  ASSERT_EQ(store.parameters().size(), golden);
  for (const rig::ParameterInfo& info : store.parameters()) {
    const Tensor& w = c.input("w:" + info.name);
    ASSERT_EQ(w.shape(), info.shape) << info.name;
    Tensor master = info.master;
    master.copy_from(w);
  }
  store.publish_values();
  store.zero_grad();
}

TEST_F(PluginTransformer, MatchesPyTorch) {
  const rig_test::GoldenCase c = rig_test::golden_case("transformer", "tiny");
  Tiny tiny;
  tiny.smoothing = static_cast<float>(c.params.at("label_smoothing").get<double>());
  tiny.extra = c.params.at("extra_decode_length").get<std::int64_t>();
  const std::int64_t vocab = c.params.at("vocab_size").get<std::int64_t>();
  rig::ParameterStore store;
  auto net = model(tiny.yaml(), text_info(vocab, vocab), store);
  store.allocate(1);
  load_weights(store, c);

  rig::Batch batch;
  for (const char* key : {"source_ids", "source_lengths", "target_ids", "target_lengths"}) {
    batch.tensors[key] = c.input(key);
  }
  rig::ModelOutput out = net->forward(batch, rig::Mode::train);
  EXPECT_TRUE(out.loss.requires_grad());
  EXPECT_TRUE(rig_test::tensors_close(out.loss, c.output("loss"), 1e-5, 1e-6));
  out.loss.backward();
  for (const auto& [name, expected] : c.grads) {
    const std::vector<float> e = expected.to_vector();
    float largest = 0.0F;
    for (float x : e) largest = std::max(largest, std::abs(x));
    const Tensor grad = store.find(name).value.grad();
    ASSERT_TRUE(grad.defined()) << name;
    EXPECT_TRUE(rig_test::tensors_close(grad, expected, 1e-4, 1e-5 * largest)) << name;
  }
  EXPECT_EQ(c.grads.size(), store.parameters().size());

  // Eval: the same loss, summed over the 11 real target tokens; the accuracy.
  const rig::ModelOutput eval = net->forward(batch, rig::Mode::eval);
  EXPECT_FALSE(eval.loss.requires_grad());
  const double tokens = 7.0 + 4.0;
  EXPECT_EQ(eval.metrics.at("loss").count, tokens);
  EXPECT_NEAR(eval.metrics.at("loss").sum, c.output("loss").item() * tokens, 1e-4);
  EXPECT_EQ(eval.metrics.at("teacher_forced_token_accuracy").count, tokens);
  EXPECT_EQ(eval.metrics.at("teacher_forced_token_accuracy").sum,
            c.output("correct_tokens").item());

  // The logits themselves, through the network over the same weights.
  rig::ParameterStore net_store;
  const rig_transformer::Network network(net_store, network_params(tiny, vocab), rig::DType::f32);
  net_store.allocate(1);
  load_weights(net_store, c);
  rig::NoGradGuard no_grad;
  const rig_transformer::Encoded encoded =
      network.encode(c.input("source_ids"), c.input("source_lengths"), false, {});
  EXPECT_TRUE(rig_test::tensors_close(network.decode(c.input("target_ids"), encoded, false, {}),
                                      c.output("logits"), 1e-5, 1e-5));

  // Greedy decoding (beam 1) with the caches against PyTorch's full recomputation.
  const Tensor decoded = net->infer(batch);
  EXPECT_EQ(decoded.shape(), c.output("greedy").shape());
  EXPECT_EQ(decoded.to_int_vector(), c.output("greedy").to_int_vector());
}

// Greedy decoding under weights trained (in PyTorch) to reverse sequences:
// varied tokens, EOS, then PAD, against PyTorch's uncached decoding.
// Greedy and beam search decoding under weights trained (in PyTorch) to
// reverse sequences (varied tokens, EOS, then PAD) against PyTorch's uncached
// decoding and its transcription of OpenSeq2Seq's beam search.
TEST_F(PluginTransformer, DecodingMatchesPyTorch) {
  const rig_test::GoldenCase c = rig_test::golden_case("transformer", "tiny_trained_greedy");
  const std::int64_t vocab = c.params.at("vocab_size").get<std::int64_t>();
  rig::Batch batch;
  batch.tensors["source_ids"] = c.input("source_ids");
  batch.tensors["source_lengths"] = c.input("source_lengths");
  for (const auto& [beam, key] : std::vector<std::pair<std::int64_t, std::string>>{
           {1, "greedy"}, {2, "beam2"}, {4, "beam4"}}) {
    SCOPED_TRACE(key);
    Tiny tiny;
    tiny.extra = c.params.at("extra_decode_length").get<std::int64_t>();
    tiny.beam = beam;
    tiny.alpha = 0.6F;
    rig::ParameterStore store;
    auto net = model(tiny.yaml(), text_info(vocab, vocab), store);
    store.allocate(1);
    load_weights(store, c);
    const Tensor decoded = net->infer(batch);
    EXPECT_EQ(decoded.shape(), c.output(key).shape());
    EXPECT_EQ(decoded.to_int_vector(), c.output(key).to_int_vector());
  }
}

TEST_F(PluginTransformer, RemovePaddingDoesNotChangeTheLoss) {
  Tiny with;
  Tiny without;
  without.remove_padding = false;
  const rig::Batch batch =
      text_batch({{5, 6, 7, 1}, {8, 9, 1}, {4, 1}}, {{9, 8, 1}, {5, 6, 7, 4, 1}, {1}});
  rig::ParameterStore a, b;
  auto net_a = model(with.yaml(), text_info(16, 16), a);
  auto net_b = model(without.yaml(), text_info(16, 16), b);
  a.allocate(5);
  b.allocate(5);  // the same seed and names: the same weights
  const float loss_a = net_a->forward(batch, rig::Mode::eval).loss.item();
  const float loss_b = net_b->forward(batch, rig::Mode::eval).loss.item();
  EXPECT_NEAR(loss_a, loss_b, 1e-6);
}

TEST_F(PluginTransformer, RecomputedActivationsGiveTheSameLossAndGradients) {
  // Two layers each side, dropout everywhere (keyed on the batch: the second
  // run of each layer draws the first's masks), in f32 and in bf16.
  rig::Batch batch =
      text_batch({{5, 6, 7, 1}, {8, 9, 1}, {4, 1}}, {{9, 8, 1}, {5, 6, 7, 4, 1}, {1}});
  batch.rng = {3, 11, 0, 0};
  for (const rig::DType dtype : {rig::DType::f32, rig::DType::bf16}) {
    Tiny plain;
    plain.encoder_layers = plain.decoder_layers = 2;
    plain.dropout = 0.1F;
    Tiny recomputed = plain;
    recomputed.recompute = true;
    rig::ParameterStore a, b;
    auto net_a = model(plain.yaml(), text_info(16, 16), a, dtype);
    auto net_b = model(recomputed.yaml(), text_info(16, 16), b, dtype);
    a.allocate(5, dtype);
    b.allocate(5, dtype);
    const rig::ModelOutput out_a = net_a->forward(batch, rig::Mode::train);
    const rig::ModelOutput out_b = net_b->forward(batch, rig::Mode::train);
    EXPECT_EQ(out_b.loss.to(rig::DType::f32).item(), out_a.loss.to(rig::DType::f32).item());
    out_a.loss.backward();
    out_b.loss.backward();
    const auto& pa = a.parameters();
    const auto& pb = b.parameters();
    ASSERT_EQ(pa.size(), pb.size());
    for (std::size_t i = 0; i < pa.size(); ++i) {
      ASSERT_TRUE(pb[i].value.grad().defined()) << pb[i].name;
      EXPECT_EQ(pb[i].value.grad().to_vector(), pa[i].value.grad().to_vector())
          << pa[i].name << " in " << rig::dtype_name(dtype);
    }
  }
}

TEST_F(PluginTransformer, LowPrecisionComputeFollowsF32) {
  const rig::Batch batch = text_batch({{5, 6, 7, 1}, {8, 9, 1}}, {{9, 8, 1}, {5, 6, 7, 4, 1}});
  rig::ParameterStore f32, bf16;
  auto net_f32 = model(Tiny{}.yaml(), text_info(16, 16), f32);
  auto net_bf16 = model(Tiny{}.yaml(), text_info(16, 16), bf16, rig::DType::bf16);
  f32.allocate(5);
  bf16.allocate(5, rig::DType::bf16);
  const float reference = net_f32->forward(batch, rig::Mode::eval).loss.item();
  rig::ModelOutput out = net_bf16->forward(batch, rig::Mode::train);
  EXPECT_NEAR(out.loss.item(), reference, 0.03 * reference);
  out.loss.backward();
  EXPECT_EQ(bf16.find("embedding_and_softmax.weights").value.dtype(), rig::DType::bf16);
  const Tensor infer = net_bf16->infer(batch);
  EXPECT_EQ(infer.dtype(), rig::DType::i64);
}

// ---- cached decoding -----------------------------------------------------------------

class TransformerNetwork : public PluginTransformer {
 protected:
  static constexpr std::int64_t kVocab = 32;
  Tiny tiny_ = [] {
    Tiny t;
    t.encoder_layers = 2;
    t.decoder_layers = 2;
    return t;
  }();
  rig::ParameterStore store_;
  std::unique_ptr<rig_transformer::Network> net_;

  void SetUp() override {
    net_ = std::make_unique<rig_transformer::Network>(store_, network_params(tiny_, kVocab),
                                                      rig::DType::f32);
    store_.allocate(21);
  }

  // Log-probabilities [T, V] of every position of `tokens` decoding source row `row`.
  std::vector<std::vector<double>> full_log_probs(const rig_transformer::Encoded& encoded,
                                                  std::int64_t row,
                                                  const std::vector<std::int64_t>& tokens) const {
    rig_transformer::Encoded one;
    const Tensor index = Tensor::from_vector(std::vector<std::int64_t>{row}, {1});
    one.output = ops::index_select(encoded.output, 0, index);
    one.key_mask = ops::index_select(encoded.key_mask, 0, index);
    const auto t = static_cast<std::int64_t>(tokens.size());
    const Tensor logits = net_->decode(Tensor::from_vector(tokens, {1, t}), one, false, {});
    const std::vector<float> lp = ops::log_softmax(logits, -1).to_vector();
    std::vector<std::vector<double>> out(static_cast<std::size_t>(t));
    for (std::int64_t i = 0; i < t; ++i) {
      out[static_cast<std::size_t>(i)].assign(lp.begin() + i * kVocab,
                                              lp.begin() + (i + 1) * kVocab);
    }
    return out;
  }
};

TEST_F(TransformerNetwork, CachedStepsMatchTheFullDecoder) {
  rig::NoGradGuard no_grad;
  const rig::Batch batch = text_batch(
      {with_eos(random_tokens(1, 6, kVocab)), with_eos(random_tokens(2, 3, kVocab))}, {});
  const rig_transformer::Encoded encoded =
      net_->encode(batch.at("source_ids"), batch.at("source_lengths"), false, {});
  // Three hypotheses per source row, each with its own prefix.
  const std::int64_t beams = 3, steps = 7;
  std::vector<std::int64_t> rows;
  std::vector<std::vector<std::int64_t>> prefixes;
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t j = 0; j < beams; ++j) {
      rows.push_back(b);
      prefixes.push_back(
          random_tokens(static_cast<std::uint32_t>(10 + b * beams + j), steps, kVocab));
    }
  }
  const auto n = static_cast<std::int64_t>(rows.size());
  rig_transformer::DecodeState state =
      net_->start_decoding(encoded, Tensor::from_vector(rows, {n}));
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n), kPad);
  for (std::int64_t t = 0; t < steps; ++t) {
    if (t == 3) {
      // Reorder within each row's beams, as beam search does: hypothesis j takes over
      // the prefix (and caches) of perm[j].
      const std::vector<std::int64_t> perm{2, 0, 2, 4, 4, 3};
      rig_transformer::Network::reorder(state, Tensor::from_vector(perm, {n}));
      std::vector<std::vector<std::int64_t>> moved;
      for (std::int64_t p : perm) moved.push_back(prefixes[static_cast<std::size_t>(p)]);
      // Keep the reordered prefixes' first t tokens; the rest stay each hypothesis' own.
      for (std::size_t h = 0; h < moved.size(); ++h) {
        std::copy(moved[h].begin(), moved[h].begin() + t, prefixes[h].begin());
        ids[h] = prefixes[h][static_cast<std::size_t>(t - 1)];  // the next input moves too
      }
    }
    const std::vector<float> step =
        net_->decode_step(Tensor::from_vector(ids, {n}), state).to_vector();
    for (std::int64_t h = 0; h < n; ++h) {
      const auto& prefix = prefixes[static_cast<std::size_t>(h)];
      // The full decoder over prefix[0..t] predicts position t from prefix[0..t-1].
      const std::vector<std::int64_t> upto(prefix.begin(), prefix.begin() + t + 1);
      const Tensor full =
          net_->decode(Tensor::from_vector(upto, {1, t + 1}),
                       [&] {
                         rig_transformer::Encoded one;
                         const Tensor i = Tensor::from_vector(
                             std::vector<std::int64_t>{rows[static_cast<std::size_t>(h)]}, {1});
                         one.output = ops::index_select(encoded.output, 0, i);
                         one.key_mask = ops::index_select(encoded.key_mask, 0, i);
                         return one;
                       }(),
                       false, {});
      const std::vector<float> last = full.slice(1, t, t + 1).contiguous().to_vector();
      for (std::int64_t v = 0; v < kVocab; ++v) {
        ASSERT_NEAR(step[static_cast<std::size_t>(h * kVocab + v)],
                    last[static_cast<std::size_t>(v)], 1e-5)
            << "step " << t << " hypothesis " << h << " token " << v;
      }
      ids[static_cast<std::size_t>(h)] = prefix[static_cast<std::size_t>(t)];
    }
  }
  EXPECT_EQ(state.steps, steps);
}

// Decoding takes its memory once: start_decoding sizes the self-attention
// caches for max_length steps and beam reordering swaps buffers, so a step
// after the first few asks the system for nothing and holds no more than the
// step before. (Caches that grew a position a step made a pair of a new size
// every step, and the caching allocator kept each size: 368 MiB of RSS in
// rig_bench transformer_beam.) Steps 3..12 and 13..24 must look the same.
TEST_F(TransformerNetwork, DecodeStepsTakeNoNewMemory) {
  if (const char* allocator = std::getenv("RIG_ALLOCATOR");
      allocator != nullptr && std::string(allocator) == "system") {
    GTEST_SKIP() << "RIG_ALLOCATOR=system: no caching allocator to measure";
  }
  rig::NoGradGuard no_grad;
  const rig::Batch batch = text_batch(
      {with_eos(random_tokens(41, 5, kVocab)), with_eos(random_tokens(42, 3, kVocab))}, {});
  const rig_transformer::Encoded encoded =
      net_->encode(batch.at("source_ids"), batch.at("source_lengths"), false, {});
  const std::vector<std::int64_t> rows{0, 0, 0, 1, 1, 1};
  const auto n = static_cast<std::int64_t>(rows.size());
  // Reordered within each row's beams, as beam search does.
  const Tensor perm = Tensor::from_vector(std::vector<std::int64_t>{1, 0, 0, 5, 3, 4}, {n});
  constexpr std::int64_t kHalf = 12, kSteps = 2 * kHalf, kWarmup = 2;
  // Freed blocks of earlier tests must not serve the sizes a regression would ask for.
  rig::empty_allocator_cache();
  rig_transformer::DecodeState state =
      net_->start_decoding(encoded, Tensor::from_vector(rows, {n}), kSteps);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n), kPad);
  rig::AllocatorStats half, end;
  for (std::int64_t t = 1; t <= kSteps; ++t) {
    const Tensor logits = net_->decode_step(Tensor::from_vector(ids, {n}), state);
    ids = ops::argmax(logits, -1).to_int_vector();
    rig_transformer::Network::reorder(state, perm);
    if (t == kWarmup) rig::reset_peak_bytes();
    if (t == kHalf) {
      half = rig::allocator_stats();
      rig::reset_peak_bytes();
    }
    if (t == kSteps) end = rig::allocator_stats();
  }
  EXPECT_EQ(end.system_allocations, half.system_allocations);
  EXPECT_EQ(end.current_bytes, half.current_bytes);
  EXPECT_EQ(end.peak_bytes, half.peak_bytes);
  EXPECT_EQ(state.self_attention[0].capacity(), kSteps);
  EXPECT_EQ(state.self_attention[0].length(), kSteps);
}

// MultiHeadAttention's precomputed memory keys/values (what cached
// encoder-decoder attention uses) give what projecting the memory gives.
TEST(TransformerAttention, PrecomputedMemoryKeysAndValues) {
  rig::ParameterStore store;
  const rig::nn::MultiHeadAttention attention(store, "attention", 16, 2, 0.0F, false,
                                              rig::Initializer::xavier_uniform());
  store.allocate(4);
  EXPECT_THROW(store.find("attention.query.bias"), std::exception);
  Tensor x = Tensor::empty({2, 3, 16});
  Tensor memory = Tensor::empty({2, 5, 16});
  rig::fill_normal({4, 0, 0, 1}, x.data<float>(), x.numel());
  rig::fill_normal({4, 0, 0, 2}, memory.data<float>(), memory.numel());
  rig::nn::MultiHeadAttention::Options options;
  options.mask =
      Tensor::from_vector(std::vector<std::uint8_t>{1, 1, 1, 1, 0, 1, 1, 0, 0, 0}, {2, 1, 1, 5});
  const Tensor projected = attention.forward(x, memory, options);
  const rig::nn::KvCache kv = attention.project_memory(memory);
  EXPECT_EQ(kv.keys.shape(), (rig::Shape{2, 2, 5, 8}));
  options.memory_kv = &kv;
  EXPECT_TRUE(
      rig_test::tensors_close(attention.forward(x, Tensor(), options), projected, 1e-6, 1e-6));
  const rig::nn::KvCache wrong{kv.keys.slice(0, 0, 1), kv.values.slice(0, 0, 1)};
  options.memory_kv = &wrong;
  EXPECT_THROW(attention.forward(x, Tensor(), options), std::invalid_argument);
}

// ---- beam search --------------------------------------------------------------------

// A bigram language model over {PAD, EOS, a = 2, b = 3} with probabilities per
// previous token, different for each batch row: row 0's greedy path is
// "a EOS" (0.55 x 0.4 = 0.22), its best "b EOS" (0.45 x 0.95 = 0.4275).
// Row 1 prefers "a a a EOS".
struct ToyModel {
  std::int64_t beam = 1;
  int calls = 0;
  std::vector<std::int64_t> rows;  // the batch row of each hypothesis

  static std::vector<double> next(std::int64_t row, std::int64_t previous) {
    if (row == 0) {
      if (previous == kPad) return {0.0, 0.0, 0.55, 0.45};
      if (previous == 2) return {0.0, 0.4, 0.3, 0.3};
      return {0.0, 0.95, 0.025, 0.025};
    }
    return {0.0, 0.1, 0.8, 0.1};  // row 1: EOS is unlikely, a likely, again and again
  }

  Tensor step(const Tensor& ids) {
    ++calls;
    const std::vector<std::int64_t> v = ids.to_int_vector();
    std::vector<float> logits;
    for (std::size_t h = 0; h < v.size(); ++h) {
      for (double p : next(rows[h], v[h])) {
        logits.push_back(p > 0.0 ? static_cast<float>(std::log(p)) : -1e9F);
      }
    }
    return Tensor::from_vector(logits, {static_cast<std::int64_t>(v.size()), 4});
  }
};

// Search parameters with the test vocabularies' EOS and PAD.
rig_transformer::SearchParams search_params(std::int64_t batch, std::int64_t beam, float alpha,
                                            std::int64_t max_length, std::int64_t vocab) {
  rig_transformer::SearchParams p;
  p.batch_size = batch;
  p.beam_size = beam;
  p.alpha = alpha;
  p.max_decode_length = max_length;
  p.vocab_size = vocab;
  p.eos_id = kEos;
  p.pad_id = kPad;
  return p;
}

rig_transformer::SearchResult toy_search(ToyModel& toy, std::int64_t beam, float alpha,
                                         std::int64_t max_length) {
  toy.beam = beam;
  toy.rows.clear();
  for (std::int64_t b = 0; b < 2; ++b) toy.rows.insert(toy.rows.end(), beam, b);
  const rig_transformer::SearchParams p = search_params(2, beam, alpha, max_length, 4);
  return rig_transformer::search(
      p, [&](const Tensor& ids) { return toy.step(ids); },
      [&](const Tensor& index) {
        // A reorder stays within each row's beams (the toy model's state is its row).
        const std::vector<std::int64_t> v = index.to_int_vector();
        for (std::size_t n = 0; n < v.size(); ++n) {
          EXPECT_EQ(v[n] / beam, static_cast<std::int64_t>(n) / beam);
        }
      });
}

TEST(TransformerBeamSearch, ToyModelGreedyAndBeam) {
  ToyModel toy;
  const rig_transformer::SearchResult greedy = toy_search(toy, 1, 0.0F, 10);
  EXPECT_EQ(greedy.sequences[0], (std::vector<std::int64_t>{2, 1}));
  EXPECT_NEAR(greedy.scores[0], std::log(0.55 * 0.4), 1e-5);
  // Row 1 never picks EOS greedily: it runs to the length limit, unfinished.
  EXPECT_EQ(greedy.sequences[1], std::vector<std::int64_t>(10, 2));
  EXPECT_NEAR(greedy.scores[1], 10 * std::log(0.8), 1e-4);
  EXPECT_EQ(toy.calls, 10);

  const rig_transformer::SearchResult beam = toy_search(toy, 2, 0.0F, 10);
  EXPECT_EQ(beam.sequences[0], (std::vector<std::int64_t>{3, 1}));
  EXPECT_NEAR(beam.scores[0], std::log(0.45 * 0.95), 1e-5);
  // Row 1: the best finished hypothesis is "EOS" at once (0.1) ... unless a
  // longer one beats it; with alpha 0 none does: 0.8^k x 0.1 < 0.1.
  EXPECT_EQ(beam.sequences[1], (std::vector<std::int64_t>{1}));
  EXPECT_NEAR(beam.scores[1], std::log(0.1), 1e-5);
  // The search stops once no alive hypothesis can beat the worst kept finished
  // one: row 0 after 2 steps, row 1 once 0.8^k < 0.8 x 0.1 ("a EOS"), k = 12.
  toy.calls = 0;
  toy_search(toy, 2, 0.0F, 50);
  EXPECT_EQ(toy.calls, 12);

  // A strong length bonus (alpha 3, large max length normaliser) favours
  // longer finished hypotheses in row 1: scores are log p / ((5 + len) / 6)^3.
  const rig_transformer::SearchResult long_beam = toy_search(toy, 2, 3.0F, 6);
  const auto& row1 = long_beam.sequences[1];
  ASSERT_FALSE(row1.empty());
  EXPECT_EQ(row1.back(), kEos);
  double best = -1e30;
  std::size_t best_length = 0;
  for (std::size_t len = 1; len <= 6; ++len) {  // a^(len-1) EOS
    const double lp = (len - 1) * std::log(0.8) + std::log(0.1);
    const double score = lp / std::pow((5.0 + len) / 6.0, 3.0);
    if (score > best) best = score, best_length = len;
  }
  EXPECT_EQ(row1.size(), best_length);
  EXPECT_NEAR(long_beam.scores[1], best, 1e-4);

  // As a tensor: [2, L], PAD after each row's EOS.
  const Tensor t = rig_transformer::to_tensor(beam, kPad);
  EXPECT_EQ(t.shape(), (rig::Shape{2, 2}));
  EXPECT_EQ(t.to_int_vector(), (std::vector<std::int64_t>{3, 1, 1, kPad}));
}

// Ties between hypotheses are broken as one list of the row's beam x vocab
// extensions would break them: by hypothesis, then token. Vocabulary 8, beam
// 2 (4 extensions kept). After PAD the best tokens are 3 and 4, equally; after
// 3 they are 5, 6, 7 and after 4 they are 2, 3, 7, all with the same
// log-probability. The row's kept extensions are then 3-5, 3-6, 3-7, 4-2, so
// the alive pair is 3-5, 3-6 (both from hypothesis 0), not 4-2, 4-3 as a
// token-first order would have it. The search selects each hypothesis' best
// on the step's device and merges them on the host: this checks the merge.
TEST(TransformerBeamSearch, TiesGoToTheEarlierHypothesisThenTheLowerToken) {
  std::vector<std::vector<std::int64_t>> seen;  // the ids of each step
  const auto step = [&](const Tensor& ids) {
    const std::vector<std::int64_t> v = ids.to_int_vector();
    seen.push_back(v);
    std::vector<float> logits;
    for (const std::int64_t previous : v) {
      std::vector<std::int64_t> best{5, 6, 7};
      if (previous == kPad) best = {3, 4};
      if (previous == 4) best = {2, 3, 7};
      for (std::int64_t token = 0; token < 8; ++token) {
        const bool top = std::find(best.begin(), best.end(), token) != best.end();
        logits.push_back(top ? 0.0F : -30.0F);
      }
    }
    return Tensor::from_vector(logits, {static_cast<std::int64_t>(v.size()), 8});
  };
  std::vector<std::vector<std::int64_t>> reorders;
  const rig_transformer::SearchParams p = search_params(1, 2, 0.0F, 3, 8);
  const rig_transformer::SearchResult r = rig_transformer::search(
      p, step, [&](const Tensor& index) { reorders.push_back(index.to_int_vector()); });
  ASSERT_EQ(seen.size(), 3U);
  EXPECT_EQ(seen[1], (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(seen[2], (std::vector<std::int64_t>{5, 6}));
  ASSERT_GE(reorders.size(), 2U);
  EXPECT_EQ(reorders[1], (std::vector<std::int64_t>{0, 0}));
  // EOS (token 1) is the first step's fourth extension kept: the only finished
  // hypothesis, which OpenSeq2Seq returns ahead of any alive one.
  EXPECT_EQ(r.sequences[0], (std::vector<std::int64_t>{kEos}));
}

// A vocabulary smaller than the 2 x beam extensions kept: each hypothesis
// offers all of its tokens. Vocabulary 3 {PAD, EOS, a}, beam 3 (6 kept).
TEST(TransformerBeamSearch, VocabularySmallerThanTheExtensionsKept) {
  const auto step = [](const Tensor& ids) {
    const std::vector<std::int64_t> v = ids.to_int_vector();
    std::vector<float> logits;
    for (std::size_t h = 0; h < v.size(); ++h) {
      // Hypothesis state is not tracked: every step the same distribution,
      // favouring a (0.7) over EOS (0.2) and PAD (0.1).
      for (const double q : {0.1, 0.2, 0.7}) logits.push_back(static_cast<float>(std::log(q)));
    }
    return Tensor::from_vector(logits, {static_cast<std::int64_t>(v.size()), 3});
  };
  const rig_transformer::SearchParams p = search_params(2, 3, 0.0F, 4, 3);
  const rig_transformer::SearchResult r = rig_transformer::search(p, step, [](const Tensor&) {});
  // With alpha 0 the first EOS (0.2) beats every longer ending (0.7^k x 0.2).
  for (std::size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(r.sequences[b], (std::vector<std::int64_t>{kEos}));
    EXPECT_NEAR(r.scores[b], std::log(0.2), 1e-5);
  }
}

TEST_F(TransformerNetwork, BeamOneIsGreedyAndBeamScoresAreAtLeastGreedys) {
  rig::NoGradGuard no_grad;
  const Rows sources{with_eos(random_tokens(31, 5, kVocab)), with_eos(random_tokens(32, 2, kVocab)),
                     with_eos(random_tokens(33, 7, kVocab))};
  const rig::Batch batch = text_batch(sources, {});
  const rig_transformer::Encoded encoded =
      net_->encode(batch.at("source_ids"), batch.at("source_lengths"), false, {});
  const auto run = [&](std::int64_t beam, float alpha) {
    std::vector<std::int64_t> rows;
    for (std::int64_t b = 0; b < 3; ++b) rows.insert(rows.end(), beam, b);
    rig_transformer::DecodeState state = net_->start_decoding(
        encoded, Tensor::from_vector(rows, {static_cast<std::int64_t>(rows.size())}));
    const rig_transformer::SearchParams p = search_params(3, beam, alpha, 12, kVocab);
    return rig_transformer::search(
        p, [&](const Tensor& ids) { return net_->decode_step(ids, state); },
        [&](const Tensor& index) { rig_transformer::Network::reorder(state, index); });
  };
  // The score of a hypothesis from the full decoder.
  const auto score = [&](std::int64_t row, const std::vector<std::int64_t>& tokens, float alpha) {
    const auto lp = full_log_probs(encoded, row, tokens);
    double sum = 0.0;
    for (std::size_t t = 0; t < tokens.size(); ++t)
      sum += lp[t][static_cast<std::size_t>(tokens[t])];
    const bool finished = !tokens.empty() && tokens.back() == kEos;
    return finished ? sum / rig_transformer::length_penalty(
                                alpha, static_cast<std::int64_t>(tokens.size()))
                    : sum;
  };
  for (const float alpha : {0.0F, 0.6F}) {
    const rig_transformer::SearchResult greedy = run(1, alpha);
    for (std::int64_t b = 0; b < 3; ++b) {
      const auto& tokens = greedy.sequences[static_cast<std::size_t>(b)];
      // Greedy, uncached: the argmax of the full decoder at every position.
      const auto lp = full_log_probs(encoded, b, tokens);
      for (std::size_t t = 0; t < tokens.size(); ++t) {
        const auto best = std::max_element(lp[t].begin(), lp[t].end()) - lp[t].begin();
        EXPECT_EQ(tokens[t], best) << "row " << b << " position " << t;
      }
      EXPECT_NEAR(greedy.scores[static_cast<std::size_t>(b)], score(b, tokens, alpha), 1e-4);
    }
    for (const std::int64_t beam : {2, 4}) {
      const rig_transformer::SearchResult result = run(beam, alpha);
      for (std::int64_t b = 0; b < 3; ++b) {
        const auto bb = static_cast<std::size_t>(b);
        const auto& tokens = result.sequences[bb];
        EXPECT_NEAR(result.scores[bb], score(b, tokens, alpha), 1e-4) << "beam " << beam;
        EXPECT_GE(result.scores[bb], greedy.scores[bb] - 1e-5) << "beam " << beam << " row " << b;
        // Ends at its first EOS (or runs to the limit).
        const auto eos = std::find(tokens.begin(), tokens.end(), kEos);
        EXPECT_TRUE(eos == tokens.end() ? tokens.size() == 12U : eos + 1 == tokens.end());
      }
    }
  }
}

// ---- learning -----------------------------------------------------------------------------

TEST_F(PluginTransformer, LearnsToReverseSequences) {
  constexpr std::int64_t kVocab = 16;
  Tiny tiny;
  tiny.hidden = 32;
  tiny.heads = 4;
  tiny.filter = 64;
  tiny.smoothing = 0.0F;
  tiny.extra = 2;
  rig::ParameterStore store;
  auto net = model(tiny.yaml(), text_info(kVocab, kVocab), store);
  store.allocate(7);
  const rig::RunContext run;
  auto opt = adam.descriptor->make_optimizer(adam.params("{beta2: 0.98}"),
                                             rig::OptimizerContext{run, store});
  const auto make = [&](std::uint32_t seed, std::int64_t count) {
    Rows source, target;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::uint32_t s = seed * 1000U + static_cast<std::uint32_t>(i);
      const std::int64_t n = 2 + random_tokens(s, 1, 8)[0] % 4;  // 2..5 tokens
      std::vector<std::int64_t> tokens = random_tokens(s + 7U, n, kVocab);
      source.push_back(with_eos(tokens));
      std::reverse(tokens.begin(), tokens.end());
      target.push_back(with_eos(tokens));
    }
    return std::make_pair(source, target);
  };
  double first = 0.0, last = 0.0;
  // 500 steps: at 400 the greedy decode's exact rows sat at the threshold
  // (35 to 37 of 40 as the last bits of a product change); at 500, 39.
  for (int step = 0; step < 500; ++step) {
    const auto [source, target] = make(static_cast<std::uint32_t>(step + 1), 32);
    rig::Batch batch = text_batch(source, target);
    batch.rng = rig::RandomKey{7, static_cast<std::uint64_t>(step), 0, 0};
    store.zero_grad();
    rig::ModelOutput out = net->forward(batch, rig::Mode::train);
    out.loss.backward();
    opt->step(step < 40 ? 0.003 * (step + 1) / 40.0 : 0.003);
    if (step < 10) first += out.loss.item() / 10.0;
    if (step >= 490) last += out.loss.item() / 10.0;
  }
  EXPECT_LT(last, 0.1 * first) << "first " << first << " last " << last;

  const auto [source, target] = make(9999, 40);
  const rig::ModelOutput eval = net->forward(text_batch(source, target), rig::Mode::eval);
  EXPECT_GT(eval.metrics.at("teacher_forced_token_accuracy").value(), 0.95);
  for (const std::int64_t beam : {1, 3}) {
    Tiny decoding = tiny;
    decoding.beam = beam;
    rig::ParameterStore decoding_store;
    auto decoder = model(decoding.yaml(), text_info(kVocab, kVocab), decoding_store);
    decoding_store.allocate(7);
    decoding_store.values().copy_from(store.values());  // the trained weights, same layout
    decoding_store.publish_values();
    const Tensor out = decoder->infer(text_batch(source, {}));
    ASSERT_EQ(out.dim(), 2);
    ASSERT_EQ(out.size(0), 40);
    EXPECT_LE(out.size(1), 6 + 2);  // source width + extra_decode_length
    const std::vector<std::int64_t> ids = out.to_int_vector();
    int exact = 0;
    for (std::int64_t i = 0; i < 40; ++i) {
      const auto begin = ids.begin() + i * out.size(1);
      const std::vector<std::int64_t> row(begin, begin + out.size(1));
      const auto eos = std::find(row.begin(), row.end(), kEos);
      ASSERT_NE(eos, row.end()) << "row " << i << " has no EOS";
      EXPECT_TRUE(std::all_of(eos + 1, row.end(), [](std::int64_t t) { return t == kPad; }));
      const std::vector<std::int64_t> hypothesis(row.begin(), eos + 1);
      exact += hypothesis == target[static_cast<std::size_t>(i)] ? 1 : 0;
    }
    EXPECT_GE(exact, 36) << "beam " << beam;
  }
}

// ---- teacher-forced BLEU --------------------------------------------------------------
// The evaluator's "teacher_forced_bleu" (tests/unit/test_eval_teacher_forced_bleu.cpp
// checks its scoring on known strings) of the transformer's teacher-forced
// predictions: the argmax of the teacher-forced logits, kept up to the
// reference length and the first EOS.

// What the engine's evaluator reports for `model` on `data`, BLEU on.
rig::Metrics evaluate_with_bleu(rig::Model& model, rig::DataLayer& data) {
  const rig_test::LoadedPlugin local("communicator", "local");
  const std::unique_ptr<rig::Communicator> comm =
      local.descriptor->make_communicator(local.params(), rig::CommunicatorContext{});
  rig::engine::EvalOptions options;
  options.bleu = true;
  options.print_samples = 0;
  return rig::engine::evaluate(model, data, *comm, options).metrics;
}

TEST(TransformerTeacherForcing, KeepsTheReferenceLengthUpToTheFirstEos) {
  // Argmax rows: an EOS mid-row, none within the reference, EOS first.
  const Tensor argmax = ids_tensor({{5, 1, 7, 8}, {5, 6, 7, 8}, {1, 5, 6, 7}, {9, 9, 9, 1}});
  const Tensor lengths = Tensor::from_vector(std::vector<std::int64_t>{4, 2, 3, 4}, {4});
  const Tensor got = rig_transformer::teacher_forced_predictions(argmax, lengths, kEos, 0);
  EXPECT_EQ(got.shape(), argmax.shape());
  EXPECT_EQ(got.to_int_vector(),
            (std::vector<std::int64_t>{5, 1, 0, 0, 5, 6, 0, 0, 1, 0, 0, 0, 9, 9, 9, 1}));
  EXPECT_THROW(
      rig_transformer::teacher_forced_predictions(argmax.to(rig::DType::f32), lengths, kEos, 0),
      std::invalid_argument);
  EXPECT_THROW(rig_transformer::teacher_forced_predictions(argmax, lengths.slice(0, 0, 3), kEos, 0),
               std::invalid_argument);
}

TEST_F(PluginTransformer, EvaluatorScoresTheTeacherForcedArgmax) {
  const rig_test::LoadedPlugin synthetic("data_layer", "synthetic_text");
  const std::unique_ptr<rig::DataLayer> data = synthetic.data_layer(
      synthetic.params("{vocab_size: 12, source_length: 5, target_length: 6, num_samples: 10}"),
      rig::Mode::eval, 4, 0, 1, 3);
  const std::string tiny =
      "{encoder_params: {encoder_layers: 1, hidden_size: 16, num_heads: 2, filter_size: 32, "
      "attention_dropout: 0.0, relu_dropout: 0.0, layer_postprocess_dropout: 0.0}, "
      "decoder_params: {num_hidden_layers: 1, hidden_size: 16, num_heads: 2, filter_size: 32, "
      "attention_dropout: 0.0, relu_dropout: 0.0, layer_postprocess_dropout: 0.0, beam_size: 2, "
      "extra_decode_length: 2}}";
  rig::ParameterStore store;
  const rig::RunContext run;
  const std::unique_ptr<rig::Model> net = model(tiny, data->info(), store);
  store.allocate(11);
  // Half-trained on the eval pairs themselves: some teacher-forced tokens
  // right, some wrong, some EOS too early.
  const auto opt =
      adam.descriptor->make_optimizer(adam.params(), rig::OptimizerContext{run, store});
  for (int step = 0; step < 12; ++step) {
    data->start_epoch(0);
    while (auto batch = data->next_batch()) {
      store.zero_grad();
      net->forward(*batch, rig::Mode::train).loss.backward();
      opt->step(0.01);
    }
  }

  // The expectation: the argmax of the teacher-forced logits of a copy of
  // the network, cut here at the reference length and the first EOS, decoded
  // by the data layer; real BLEU: the data layer's decoding of infer().
  rig::ParameterStore copy_store;
  rig_transformer::Network copy(
      copy_store, rig_transformer::parse_params(params(tiny), data->info()), rig::DType::f32);
  copy_store.allocate(11);
  copy_store.values().copy_from(store.values());
  copy_store.publish_values();
  std::vector<std::string> forced, decoded, references;
  double correct = 0.0, tokens = 0.0;
  data->start_epoch(0);
  {
    rig::NoGradGuard no_grad;
    while (auto batch = data->next_batch()) {
      const Tensor& target = batch->at("target_ids");
      const rig_transformer::Encoded encoded =
          copy.encode(batch->at("source_ids"), batch->at("source_lengths"), false, {});
      const Tensor argmax = rig::ops::argmax(copy.decode(target, encoded, false, {}), -1);
      const std::vector<std::int64_t> best = argmax.to_int_vector();
      const std::vector<std::int64_t> lengths = batch->at("target_lengths").to_int_vector();
      const std::vector<std::int64_t> reference = target.to_int_vector();
      const std::int64_t width = target.size(1);
      Rows rows;
      for (std::size_t r = 0; r < lengths.size(); ++r) {
        std::vector<std::int64_t> row;
        for (std::int64_t t = 0; t < lengths[r]; ++t) {
          const auto at = r * static_cast<std::size_t>(width) + static_cast<std::size_t>(t);
          correct += best[at] == reference[at] ? 1.0 : 0.0;
          tokens += 1.0;
          if (!row.empty() && row.back() == kEos) continue;  // cut after the first EOS
          row.push_back(best[at]);
        }
        rows.push_back(row);
      }
      for (const auto& line : data->decode(*batch, ids_tensor(rows))) forced.push_back(line);
      for (const auto& line : data->decode(*batch, net->infer(*batch))) decoded.push_back(line);
      for (const auto& line : data->decode_targets(*batch)) references.push_back(line);
    }
  }
  ASSERT_EQ(forced.size(), 10U);
  const double accuracy = correct / tokens;
  ASSERT_GT(accuracy, 0.2) << "too little training for a meaningful test";
  ASSERT_LT(accuracy, 0.95) << "too much training for a meaningful test";
  const rig::bleu::Options bleu_options;
  const double expected_forced = rig::bleu::corpus_bleu(forced, references, bleu_options).score;
  const double expected_real = rig::bleu::corpus_bleu(decoded, references, bleu_options).score;

  // In the XML report (--gtest_output=xml): the numbers this run compared.
  RecordProperty("teacher_forced_token_accuracy", fmt::format("{:.4f}", accuracy));
  RecordProperty("teacher_forced_bleu", fmt::format("{:.4f}", expected_forced));
  RecordProperty("BLEU", fmt::format("{:.4f}", expected_real));
  const rig::Metrics got = evaluate_with_bleu(*net, *data);
  EXPECT_DOUBLE_EQ(got.at("teacher_forced_bleu").value(), expected_forced);
  EXPECT_DOUBLE_EQ(got.at("BLEU").value(), expected_real);
  EXPECT_NEAR(got.at("teacher_forced_token_accuracy").value(), accuracy, 1e-12);
  EXPECT_GT(expected_forced, 0.0);
  EXPECT_LT(expected_forced, 100.0);
}

}  // namespace
