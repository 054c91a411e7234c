// Multi-head attention: four projections around ops::scaled_dot_product_attention
// (self-attention's first three as one product, cross-attention's k and v).
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

namespace {

std::int64_t checked_heads(const std::string& name, std::int64_t model_dim,
                           std::int64_t num_heads) {
  if (model_dim < 1 || num_heads < 1 || model_dim % num_heads != 0) {
    throw std::invalid_argument(fmt::format(
        "MultiHeadAttention '{}': model_dim {} must be a positive multiple of num_heads {}", name,
        model_dim, num_heads));
  }
  return num_heads;
}

// [B, T, H * D] -> [B, H, T, D] (a view).
Tensor split_heads(const Tensor& x, std::int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

// [B, H, T, D] -> [B, T, H * D].
Tensor merge_heads(const Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace

MultiHeadAttention::MultiHeadAttention(ParameterStore& store, std::string name,
                                       std::int64_t model_dim, std::int64_t num_heads,
                                       float attention_dropout, bool bias,
                                       std::optional<Initializer> init)
    : Module(store, std::move(name)),
      num_heads_(checked_heads(this->name(), model_dim, num_heads)),
      attention_dropout_(attention_dropout),
      dropout_name_(child("dropout")),
      query_(store, child("query"), model_dim, model_dim, bias, init),
      key_(store, child("key"), model_dim, model_dim, bias, init),
      value_(store, child("value"), model_dim, model_dim, bias, init),
      output_(store, child("output"), model_dim, model_dim, bias, init) {
  if (!(attention_dropout >= 0.0F && attention_dropout < 1.0F)) {
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention '{}': attention_dropout {} must be in [0, 1)", this->name(),
                    attention_dropout));
  }
}

Tensor MultiHeadAttention::forward(const Tensor& query_input, const Tensor& memory,
                                   const Options& options) const {
  const std::int64_t model_dim = query_.weight().size(0);
  const auto bad = [&](const Tensor& t) {
    return !t.defined() || t.dim() != 3 || t.size(2) != model_dim;
  };
  const KvCache* memory_kv = options.memory_kv;
  const bool bad_memory =
      memory_kv == nullptr && (bad(memory) || query_input.size(0) != memory.size(0));
  if (bad(query_input) || bad_memory) {
    throw std::invalid_argument(fmt::format(
        "MultiHeadAttention '{}': query {} and memory {} must be [batch, time, {}] with the same "
        "batch",
        name(), query_input.defined() ? to_string(query_input.shape()) : "(undefined)",
        memory.defined() ? to_string(memory.shape()) : "(undefined)", model_dim));
  }
  ops::AttentionOptions attention;
  attention.mask = options.mask;
  attention.key_lengths = options.key_lengths;
  attention.causal = options.causal;
  if (options.training && attention_dropout_ > 0.0F) {
    attention.dropout_p = attention_dropout_;
    attention.key = options.key.derive(dropout_name_);
  }
  // Without a cache (training, teacher forcing): self-attention's q, k and v
  // from one product of the three weights joined (a view where they lie one
  // after another, as the projections declare them), cross-attention's k
  // and v from one of the two; the attention reads them where they are.
  if (memory_kv == nullptr && options.cache == nullptr) {
    const bool self = memory.impl() == query_input.impl();
    TensorList weights{key_.weight(), value_.weight()};
    TensorList biases{key_.bias(), value_.bias()};
    if (self) {
      weights.insert(weights.begin(), query_.weight());
      biases.insert(biases.begin(), query_.bias());
    }
    const Tensor packed = ops::linear(memory, ops::joined_rows(weights),
                                      biases[0].defined() ? ops::joined_rows(biases) : Tensor());
    const Tensor q = self ? Tensor() : split_heads(query_.forward(query_input), num_heads_);
    const Tensor context =
        ops::scaled_dot_product_attention_packed(q, packed, num_heads_, attention);
    return output_.forward(merge_heads(context));
  }
  Tensor q = split_heads(query_.forward(query_input), num_heads_);
  Tensor k;
  Tensor v;
  if (memory_kv != nullptr) {
    const Tensor& keys = memory_kv->keys;
    if (!keys.defined() || !memory_kv->values.defined() || keys.dim() != 4 ||
        keys.size(0) != q.size(0) || keys.size(1) != q.size(1) || keys.size(3) != q.size(3) ||
        memory_kv->values.shape() != keys.shape()) {
      throw std::invalid_argument(fmt::format(
          "MultiHeadAttention '{}': precomputed memory keys {} do not fit queries {}", name(),
          keys.defined() ? to_string(keys.shape()) : "(undefined)", to_string(q.shape())));
    }
    k = keys;
    v = memory_kv->values;
  } else {
    k = split_heads(key_.forward(memory), num_heads_);
    v = split_heads(value_.forward(memory), num_heads_);
  }
  if (KvCache* cache = options.cache) {
    if (cache->keys.defined()) {
      if (cache->keys.dim() != 4 || cache->keys.size(0) != k.size(0) ||
          cache->keys.size(1) != k.size(1) || cache->keys.size(3) != k.size(3)) {
        throw std::invalid_argument(
            fmt::format("MultiHeadAttention '{}': cached keys {} do not fit new keys {}", name(),
                        to_string(cache->keys.shape()), to_string(k.shape())));
      }
    }
    cache->append(k, v);
    k = cache->keys;
    v = cache->values;
  }
  const Tensor context = ops::scaled_dot_product_attention(q, k, v, attention);
  return output_.forward(merge_heads(context));
}

KvCache MultiHeadAttention::project_memory(const Tensor& memory) const {
  const std::int64_t model_dim = key_.weight().size(1);
  if (!memory.defined() || memory.dim() != 3 || memory.size(2) != model_dim) {
    throw std::invalid_argument(
        fmt::format("MultiHeadAttention '{}': memory {} must be [batch, time, {}]", name(),
                    memory.defined() ? to_string(memory.shape()) : "(undefined)", model_dim));
  }
  return {split_heads(key_.forward(memory), num_heads_),
          split_heads(value_.forward(memory), num_heads_)};
}

}  // namespace rig::nn
