// Composite blocks built from rig::nn layers: a pre-norm Transformer encoder
// layer, a pre-norm decoder layer (causal self-attention with an optional
// decode cache, cross-attention, feed-forward) and a ResNet basic block. The
// layer tests check them against PyTorch; tools/bench times the same blocks.
#pragma once

#include <cstdint>
#include <string>

#include "rig/nn.hpp"
#include "rig/ops.hpp"

namespace rig_test {

// x + Dropout(Attention(LN(x))), then h + Dropout(FFN(LN(h))), as
// torch.nn.TransformerEncoderLayer(norm_first=True).
class EncoderLayer : public rig::nn::Module {
 public:
  EncoderLayer(rig::ParameterStore& store, std::string name, std::int64_t model_dim,
               std::int64_t heads, std::int64_t hidden, float dropout = 0.0F,
               rig::ops::Activation activation = rig::ops::Activation::relu)
      : Module(store, std::move(name)),
        attention_norm_(store, child("attention_norm"), model_dim),
        attention_(store, child("attention"), model_dim, heads, dropout),
        attention_dropout_(child("attention_dropout"), dropout),
        ffn_norm_(store, child("ffn_norm"), model_dim),
        ffn_(store, child("ffn"), model_dim, hidden, activation, dropout),
        ffn_dropout_(child("ffn_dropout"), dropout) {}

  // mask: u8 [B, 1, 1, T] key padding (or undefined).
  rig::Tensor forward(const rig::Tensor& x, const rig::Tensor& mask, bool training,
                      const rig::RandomKey& key) const {
    namespace ops = rig::ops;
    const rig::Tensor n = attention_norm_.forward(x);
    rig::nn::MultiHeadAttention::Options options;
    options.mask = mask;
    options.training = training;
    options.key = key;
    const rig::Tensor h =
        ops::add(x, attention_dropout_.forward(attention_.forward(n, n, options), training, key));
    const rig::Tensor f = ffn_.forward(ffn_norm_.forward(h), training, key);
    return ops::add(h, ffn_dropout_.forward(f, training, key));
  }

 private:
  rig::nn::LayerNorm attention_norm_;
  rig::nn::MultiHeadAttention attention_;
  rig::nn::Dropout attention_dropout_;
  rig::nn::LayerNorm ffn_norm_;
  rig::nn::FeedForward ffn_;
  rig::nn::Dropout ffn_dropout_;
};

// Causal self-attention, cross-attention over `memory`, feed-forward; each
// pre-norm with a residual, as torch.nn.TransformerDecoderLayer(norm_first=True).
class DecoderLayer : public rig::nn::Module {
 public:
  DecoderLayer(rig::ParameterStore& store, std::string name, std::int64_t model_dim,
               std::int64_t heads, std::int64_t hidden, float dropout = 0.0F,
               rig::ops::Activation activation = rig::ops::Activation::relu)
      : Module(store, std::move(name)),
        self_attention_norm_(store, child("self_attention_norm"), model_dim),
        self_attention_(store, child("self_attention"), model_dim, heads, dropout),
        self_attention_dropout_(child("self_attention_dropout"), dropout),
        cross_attention_norm_(store, child("cross_attention_norm"), model_dim),
        cross_attention_(store, child("cross_attention"), model_dim, heads, dropout),
        cross_attention_dropout_(child("cross_attention_dropout"), dropout),
        ffn_norm_(store, child("ffn_norm"), model_dim),
        ffn_(store, child("ffn"), model_dim, hidden, activation, dropout),
        ffn_dropout_(child("ffn_dropout"), dropout) {}

  // memory_mask: u8 [B, 1, 1, S] (or undefined). With `cache`, x holds only
  // the new target positions and the self-attention sees the cached prefix.
  rig::Tensor forward(const rig::Tensor& x, const rig::Tensor& memory,
                      const rig::Tensor& memory_mask, bool training, const rig::RandomKey& key,
                      rig::nn::KvCache* cache = nullptr) const {
    namespace ops = rig::ops;
    rig::nn::MultiHeadAttention::Options self_options;
    self_options.causal = true;
    self_options.training = training;
    self_options.key = key;
    self_options.cache = cache;
    const rig::Tensor n = self_attention_norm_.forward(x);
    rig::Tensor h = ops::add(x, self_attention_dropout_.forward(
                                    self_attention_.forward(n, n, self_options), training, key));
    rig::nn::MultiHeadAttention::Options cross_options;
    cross_options.mask = memory_mask;
    cross_options.training = training;
    cross_options.key = key;
    const rig::Tensor c =
        cross_attention_.forward(cross_attention_norm_.forward(h), memory, cross_options);
    h = ops::add(h, cross_attention_dropout_.forward(c, training, key));
    const rig::Tensor f = ffn_.forward(ffn_norm_.forward(h), training, key);
    return ops::add(h, ffn_dropout_.forward(f, training, key));
  }

 private:
  rig::nn::LayerNorm self_attention_norm_;
  rig::nn::MultiHeadAttention self_attention_;
  rig::nn::Dropout self_attention_dropout_;
  rig::nn::LayerNorm cross_attention_norm_;
  rig::nn::MultiHeadAttention cross_attention_;
  rig::nn::Dropout cross_attention_dropout_;
  rig::nn::LayerNorm ffn_norm_;
  rig::nn::FeedForward ffn_;
  rig::nn::Dropout ffn_dropout_;
};

// relu(bn2(conv2(relu(bn1(conv1(x))))) + x): torchvision's BasicBlock without downsampling.
class BasicBlock : public rig::nn::Module {
 public:
  BasicBlock(rig::ParameterStore& store, std::string name, std::int64_t channels)
      : Module(store, std::move(name)),
        conv1_(store, child("conv1"), channels, channels, 3, padding_one()),
        bn1_(store, child("bn1"), channels),
        conv2_(store, child("conv2"), channels, channels, 3, padding_one()),
        bn2_(store, child("bn2"), channels) {}

  rig::Tensor forward(const rig::Tensor& x, bool training) const {
    namespace ops = rig::ops;
    const rig::Tensor h = ops::relu(bn1_.forward(conv1_.forward(x), training));
    return ops::relu(ops::add(bn2_.forward(conv2_.forward(h), training), x));
  }

 private:
  static rig::ops::Conv2dOptions padding_one() {
    rig::ops::Conv2dOptions options;
    options.pad_h = options.pad_w = 1;
    return options;
  }

  rig::nn::Conv2d conv1_;
  rig::nn::BatchNorm2d bn1_;
  rig::nn::Conv2d conv2_;
  rig::nn::BatchNorm2d bn2_;
};

}  // namespace rig_test
