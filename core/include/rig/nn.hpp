// Layers for model plugins to compose. Each is a Module: it declares its
// parameters in a ParameterStore under a hierarchical name (stable enough to
// be a checkpoint key: "encoder.layers.0.attention.query.weight") and has a
// forward function built from rig::ops, so autograd comes for free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "rig/ops.hpp"
#include "rig/parameter_store.hpp"
#include "rig/random.hpp"
#include "rig/tensor.hpp"

namespace rig::nn {

class RIG_API Module {
 public:
  Module(ParameterStore& store, std::string name);
  const std::string& name() const { return name_; }
  // The name of a child module or parameter: "<name>.<local>" ("<local>" at the root).
  std::string child(std::string_view local) const;

 protected:
  Tensor parameter(std::string_view local, Shape shape, Initializer init);
  Tensor buffer(std::string_view local, Shape shape, Initializer init);
  ParameterStore& store() const { return *store_; }

 private:
  ParameterStore* store_;  // not owned: the model's store outlives its modules
  std::string name_;
};

// y = x W^T + b, W [out, in] (PyTorch layout), initialised like torch.nn.Linear
// (uniform +-1/sqrt(in)) unless `init` says otherwise.
class RIG_API Linear : public Module {
 public:
  Linear(ParameterStore& store, std::string name, std::int64_t in_features,
         std::int64_t out_features, bool bias = true,
         std::optional<Initializer> init = std::nullopt);
  Tensor forward(const Tensor& x, ops::Activation activation = ops::Activation::none) const;
  // relu, then dropout fused into the layer (ops::linear's OutputDropout);
  // input_scale as ops::linear's (the next layer of an unscaled dropout).
  Tensor forward(const Tensor& x, ops::Activation activation, const ops::OutputDropout& dropout,
                 float input_scale = 1.0F) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  Tensor weight_;
  Tensor bias_;
};

// Rows of a [vocab, dim] table; weight() can be shared as a softmax projection.
class RIG_API Embedding : public Module {
 public:
  Embedding(ParameterStore& store, std::string name, std::int64_t vocab_size, std::int64_t dim,
            Initializer init = Initializer::normal(0.0F, 1.0F));
  Tensor forward(const Tensor& ids) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

class RIG_API LayerNorm : public Module {
 public:
  LayerNorm(ParameterStore& store, std::string name, std::int64_t dim, float eps = 1e-5F);
  Tensor forward(const Tensor& x) const;

 private:
  Tensor gamma_;
  Tensor beta_;
  float eps_;
};

// Active only when training; its stream is key.derive(name).
class RIG_API Dropout {
 public:
  Dropout(std::string name, float p);
  Tensor forward(const Tensor& x, bool training, const RandomKey& key) const;
  // residual + forward(x, training, key), as one op (ops::dropout_add): a
  // residual connection and its branch's dropout in one pass where fused;
  // row_scale (optional, [..., 1]) multiplies x first, in the same pass.
  Tensor forward_added_to(const Tensor& residual, const Tensor& x, bool training,
                          const RandomKey& key, const Tensor& row_scale = {}) const;
  // The same dropout as Linear's fused output dropout (after relu): the same
  // stream, so the same mask; p 0 when not training. Unscaled (`scaled`
  // false), the layer that reads the output takes keep_scale(training) as
  // its input_scale.
  ops::OutputDropout as_output_dropout(bool training, const RandomKey& key,
                                       bool scaled = true) const;
  // What the kept values are multiplied by: 1 / (1 - p) when training (0 at
  // p = 1, as ops::dropout), else 1.
  float keep_scale(bool training) const;
  float p() const { return p_; }

 private:
  std::string name_;
  float p_;
};

// Keys and values of earlier decode steps, per attention layer. `keys` and
// `values` ([B, H, T, D]) are the T positions so far: read them freely, and
// change them through append() and reorder() (or assign a fixed pair, as
// project_memory's, which append() extends by copying).
//
// append() writes the new positions into the next slots of buffers with room
// for capacity() positions, and keys / values are views of the filled prefix.
// reserve() sizes the buffers for a whole decode, so they are allocated once
// (else capacity doubles as needed): growing by one position a step would
// allocate a larger pair every step, each of another size that a caching
// allocator keeps. A later append() or reorder() may overwrite what an
// earlier view of keys / values showed.
class RIG_API KvCache {
 public:
  Tensor keys;    // [B, H, T, D]
  Tensor values;  // [B, H, T, D]

  KvCache() = default;
  KvCache(Tensor keys, Tensor values);

  std::int64_t length() const { return keys.defined() ? keys.size(2) : 0; }
  // Positions the buffers hold before append() must reallocate them.
  std::int64_t capacity() const;
  // Room for `positions` positions in all, allocated by the next append()
  // (whose keys give B, H, D and the dtype) unless there already is as much.
  void reserve(std::int64_t positions);
  // Appends k and v [B, H, t, D] (B, H, D and the dtype of the positions so
  // far). With grad mode on and k or v requiring a gradient it concatenates
  // instead (new tensors, differentiable), as training through a cache needs.
  void append(const Tensor& k, const Tensor& v);
  // Makes row index[j] the new row j (index i64 [B], entries in [0, B)), as
  // beam search does after choosing its hypotheses, without allocating: the
  // filled positions are gathered into `spare`, a buffer shaped like this
  // cache's (allocated when undefined or shaped otherwise), which becomes
  // this cache's; `spare` gets the old buffer back. One spare thus serves
  // every cache of a decoder in turn.
  void reorder(const Tensor& index, Tensor& spare);

 private:
  // Whether keys / values are views of the buffers (not a pair set directly).
  bool buffered() const;
  // New buffers for `positions`, holding the positions so far.
  void grow(std::int64_t positions, const Tensor& like);

  Tensor key_buffer_;    // [B, H, capacity, D]; keys is its prefix
  Tensor value_buffer_;  // [B, H, capacity, D]; values is its prefix
  std::int64_t reserved_ = 0;
};

// Multi-head attention with separate query/key/value/output projections
// (query, key, value, output). Self-attention: forward(x, x, ...); cross:
// forward(decoder_x, encoder_out, ...). With a cache, the new keys/values are
// appended to it (KvCache::append) and attention covers the whole cached
// prefix. `init` is the projections' weight initialiser (as Linear's: torch's
// default when unset).
class RIG_API MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(ParameterStore& store, std::string name, std::int64_t model_dim,
                     std::int64_t num_heads, float attention_dropout = 0.0F, bool bias = true,
                     std::optional<Initializer> init = std::nullopt);
  struct Options {
    Tensor mask;  // u8, broadcastable to [B, H, Tq, Tk]; 1 = may attend
    // Optional: the keys' lengths when `mask` is their key-padding mask
    // (ops::AttentionOptions::key_lengths).
    Tensor key_lengths;
    bool causal = false;
    bool training = false;
    RandomKey key;
    KvCache* cache = nullptr;  // not owned
    // Keys and values of `memory` computed earlier by project_memory (not
    // owned): cross-attention then skips the key/value projections, and
    // `memory` may be undefined. For decoding, where every step attends to the
    // same encoder output.
    const KvCache* memory_kv = nullptr;
  };
  // query_input [B, Tq, model_dim], memory [B, Tk, model_dim] -> [B, Tq, model_dim].
  Tensor forward(const Tensor& query_input, const Tensor& memory, const Options& options) const;
  // The key and value projections of memory [B, Tk, model_dim], split into
  // heads ([B, H, Tk, D] each), for Options::memory_kv.
  KvCache project_memory(const Tensor& memory) const;

 private:
  std::int64_t num_heads_;
  float attention_dropout_;
  std::string dropout_name_;  // child("dropout"), built once: forward does not allocate
  Linear query_, key_, value_, output_;
};

// Position-wise feed-forward: Linear(model, hidden) + activation + dropout + Linear(hidden, model).
class RIG_API FeedForward : public Module {
 public:
  FeedForward(ParameterStore& store, std::string name, std::int64_t model_dim,
              std::int64_t hidden_dim, ops::Activation activation = ops::Activation::relu,
              float dropout = 0.0F);
  Tensor forward(const Tensor& x, bool training, const RandomKey& key) const;

 private:
  ops::Activation activation_;
  Dropout dropout_;
  Linear inner_, outer_;
};

class RIG_API Conv2d : public Module {
 public:
  // Kaiming-normal weights (fan_in, ReLU gain; torchvision's ResNet uses
  // fan_out, which the resnet plugin declares itself).
  Conv2d(ParameterStore& store, std::string name, std::int64_t in_channels,
         std::int64_t out_channels, std::int64_t kernel, const ops::Conv2dOptions& options = {},
         bool bias = false);
  Tensor forward(const Tensor& x) const;

 private:
  ops::Conv2dOptions options_;
  Tensor weight_;
  Tensor bias_;
};

// gamma (weight) 1, beta (bias) 0, running statistics as buffers.
class RIG_API BatchNorm2d : public Module {
 public:
  BatchNorm2d(ParameterStore& store, std::string name, std::int64_t channels, float momentum = 0.1F,
              float eps = 1e-5F, bool zero_init_gamma = false);
  Tensor forward(const Tensor& x, bool training) const;
  // relu(forward(x, training)), fused where the back end can (ops::batch_norm_relu).
  Tensor forward_relu(const Tensor& x, bool training) const;
  // relu(forward(x, training) + residual), fused where the back end can
  // (ops::batch_norm_add_relu): a residual block's end.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual, bool training) const;
  // relu(forward(x, training) + shortcut.forward(shortcut_x, training)),
  // fused where the back end can (ops::batch_norm_add_batch_norm_relu): a
  // residual block's end with a projection shortcut.
  Tensor forward_add_relu(const Tensor& x, const BatchNorm2d& shortcut, const Tensor& shortcut_x,
                          bool training) const;

 private:
  // Without the running statistics in a recomputed segment's second run.
  ops::BatchNormParams params(bool training) const;

  float momentum_;
  float eps_;
  Tensor gamma_, beta_, running_mean_, running_var_;
};

// A segment of a network whose activations are not kept for the backward
// pass: `fn(inputs)` runs as usual, but only `inputs` are saved; the backward
// pass runs `fn` again and backpropagates through that second run, so one
// more forward of the segment buys the memory of its activations (PyTorch's
// torch.utils.checkpoint, Megatron's activation recomputation). Both runs
// read detached copies of the inputs, so they take the same code paths and
// give the same bits: the gradients are those without recomputation. `fn`
// must compute the same values twice: its dropout keyed on the batch's
// RandomKey (as every rig layer's is), no state updated (not batch norm in
// training, unless through BatchNorm2d, which knows recomputing()), and tensors it reads
// besides `inputs` captured by value. The parameters it reads get their
// gradients in the second run; the inputs that require one get theirs.
// Without grad mode, or when no input requires a gradient, it is fn(inputs).
RIG_API Tensor recompute(const std::function<Tensor(const TensorList&)>& fn,
                         const TensorList& inputs);
// True on this thread while recompute runs a segment the second time: state a
// layer updates in training (batch norm's running statistics, which
// BatchNorm2d leaves alone then) was updated by the first run.
RIG_API bool recomputing();

}  // namespace rig::nn
