// OpenSeq2Seq's Transformer (TransformerEncoder + TransformerDecoder, as in
// its transformer-base config): a shared source / target / softmax embedding,
// pre-norm encoder and decoder stacks with bias-free attention projections,
// sinusoidal positions, and incremental decoding with key/value caches.
// Parameter names follow OpenSeq2Seq's variable scopes:
//   embedding_and_softmax.weights                      [V, d]
//   encoder.layer_<n>.self_attention.layer_norm.{weight,bias}
//   encoder.layer_<n>.self_attention.attention.{query,key,value,output}.weight
//   encoder.layer_<n>.ffn.layer_norm.{weight,bias}
//   encoder.layer_<n>.ffn.{filter_layer,output_layer}.{weight,bias}
//   encoder.output_normalization.{weight,bias}
//   decoder.layer_<n>.{self_attention,encdec_attention,ffn}.(as above)
//   decoder.output_normalization.{weight,bias}
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "params.hpp"
#include "rig/nn.hpp"
#include "rig/parameter_store.hpp"
#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig_transformer {

// Positions 0..length-1 as OpenSeq2Seq's utils.get_position_encoding: the
// first half of each row sin(p / 10000^(i / (d/2 - 1))), the second half cos.
// f32 [length, hidden_size].
rig::Tensor position_encoding(std::int64_t length, std::int64_t hidden_size,
                              rig::Device device = rig::Device::cpu());

// The encoder's output and what decoding needs with it.
struct Encoded {
  rig::Tensor output;       // [B, S, d], compute dtype
  rig::Tensor key_mask;     // u8 [B, 1, 1, S]: 1 at real source tokens
  rig::Tensor key_lengths;  // i32 [B]: the source lengths key_mask was made from
};

// The per-hypothesis state of incremental decoding: each decoder layer's
// self-attention keys/values so far, and its encoder-decoder keys/values
// (projected once per source sentence, then copied per hypothesis).
struct DecodeState {
  std::vector<rig::nn::KvCache> self_attention;
  std::vector<rig::nn::KvCache> encdec_attention;
  rig::Tensor key_mask;        // u8 [N, 1, 1, S]
  rig::Tensor positions;       // [max_length, d] position encodings, compute dtype
  rig::Tensor reorder_buffer;  // the self-attention caches' spare (KvCache::reorder)
  std::int64_t steps = 0;      // positions decoded so far
};

// LayerNorm -> sublayer -> dropout -> residual (OpenSeq2Seq's
// PrePostProcessingWrapper), one per attention / FFN sublayer.
class FeedForward {
 public:
  FeedForward(rig::ParameterStore& store, const std::string& name, std::int64_t hidden,
              std::int64_t filter, float relu_dropout);
  // relu(x W1 + b1) -> dropout -> W2 + b2
  rig::Tensor forward(const rig::Tensor& x, bool training, const rig::RandomKey& key) const;

 private:
  rig::nn::Linear filter_layer_, output_layer_;
  rig::nn::Dropout relu_dropout_;
};

class EncoderLayer {
 public:
  EncoderLayer(rig::ParameterStore& store, const std::string& name, const StackParams& p);
  // keys: the source's key_mask and key_lengths. ffn_mask: [B, S, 1] in the
  // compute dtype (1 = real token) to zero the FFN output at padding as
  // OpenSeq2Seq's remove_padding does, or undefined.
  rig::Tensor forward(const rig::Tensor& x, const Encoded& keys, const rig::Tensor& ffn_mask,
                      bool training, const rig::RandomKey& key) const;

 private:
  rig::nn::LayerNorm attention_norm_;
  rig::nn::MultiHeadAttention attention_;
  rig::nn::Dropout attention_dropout_;
  rig::nn::LayerNorm ffn_norm_;
  FeedForward ffn_;
  rig::nn::Dropout ffn_dropout_;
};

class DecoderLayer {
 public:
  DecoderLayer(rig::ParameterStore& store, const std::string& name, const StackParams& p);
  // Training / scoring: x [B, T, d] with causal self-attention over x.
  rig::Tensor forward(const rig::Tensor& x, const Encoded& encoded, bool training,
                      const rig::RandomKey& key) const;
  // One decode step: x [N, 1, d]; appends to self_cache, attends to encdec (precomputed).
  rig::Tensor step(const rig::Tensor& x, rig::nn::KvCache& self_cache,
                   const rig::nn::KvCache& encdec, const rig::Tensor& key_mask) const;
  rig::nn::KvCache project_encoder_output(const rig::Tensor& encoder_output) const;

 private:
  rig::nn::LayerNorm self_norm_;
  rig::nn::MultiHeadAttention self_attention_;
  rig::nn::Dropout self_dropout_;
  rig::nn::LayerNorm encdec_norm_;
  rig::nn::MultiHeadAttention encdec_attention_;
  rig::nn::Dropout encdec_dropout_;
  rig::nn::LayerNorm ffn_norm_;
  FeedForward ffn_;
  rig::nn::Dropout ffn_dropout_;
};

class Network {
 public:
  Network(rig::ParameterStore& store, const Params& params, rig::DType dtype);

  // source_ids i64 [B, S], source_lengths i64 [B].
  Encoded encode(const rig::Tensor& source_ids, const rig::Tensor& source_lengths, bool training,
                 const rig::RandomKey& key) const;
  // Teacher-forced logits [B, T, V] (compute dtype) for target_ids i64 [B, T]:
  // position t sees the targets before t (shifted right, a zero vector first).
  rig::Tensor decode(const rig::Tensor& target_ids, const Encoded& encoded, bool training,
                     const rig::RandomKey& key) const;

  // Incremental decoding for N = B x copies hypotheses: hypothesis i decodes
  // source row rows[i] (i64 [N]). The self-attention caches are allocated
  // once for max_length steps, so a decode takes no new memory per step
  // (more steps still work: the caches then double as needed, as with 0).
  DecodeState start_decoding(const Encoded& encoded, const rig::Tensor& rows,
                             std::int64_t max_length = 0) const;
  // The logits [N, V] (f32) of the next token after `ids` (i64 [N], the tokens
  // at position state.steps; the pad id at position 0, whose embedding is the
  // zero vector the teacher-forced pass starts with). Appends to the caches.
  rig::Tensor decode_step(const rig::Tensor& ids, DecodeState& state) const;
  // Makes hypothesis index[j] the new hypothesis j (i64 [N]) in the
  // self-attention caches, in place (no allocation once warm). Every index[j]
  // must decode the same source row as j (beam search reorders within a
  // sentence's beams), so the encoder-decoder keys/values stay as they are.
  static void reorder(DecodeState& state, const rig::Tensor& index);

  std::int64_t vocab_size() const { return vocab_size_; }
  std::int64_t hidden_size() const { return hidden_size_; }

 private:
  // The scaled embeddings of ids [..., T] with PAD rows zeroed: [..., T, d].
  rig::Tensor embed(const rig::Tensor& ids) const;
  rig::Tensor logits(const rig::Tensor& x) const;

  std::int64_t vocab_size_;
  std::int64_t hidden_size_;
  std::int64_t pad_id_;
  bool remove_padding_;
  bool recompute_;  // training's layers through rig::nn::recompute
  rig::DType dtype_;
  rig::Tensor embedding_;  // [V, d]
  rig::nn::Dropout encoder_input_dropout_;
  std::vector<EncoderLayer> encoder_layers_;
  rig::nn::LayerNorm encoder_norm_;
  rig::nn::Dropout decoder_input_dropout_;
  std::vector<DecoderLayer> decoder_layers_;
  rig::nn::LayerNorm decoder_norm_;
};

}  // namespace rig_transformer
