// All trainable parameters of a model live in one contiguous f32 buffer, and
// their gradients in a second buffer with the same layout (llm.c's flat
// parameter buffer): the optimizer is one pass, a communicator reduces slices,
// a checkpoint is one write. Each parameter is a named view into both.
// Non-trainable state (batch-norm running statistics) lives in a third flat
// buffer of "buffers": saved in checkpoints, never given gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rig/export.hpp"
#include "rig/tensor.hpp"

namespace rig {

// Fans follow PyTorch: for a weight of shape [out, in, k...], fan_in = in x
// prod(k) and fan_out = out x prod(k); a 1-D parameter has fan_in = fan_out = size.
struct Initializer {
  enum class Kind { constant, uniform, normal, xavier_uniform, kaiming_normal };
  Kind kind = Kind::constant;
  float a = 0.0F;  // constant: the value; uniform: low;  normal: mean; xavier: gain; kaiming: gain
  float b = 0.0F;  //                      uniform: high; normal: std
  static Initializer constant(float value) { return {Kind::constant, value, 0.0F}; }
  static Initializer zeros() { return constant(0.0F); }
  static Initializer ones() { return constant(1.0F); }
  static Initializer uniform(float low, float high) { return {Kind::uniform, low, high}; }
  static Initializer normal(float mean, float std) { return {Kind::normal, mean, std}; }
  // U(-g sqrt(6 / (fan_in + fan_out)), +...).
  static Initializer xavier_uniform(float gain = 1.0F) {
    return {Kind::xavier_uniform, gain, 0.0F};
  }
  // N(0, gain / sqrt(fan_in)); gain sqrt(2) suits ReLU (torch's kaiming_normal_, fan_in mode).
  static Initializer kaiming_normal(float gain = 1.41421356F) {
    return {Kind::kaiming_normal, gain, 0.0F};
  }
};

struct ParameterInfo {
  std::string name;  // hierarchical, e.g. "encoder.layers.0.ffn.weight"; the checkpoint key
  Shape shape;
  std::int64_t offset;  // in elements, into values()/grads() (or buffers())
  Initializer init;
  Tensor value;   // what the model computes with: a view of values(), or of compute_values()
                  // under a low-precision compute dtype; requires grad (parameters), its
                  // gradient a view of grads() / compute_grads()
  Tensor master;  // the f32 view of values() (or buffers()): optimizer, checkpoints, transfer;
                  // the same tensor as `value` under f32 and for buffers. Set by allocate().
};

class RIG_API ParameterStore {
 public:
  // Declares a trainable parameter / a non-trainable buffer. The returned
  // tensor is usable after allocate(); names must be unique across both.
  Tensor declare(const std::string& name, Shape shape, Initializer init);
  Tensor declare_buffer(const std::string& name, Shape shape, Initializer init);

  // Lays out the flat buffers and runs every initialiser: each parameter's
  // values depend only on (seed, its name), through the Philox stream
  // RandomKey{seed, 0, 0, purpose_id(name)}.
  //
  // `compute` is the dtype the model computes in (RunContext::dtype). With f16
  // or bf16, values() / grads() stay the f32 master copy (optimizer,
  // communicator, checkpoints) and each parameter's model-facing tensor views
  // compute_values(), its gradient accumulating into compute_grads()
  // (mixed precision: fp32 master weights). Buffers stay f32. Every buffer
  // lives on `device` (the run's device).
  void allocate(std::uint64_t seed, DType compute = DType::f32, Device device = Device::cpu());
  bool allocated() const { return values_.defined(); }

  Tensor values() const { return values_; }    // flat [numel] f32
  Tensor grads() const { return grads_; }      // flat [numel] f32
  Tensor buffers() const { return buffers_; }  // flat [buffer_numel] f32
  DType compute_dtype() const { return compute_dtype_; }
  // The model-facing flat copies: values() / grads() themselves under f32.
  Tensor compute_values() const;
  Tensor compute_grads() const;
  // Moves the model's gradients into the f32 master grads() multiplied by
  // `scale` (1 / loss scale; under f32 in place, and no multiply when it is
  // 1). Returns the largest |master gradient| after unscaling (the `amax`
  // OpenSeq2Seq's loss scalers are given), or +inf when any gradient is inf or
  // NaN (an overflow), as a scalar on the gradients' device: no read, so a GPU
  // step does not wait here (the trainer reads the same statistic once, with
  // the norm, in ops::gradient_stats).
  Tensor unscale_grads(double scale);
  // The same for the gradients [offset, offset + count) of the flat buffers
  // only: a bucket of the data-parallel reducer, unscaled as soon as backward
  // has made it so that it can leave while backward goes on. Without
  // `largest` the statistic is not computed (the gradient statistics give it
  // after the reduction) and an undefined tensor is returned.
  Tensor unscale_grads(double scale, std::int64_t offset, std::int64_t count, bool largest = true);
  // Copies the master values() into compute_values(), rounding to the compute
  // dtype; call after every optimizer step and after loading a checkpoint. A
  // no-op under f32.
  void publish_values();
  // Rounds the master values() to `dtype`'s precision in place (pure float16 /
  // bfloat16 training keeps weights representable in that dtype).
  void round_values_to(DType dtype);
  std::int64_t numel() const { return numel_; }
  std::int64_t buffer_numel() const { return buffer_numel_; }
  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  const std::vector<ParameterInfo>& buffer_infos() const { return buffer_infos_; }
  // A parameter or buffer by name; throws naming the known ones.
  const ParameterInfo& find(const std::string& name) const;
  // Zeroes the gradients backward accumulates into: compute_grads() (under
  // f32, grads() itself). Under f16 / bf16 grads() is left as it is, since
  // unscale_grads() rewrites all of it.
  void zero_grad();

 private:
  std::vector<ParameterInfo> parameters_;
  std::vector<ParameterInfo> buffer_infos_;
  std::int64_t numel_ = 0;
  std::int64_t buffer_numel_ = 0;
  Tensor values_;
  Tensor grads_;
  Tensor buffers_;
  DType compute_dtype_ = DType::f32;
  Tensor compute_values_;  // undefined under f32
  Tensor compute_grads_;
};

}  // namespace rig
