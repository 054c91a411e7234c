// rig_bench transformer_train / transformer_beam: the `transformer` model
// plugin (OpenSeq2Seq's Transformer) as rig runs it, loaded from the build
// tree: d_model 256, 4 heads, ffn 1024, 3 encoder + 3 decoder layers, a
// shared 8192-token vocabulary, dropout 0.1 everywhere (attention, relu,
// layer post-process: transformer-base's), fp32, on a batch of 32 sentence
// pairs of 32 tokens (31 random tokens, then EOS; no padding).
//   transformer_train  one whole training step: zero the gradients, forward
//                      to the label-smoothed (0.1) loss (the model's token
//                      accuracy is an eval metric), backward, and a step of the
//                      `adam` plugin (transformer-base's betas 0.9 / 0.997,
//                      epsilon 1e-9); reported in target tokens per second.
//   transformer_beam   Model::infer: encoding and beam search (beam 4, alpha
//                      0.6) with extra_decode_length 0, so at most 32 decoder
//                      steps; reported in sentences per second. With random
//                      weights no sentence's beams settle early, so the search
//                      runs all 32 steps: output_length (the longest
//                      hypothesis) is 32 only then.
// tools/bench/torch_layers.py runs the same workloads in PyTorch
// (torch_transformer.py).
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "bench_plugin.hpp"
#include "bench_util.hpp"
#include "rig/plugin.hpp"

namespace rig_bench {

namespace {

// kModel and kFilter repeat kModelParams' hidden_size and filter_size (for the FLOP count).
constexpr std::int64_t kVocab = 8192, kSentences = 32, kLength = 32, kModel = 256, kFilter = 1024;

constexpr const char* kModelParams = R"({
  encoder_params: {encoder_layers: 3, hidden_size: 256, num_heads: 4, filter_size: 1024,
                   attention_dropout: 0.1, relu_dropout: 0.1, layer_postprocess_dropout: 0.1},
  decoder_params: {num_hidden_layers: 3, hidden_size: 256, num_heads: 4, filter_size: 1024,
                   attention_dropout: 0.1, relu_dropout: 0.1, layer_postprocess_dropout: 0.1,
                   beam_size: 4, alpha: 0.6, extra_decode_length: 0},
  loss_params: {label_smoothing: 0.1}})";

// The text2text data layer's info() for a shared vocabulary (the contract's special ids).
YAML::Node text2text_info() {
  YAML::Node info;
  info["task"] = "text2text";
  info["src_vocab_size"] = kVocab;
  info["tgt_vocab_size"] = kVocab;
  info["pad_id"] = 0;
  info["eos_id"] = 1;
  info["go_id"] = 2;
  info["unk_id"] = 3;
  return info;
}

// ids i64 [32, 32]: 31 tokens uniform in [4, V), then EOS; and lengths i64 [32] (all 32).
void put_sentences(rig::Batch& batch, const std::string& side, std::uint32_t purpose) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(kSentences * kLength));
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const bool last = static_cast<std::int64_t>(i) % kLength == kLength - 1;
    ids[i] = last ? 1
                  : 4 + static_cast<std::int64_t>(rig::random_bits({1, 0, 0, purpose}, i) %
                                                  static_cast<std::uint32_t>(kVocab - 4));
  }
  batch.tensors[side + "_ids"] = rig::Tensor::from_vector(ids, {kSentences, kLength});
  batch.tensors[side + "_lengths"] =
      rig::Tensor::from_vector(std::vector<std::int64_t>(kSentences, kLength), {kSentences});
}

// The model of `mode` with its parameters allocated; `transformer` must outlive it.
std::unique_ptr<rig::Model> make_model(const Plugin& transformer, rig::Mode mode,
                                       rig::ParameterStore& store) {
  rig::RunContext run;
  run.mode = mode;
  std::unique_ptr<rig::Model> model = transformer.descriptor->make_model(
      transformer.params(kModelParams), rig::ModelContext{run, text2text_info(), store});
  store.allocate(1);
  return model;
}

}  // namespace

void bench_transformer_train(const Settings& s) {
  const Plugin transformer("model", "transformer");  // outlives the objects it makes
  const Plugin adam("optimizer", "adam");
  rig::ParameterStore store;
  const std::unique_ptr<rig::Model> model = make_model(transformer, rig::Mode::train, store);
  const std::unique_ptr<rig::Optimizer> optimizer =
      adam.descriptor->make_optimizer(adam.params("{beta1: 0.9, beta2: 0.997, epsilon: 1.0e-9}"),
                                      rig::OptimizerContext{rig::RunContext{}, store});
  rig::Batch batch;
  put_sentences(batch, "source", 8);
  put_sentences(batch, "target", 9);
  batch.num_objects = kSentences * kLength;

  const long rss_before = max_rss_bytes();
  const std::size_t baseline = rig::allocator_stats().current_bytes;
  rig::reset_peak_bytes();
  double loss = 0.0;
  const Timing t = time_steps(s, [&](int i) {
    batch.rng = {0, static_cast<std::uint64_t>(i), 0, 0};  // fresh dropout masks each step
    store.zero_grad();
    const rig::ModelOutput out = model->forward(batch, rig::Mode::train);
    out.loss.backward();
    optimizer->step(1e-4);
    loss = out.loss.item();
  });
  // GEMM FLOPs of the step: three encoder + decoder layer pairs and the
  // output projection forward, twice that backward (the embedding is
  // trained, so even the first layer's input gradient is computed).
  const double forward_flops =
      3 * transformer_forward_gemm_flops(kSentences, kLength, kLength, kModel, kFilter) +
      2.0 * kSentences * kLength * kModel * kVocab;
  char extra[256];
  std::snprintf(extra, sizeof extra,
                " tokens_per_s=%.1f rss_peak_bytes=%ld parameters=%lld last_loss=%.4f"
                " gemm_flops=%.0f",
                1e3 * static_cast<double>(batch.num_objects) / t.median_ms, max_rss_bytes(),
                static_cast<long long>(store.numel()), loss, 3 * forward_flops);
  report("transformer_train", t, rig::allocator_stats(), baseline, rss_before, extra);
}

void bench_transformer_beam(const Settings& s) {
  const Plugin transformer("model", "transformer");
  rig::ParameterStore store;
  const std::unique_ptr<rig::Model> model = make_model(transformer, rig::Mode::infer, store);
  rig::Batch batch;
  put_sentences(batch, "source", 8);
  batch.num_objects = kSentences * kLength;

  const long rss_before = max_rss_bytes();
  const std::size_t baseline = rig::allocator_stats().current_bytes;
  rig::reset_peak_bytes();
  std::int64_t output_length = 0;
  const Timing t = time_steps(s, [&](int) { output_length = model->infer(batch).size(1); });
  char extra[192];
  std::snprintf(extra, sizeof extra,
                " sentences_per_s=%.2f rss_peak_bytes=%ld parameters=%lld output_length=%lld",
                1e3 * static_cast<double>(kSentences) / t.median_ms, max_rss_bytes(),
                static_cast<long long>(store.numel()), static_cast<long long>(output_length));
  report("transformer_beam", t, rig::allocator_stats(), baseline, rss_before, extra);
}

}  // namespace rig_bench
