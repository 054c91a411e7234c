// Define-by-run reverse-mode autograd: every op that reads a tensor needing a
// gradient records a Node; Tensor::backward() walks them in reverse order.
//
// Recording allocates nothing from the heap once the process is warm: nodes
// come from a pool, the op name is copied into the node, the edges are a
// small inline list and the backward closure lives in an inline buffer of
// BackwardFn::capacity bytes (a larger closure still works, from the heap;
// backward_heap_fallbacks() counts those).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

#include "rig/export.hpp"
#include "rig/inline_function.hpp"
#include "rig/small_vector.hpp"
#include "rig/tensor.hpp"

namespace rig::autograd {

// An op's name ("matmul", "relu", ...), for messages; copied into the node,
// so any string works. Names longer than kMaxLength are cut.
class OpName {
 public:
  static constexpr std::size_t kMaxLength = 47;
  OpName() = default;
  OpName(std::string_view name) noexcept  // NOLINT: implicit, from literals and strings
      : size_(static_cast<std::uint8_t>(std::min(name.size(), kMaxLength))) {
    std::copy_n(name.data(), size_, chars_.data());
  }
  OpName(const char* name) noexcept : OpName(std::string_view(name)) {}         // NOLINT
  OpName(const std::string& name) noexcept : OpName(std::string_view(name)) {}  // NOLINT

  std::string_view view() const noexcept { return {chars_.data(), size_}; }
  operator std::string_view() const noexcept { return view(); }  // NOLINT
  friend bool operator==(const OpName& a, const OpName& b) noexcept { return a.view() == b.view(); }
  friend std::ostream& operator<<(std::ostream& os, const OpName& name) {
    return os << name.view();
  }

 private:
  std::array<char, kMaxLength> chars_{};
  std::uint8_t size_ = 0;
};

// The tensors an op read / the gradients its backward returns (one per input).
using rig::TensorList;
// Given d(loss)/d(output), returns d(loss)/d(inputs[i]) for every input (an
// undefined Tensor where an input needs no gradient). A closure returning
// std::vector<Tensor> also converts.
using BackwardFn = InlineFunction<TensorList(const Tensor& grad_output), 256>;

struct Node;

// Where the gradient of one op input goes: into the node that computed the
// input, or into the .grad of a leaf. An edge does not hold the input tensor
// itself, so an activation that no backward function saved is freed as soon
// as the forward pass stops using it (as in PyTorch); only the leaf of a
// leaf edge (a parameter, a user input) is kept alive.
struct Edge {
  std::shared_ptr<Node> node;        // a non-leaf input: the node that computed it
  std::shared_ptr<TensorImpl> leaf;  // a leaf input that requires a gradient
  Shape shape;                       // the input's, to check and convert its gradient
  DType dtype = DType::f32;
  bool defined() const noexcept { return node != nullptr || leaf != nullptr; }
};
using EdgeList = SmallVector<Edge, 4>;

struct Node {
  OpName op;       // for messages
  EdgeList edges;  // one per input the op read; undefined where it needs no gradient
  BackwardFn backward;
  // Where the gradient of the node's output may be added in place while none
  // is pending for it (accumulation_target's answer to the ops that read the
  // output): memory that is its inputs' .grad, laid out as the output
  // (joined_rows of adjacent parameters, set by set_output_grad_home).
  // Undefined for every other node.
  Tensor output_grad_home;
};

// Attaches history to `output` when grad mode is on and an input requires a
// gradient; returns `output` either way.
RIG_API Tensor record(Tensor output, OpName op, TensorList inputs, BackwardFn backward);

// Gives `output`'s node (record must have attached one) an output_grad_home.
RIG_API void set_output_grad_home(const Tensor& output, Tensor home);

// Runs backward from `root` (one element) with seed gradient 1.
RIG_API void backward(const Tensor& root);
// Runs backward from `root` of any shape with seed gradient `grad` (its
// shape and dtype): a backward function that backpropagates through a
// forward pass it ran again (nn::recompute). The pass holds `grad` as a
// node holds its output's gradient: moved in, ops may add into it in place
// once nothing else holds it.
RIG_API void backward(const Tensor& root, Tensor grad);

// Inside a backward function: a gradient that input `input` already has, into
// which this backward may add its own in place (a product's beta = 1, a
// kernel's accumulating store) instead of returning a new tensor for
// backward() to add in a pass of its own. It is dense, of the input's shape
// and dtype, and nothing else reads it: a gradient summed from other uses of
// the input (a residual connection, q, k and v of one x), or a parameter's
// .grad. Undefined when there is none (the first gradient of a non-leaf).
// A backward function that adds into it returns it as that input's gradient.
RIG_API Tensor accumulation_target(std::size_t input);

// Told, on the thread that runs backward(), of each leaf as soon as its
// gradient from that backward() is complete (just added into .grad):
// data-parallel training starts reducing a gradient bucket while backward is
// still running. At most one listener per thread, installed for a scope.
class RIG_API LeafGradListener {
 public:
  virtual ~LeafGradListener() = default;
  virtual void leaf_grad_ready(const TensorImpl& leaf) = 0;
};

class RIG_API ScopedLeafGradListener {
 public:
  explicit ScopedLeafGradListener(LeafGradListener& listener);
  ~ScopedLeafGradListener();
  ScopedLeafGradListener(const ScopedLeafGradListener&) = delete;
  ScopedLeafGradListener& operator=(const ScopedLeafGradListener&) = delete;

 private:
  LeafGradListener* previous_;
};

// How many recorded backward closures did not fit BackwardFn's inline buffer
// (each cost a heap allocation); for tests and tuning.
RIG_API std::size_t backward_heap_fallbacks();

}  // namespace rig::autograd
