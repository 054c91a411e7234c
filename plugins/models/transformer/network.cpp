#include "network.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/ops.hpp"

namespace rig_transformer {

namespace ops = rig::ops;
using rig::Tensor;

namespace {

constexpr float kLayerNormEps = 1e-6F;  // OpenSeq2Seq's LayerNormalization

// tf.layers.Dense's default kernel initialiser (glorot uniform), biases 0.
rig::Initializer dense_init() {
  return rig::Initializer::xavier_uniform(1.0F);
}

std::string layer_name(const std::string& stack, std::size_t n) {
  return fmt::format("{}.layer_{}", stack, n);
}

// u8 [B, 1, 1, S]: 1 where s < lengths[b], computed on the lengths' device.
Tensor key_padding_mask(const Tensor& lengths, std::int64_t source_length) {
  const Tensor positions =
      Tensor::arange(source_length, rig::DType::i64, lengths.device()).reshape({1, 1, 1, -1});
  return ops::less(positions, lengths.reshape({-1, 1, 1, 1}));
}

}  // namespace

Tensor position_encoding(std::int64_t length, std::int64_t hidden_size, rig::Device device) {
  const std::int64_t timescales = hidden_size / 2;
  // In float32, as TensorFlow computes it.
  const auto increment = static_cast<float>(std::log(1.0e4 / 1.0)) /
                         static_cast<float>(std::max<std::int64_t>(timescales - 1, 1));
  std::vector<float> out(static_cast<std::size_t>(length * hidden_size));
  for (std::int64_t p = 0; p < length; ++p) {
    for (std::int64_t i = 0; i < timescales; ++i) {
      const float inv = std::exp(static_cast<float>(i) * -increment);
      const float t = static_cast<float>(p) * inv;
      out[static_cast<std::size_t>(p * hidden_size + i)] = std::sin(t);
      out[static_cast<std::size_t>(p * hidden_size + timescales + i)] = std::cos(t);
    }
  }
  return Tensor::from_vector(out, {length, hidden_size}, device);
}

// ---- layers ------------------------------------------------------------------

FeedForward::FeedForward(rig::ParameterStore& store, const std::string& name, std::int64_t hidden,
                         std::int64_t filter, float relu_dropout)
    : filter_layer_(store, name + ".filter_layer", hidden, filter, true, dense_init()),
      output_layer_(store, name + ".output_layer", filter, hidden, true, dense_init()),
      relu_dropout_(name + ".relu_dropout", relu_dropout) {}

Tensor FeedForward::forward(const Tensor& x, bool training, const rig::RandomKey& key) const {
  // relu_dropout fused into the filter layer: the same mask, one kept tensor,
  // its 1 / (1 - p) applied by the output layer's products (unscaled), so a
  // 16-bit filter layer's bias and relu stay in its product's epilogue (and
  // on the GPU relu's backward in the output layer's: ops::relu_feed_forward).
  return ops::relu_feed_forward(
      x, filter_layer_.weight(), filter_layer_.bias(), output_layer_.weight(), output_layer_.bias(),
      relu_dropout_.as_output_dropout(training, key, false), relu_dropout_.keep_scale(training));
}

EncoderLayer::EncoderLayer(rig::ParameterStore& store, const std::string& name,
                           const StackParams& p)
    : attention_norm_(store, name + ".self_attention.layer_norm", p.hidden_size, kLayerNormEps),
      attention_(store, name + ".self_attention.attention", p.hidden_size, p.num_heads,
                 p.attention_dropout, false, dense_init()),
      attention_dropout_(name + ".self_attention.dropout", p.layer_postprocess_dropout),
      ffn_norm_(store, name + ".ffn.layer_norm", p.hidden_size, kLayerNormEps),
      ffn_(store, name + ".ffn", p.hidden_size, p.filter_size, p.relu_dropout),
      ffn_dropout_(name + ".ffn.dropout", p.layer_postprocess_dropout) {}

Tensor EncoderLayer::forward(const Tensor& x, const Encoded& keys, const Tensor& ffn_mask,
                             bool training, const rig::RandomKey& key) const {
  rig::nn::MultiHeadAttention::Options options;
  options.mask = keys.key_mask;
  options.key_lengths = keys.key_lengths;
  options.training = training;
  options.key = key;
  const Tensor normed = attention_norm_.forward(x);
  Tensor y = attention_.forward(normed, normed, options);
  Tensor h = attention_dropout_.forward_added_to(x, y, training, key);
  y = ffn_.forward(ffn_norm_.forward(h), training, key);
  // The padding mask on the feed-forward output, in the dropout-add's pass.
  return ffn_dropout_.forward_added_to(h, y, training, key, ffn_mask);
}

DecoderLayer::DecoderLayer(rig::ParameterStore& store, const std::string& name,
                           const StackParams& p)
    : self_norm_(store, name + ".self_attention.layer_norm", p.hidden_size, kLayerNormEps),
      self_attention_(store, name + ".self_attention.attention", p.hidden_size, p.num_heads,
                      p.attention_dropout, false, dense_init()),
      self_dropout_(name + ".self_attention.dropout", p.layer_postprocess_dropout),
      encdec_norm_(store, name + ".encdec_attention.layer_norm", p.hidden_size, kLayerNormEps),
      encdec_attention_(store, name + ".encdec_attention.attention", p.hidden_size, p.num_heads,
                        p.attention_dropout, false, dense_init()),
      encdec_dropout_(name + ".encdec_attention.dropout", p.layer_postprocess_dropout),
      ffn_norm_(store, name + ".ffn.layer_norm", p.hidden_size, kLayerNormEps),
      ffn_(store, name + ".ffn", p.hidden_size, p.filter_size, p.relu_dropout),
      ffn_dropout_(name + ".ffn.dropout", p.layer_postprocess_dropout) {}

Tensor DecoderLayer::forward(const Tensor& x, const Encoded& encoded, bool training,
                             const rig::RandomKey& key) const {
  rig::nn::MultiHeadAttention::Options self;
  self.causal = true;
  self.training = training;
  self.key = key;
  const Tensor normed = self_norm_.forward(x);
  Tensor h = self_dropout_.forward_added_to(x, self_attention_.forward(normed, normed, self),
                                            training, key);
  rig::nn::MultiHeadAttention::Options cross;
  cross.mask = encoded.key_mask;
  cross.key_lengths = encoded.key_lengths;
  cross.training = training;
  cross.key = key;
  h = encdec_dropout_.forward_added_to(
      h, encdec_attention_.forward(encdec_norm_.forward(h), encoded.output, cross), training, key);
  return ffn_dropout_.forward_added_to(h, ffn_.forward(ffn_norm_.forward(h), training, key),
                                       training, key);
}

Tensor DecoderLayer::step(const Tensor& x, rig::nn::KvCache& self_cache,
                          const rig::nn::KvCache& encdec, const Tensor& key_mask) const {
  const rig::RandomKey no_key;
  rig::nn::MultiHeadAttention::Options self;
  self.cache = &self_cache;  // one query position: it sees the whole cached prefix
  const Tensor normed = self_norm_.forward(x);
  Tensor h = ops::add(x, self_attention_.forward(normed, normed, self));
  rig::nn::MultiHeadAttention::Options cross;
  cross.mask = key_mask;
  cross.memory_kv = &encdec;
  h = ops::add(h, encdec_attention_.forward(encdec_norm_.forward(h), Tensor(), cross));
  return ops::add(h, ffn_.forward(ffn_norm_.forward(h), false, no_key));
}

rig::nn::KvCache DecoderLayer::project_encoder_output(const Tensor& encoder_output) const {
  return encdec_attention_.project_memory(encoder_output);
}

// ---- the network ------------------------------------------------------------------

Network::Network(rig::ParameterStore& store, const Params& params, rig::DType dtype)
    : vocab_size_(params.vocab_size),
      hidden_size_(params.encoder.hidden_size),
      pad_id_(params.pad_id),
      remove_padding_(params.remove_padding),
      recompute_(params.recompute_activations),
      dtype_(dtype),
      embedding_(store.declare(
          "embedding_and_softmax.weights", {params.vocab_size, params.encoder.hidden_size},
          rig::Initializer::normal(
              0.0F, static_cast<float>(
                        1.0 / std::sqrt(static_cast<double>(params.encoder.hidden_size)))))),
      encoder_input_dropout_("encoder.input_dropout", params.encoder.layer_postprocess_dropout),
      encoder_norm_(store, "encoder.output_normalization", hidden_size_, kLayerNormEps),
      decoder_input_dropout_("decoder.input_dropout", params.decoder.layer_postprocess_dropout),
      decoder_norm_(store, "decoder.output_normalization", hidden_size_, kLayerNormEps) {
  // Declared in the order: embedding, encoder norm, decoder norm, then the
  // layers (the declaration order is the flat buffer's layout, nothing more).
  for (std::int64_t n = 0; n < params.encoder.layers; ++n) {
    encoder_layers_.emplace_back(store, layer_name("encoder", static_cast<std::size_t>(n)),
                                 params.encoder);
  }
  for (std::int64_t n = 0; n < params.decoder.layers; ++n) {
    decoder_layers_.emplace_back(store, layer_name("decoder", static_cast<std::size_t>(n)),
                                 params.decoder);
  }
}

Tensor Network::embed(const Tensor& ids) const {
  const Tensor rows = ops::embedding(embedding_, ids);
  const Tensor keep = ops::not_equal_scalar(ids, static_cast<float>(pad_id_)).to(dtype_);
  return ops::mul(ops::mul_scalar(rows, std::sqrt(static_cast<float>(hidden_size_))),
                  keep.unsqueeze(-1));
}

Tensor Network::logits(const Tensor& x) const {
  return ops::linear(x, embedding_);  // x W^T with the shared embedding
}

Encoded Network::encode(const Tensor& source_ids, const Tensor& source_lengths, bool training,
                        const rig::RandomKey& key) const {
  const std::int64_t length = source_ids.size(1);
  Encoded encoded;
  encoded.key_mask = key_padding_mask(source_lengths, length);
  // i32, as fused attention reads them: converted once, not by every layer.
  encoded.key_lengths = source_lengths.to(rig::DType::i32);
  Tensor ffn_mask;
  if (remove_padding_) {
    ffn_mask = encoded.key_mask.reshape({source_ids.size(0), length, 1}).to(dtype_);
  }
  Tensor x = ops::add(embed(source_ids),
                      position_encoding(length, hidden_size_, source_ids.device()).to(dtype_));
  x = encoder_input_dropout_.forward(x, training, key);
  for (const EncoderLayer& layer : encoder_layers_) {
    if (recompute_ && training) {
      // Only x is kept; the masks are captured (by value: the backward pass
      // runs after this function has returned).
      x = rig::nn::recompute(
          [&layer, encoded, ffn_mask, key](const rig::TensorList& in) {
            return layer.forward(in[0], encoded, ffn_mask, true, key);
          },
          {x});
    } else {
      x = layer.forward(x, encoded, ffn_mask, training, key);
    }
  }
  encoded.output = encoder_norm_.forward(x);
  return encoded;
}

Tensor Network::decode(const Tensor& target_ids, const Encoded& encoded, bool training,
                       const rig::RandomKey& key) const {
  const std::int64_t batch = target_ids.size(0);
  const std::int64_t length = target_ids.size(1);
  // Shift right: a zero vector first, the last target dropped.
  const Tensor embedded = embed(target_ids);
  Tensor x = ops::concat({Tensor::zeros({batch, 1, hidden_size_}, dtype_, target_ids.device()),
                          embedded.slice(1, 0, length - 1)},
                         1);
  x = ops::add(x, position_encoding(length, hidden_size_, target_ids.device()).to(dtype_));
  x = decoder_input_dropout_.forward(x, training, key);
  Encoded masks = encoded;  // what the recomputed layers capture: the masks, not the output
  masks.output = Tensor();
  for (const DecoderLayer& layer : decoder_layers_) {
    if (recompute_ && training) {
      // x and the encoder's output are kept (the latter once for every layer).
      x = rig::nn::recompute(
          [&layer, masks, key](const rig::TensorList& in) {
            Encoded with_output = masks;
            with_output.output = in[1];
            return layer.forward(in[0], with_output, true, key);
          },
          {x, encoded.output});
    } else {
      x = layer.forward(x, encoded, training, key);
    }
  }
  return logits(decoder_norm_.forward(x));
}

DecodeState Network::start_decoding(const Encoded& encoded, const Tensor& rows,
                                    std::int64_t max_length) const {
  DecodeState state;
  state.self_attention.resize(decoder_layers_.size());
  for (rig::nn::KvCache& cache : state.self_attention) cache.reserve(max_length);
  state.positions = position_encoding(max_length, hidden_size_, rows.device()).to(dtype_);
  for (const DecoderLayer& layer : decoder_layers_) {
    const rig::nn::KvCache kv = layer.project_encoder_output(encoded.output);  // once per source
    state.encdec_attention.push_back(
        {ops::index_select(kv.keys, 0, rows), ops::index_select(kv.values, 0, rows)});
  }
  state.key_mask = ops::index_select(encoded.key_mask, 0, rows);
  return state;
}

Tensor Network::decode_step(const Tensor& ids, DecodeState& state) const {
  const std::int64_t n = ids.size(0);
  Tensor x = embed(ids.reshape({n, 1}));
  // Past max_length: the encodings up to this step, computed again (the same values).
  const Tensor positions =
      state.steps < state.positions.size(0)
          ? state.positions
          : position_encoding(state.steps + 1, hidden_size_, ids.device()).to(dtype_);
  x = ops::add(x, positions.slice(0, state.steps, state.steps + 1));
  for (std::size_t l = 0; l < decoder_layers_.size(); ++l) {
    x = decoder_layers_[l].step(x, state.self_attention[l], state.encdec_attention[l],
                                state.key_mask);
  }
  ++state.steps;
  return logits(decoder_norm_.forward(x)).reshape({n, vocab_size_}).to(rig::DType::f32);
}

void Network::reorder(DecodeState& state, const Tensor& index) {
  if (!state.key_mask.defined() || index.dim() != 1 || index.size(0) != state.key_mask.size(0)) {
    throw std::invalid_argument(fmt::format(
        "transformer: reorder index {} must be [{}], one entry per hypothesis",
        to_string(index.shape()), state.key_mask.defined() ? state.key_mask.size(0) : 0));
  }
  for (rig::nn::KvCache& cache : state.self_attention) {
    if (cache.keys.defined()) cache.reorder(index, state.reorder_buffer);
  }
}

}  // namespace rig_transformer
