// All trainable parameters of a model live in one contiguous f32 buffer, and
// their gradients in a second buffer with the same layout (llm.c's flat
// parameter buffer): the optimizer is one pass, a communicator reduces slices,
// a checkpoint is one write. Each parameter is a named view into both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rig/tensor.hpp"

namespace rig {

struct Initializer {
  enum class Kind { constant, uniform, normal, xavier_uniform };
  Kind kind = Kind::constant;
  float a = 0.0F;  // constant: the value; uniform: low;  normal: mean
  float b = 0.0F;  //                      uniform: high; normal: std
  static Initializer constant(float value) { return {Kind::constant, value, 0.0F}; }
  static Initializer uniform(float low, float high) { return {Kind::uniform, low, high}; }
  static Initializer normal(float mean, float std) { return {Kind::normal, mean, std}; }
  static Initializer xavier_uniform() { return {Kind::xavier_uniform, 0.0F, 0.0F}; }
};

struct ParameterInfo {
  std::string name;  // hierarchical, e.g. "layers.0.weight"; stable checkpoint key
  Shape shape;
  std::int64_t offset;  // in elements, into values() and grads()
  Initializer init;
  Tensor value;  // view of values(); requires grad; its grad is the matching view of grads()
};

class RIG_API ParameterStore {
 public:
  // Declares a parameter. The returned tensor is usable after allocate();
  // names must be unique.
  Tensor declare(const std::string& name, Shape shape, Initializer init);

  // Lays out the flat buffers and runs every initialiser, reproducibly from seed.
  void allocate(std::uint64_t seed);
  bool allocated() const { return values_.defined(); }

  Tensor values() const { return values_; }  // flat [numel] f32
  Tensor grads() const { return grads_; }    // flat [numel] f32
  std::int64_t numel() const { return numel_; }
  const std::vector<ParameterInfo>& parameters() const { return parameters_; }
  const ParameterInfo& find(const std::string& name) const;  // throws naming known parameters
  void zero_grad();

 private:
  std::vector<ParameterInfo> parameters_;
  std::int64_t numel_ = 0;
  Tensor values_;
  Tensor grads_;
};

}  // namespace rig
