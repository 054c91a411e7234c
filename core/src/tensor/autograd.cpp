// Reverse-mode autograd over the Nodes that ops record.
#include "rig/autograd.hpp"

#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <fmt/format.h>

#include "cpu/tensor_copy.hpp"

namespace rig::autograd {

namespace {

// dst += src; either may be strided (a leaf's grad may be a view into a flat
// gradient buffer, and view backward functions return views).
void add_into(Tensor& dst, const Tensor& src) {
  cpu::add_strided(dst.shape(), dst.raw_data(), dst.strides(), dst.dtype(), src.raw_data(),
                   src.strides(), src.dtype());
}

// Every TensorImpl reachable from `root` through grad_fn, in reverse
// topological order: a tensor comes before all the tensors it was computed from.
std::vector<std::shared_ptr<TensorImpl>> reverse_topological_order(
    const std::shared_ptr<TensorImpl>& root) {
  std::vector<std::shared_ptr<TensorImpl>> post_order;
  std::unordered_set<TensorImpl*> visited{root.get()};
  // Iterative DFS: (tensor, index of the next input to visit).
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto& [impl, next] = stack.back();
    const auto* inputs = impl->grad_fn ? &impl->grad_fn->inputs : nullptr;
    if (inputs && next < inputs->size()) {
      const auto& input = (*inputs)[next++].impl_ptr();
      if (input && input->requires_grad && visited.insert(input.get()).second) {
        stack.emplace_back(input, 0);
      }
      continue;
    }
    post_order.push_back(std::move(impl));
    stack.pop_back();
  }
  return {post_order.rbegin(), post_order.rend()};
}

// A gradient being summed; `owned` once it is a buffer of our own that may be
// added into (a backward function may return a tensor it also returns elsewhere).
struct PendingGrad {
  Tensor value;
  bool owned = false;
};

}  // namespace

Tensor record(Tensor output, std::string op, std::vector<Tensor> inputs,
              std::function<std::vector<Tensor>(const Tensor&)> backward) {
  if (!grad_mode_enabled()) return output;
  bool needs_grad = false;
  for (const auto& input : inputs) needs_grad |= input.defined() && input.requires_grad();
  if (!needs_grad) return output;
  auto node = std::make_shared<Node>();
  node->op = std::move(op);
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  output.impl()->grad_fn = std::move(node);
  output.impl()->requires_grad = true;
  return output;
}

void backward(const Tensor& root) {
  if (!root.defined()) throw std::logic_error("backward: the tensor is undefined");
  if (root.numel() != 1 || !is_floating(root.dtype())) {
    throw std::invalid_argument(fmt::format("backward: needs one floating element, got {} {}",
                                            dtype_name(root.dtype()), to_string(root.shape())));
  }
  if (!root.requires_grad()) {
    throw std::invalid_argument(
        "backward: the tensor does not require a gradient (no input of the ops that computed it "
        "requires one, or it was computed under NoGradGuard)");
  }
  NoGradGuard no_grad;  // backward functions compute with ops but record nothing
  std::unordered_map<TensorImpl*, PendingGrad> grads;
  grads[root.impl()] = {Tensor::full(root.shape(), 1.0F, root.dtype(), root.device()), true};

  // Owning references keep every tensor alive until the graph is released below.
  const auto order = reverse_topological_order(root.impl_ptr());
  for (const auto& impl_ptr : order) {
    TensorImpl* impl = impl_ptr.get();
    auto it = grads.find(impl);
    if (it == grads.end()) continue;  // nothing flowed here (e.g. an undefined input gradient)
    Tensor grad = std::move(it->second.value);
    grads.erase(it);

    if (!impl->grad_fn) {  // a leaf: accumulate into its .grad
      if (!impl->grad) {
        // The first gradient becomes .grad (a contiguous copy we own, in the leaf's dtype).
        Tensor first = Tensor::empty(impl->shape, impl->dtype, grad.device());
        first.copy_from(grad);
        impl->grad = first.impl_ptr();
        continue;
      }
      Tensor leaf_grad(impl->grad);
      add_into(leaf_grad, grad);
      continue;
    }

    const Node& node = *impl->grad_fn;
    if (!node.backward) {
      throw std::logic_error(fmt::format(
          "backward: the graph through '{}' was already released by an earlier backward()",
          node.op));
    }
    std::vector<Tensor> input_grads = node.backward(grad);
    if (input_grads.size() != node.inputs.size()) {
      throw std::logic_error(fmt::format("backward of {}: {} gradients for {} inputs", node.op,
                                         input_grads.size(), node.inputs.size()));
    }
    for (std::size_t i = 0; i < input_grads.size(); ++i) {
      const Tensor& input = node.inputs[i];
      Tensor& g = input_grads[i];
      if (!input.defined() || !input.requires_grad() || !g.defined()) continue;
      if (g.dtype() != input.dtype()) g = g.to(input.dtype());  // e.g. f32 math for an f16 input
      if (g.shape() != input.shape()) {
        throw std::logic_error(fmt::format("backward of {}: gradient {} for input {} of shape {}",
                                           node.op, to_string(g.shape()), i,
                                           to_string(input.shape())));
      }
      auto [slot, inserted] = grads.try_emplace(input.impl(), PendingGrad{g, false});
      if (inserted) continue;
      if (!slot->second.owned) {
        slot->second.value = slot->second.value.clone();
        slot->second.owned = true;
      }
      add_into(slot->second.value, g);
    }
  }
  // Release the graph (saved tensors and edges) as PyTorch does without
  // retain_graph. Emptying every node while `order` still owns all of them
  // frees a long chain iteratively instead of by deep recursive destruction.
  for (const auto& impl : order) {
    if (impl->grad_fn) {
      impl->grad_fn->inputs.clear();
      impl->grad_fn->backward = nullptr;
    }
  }
}

}  // namespace rig::autograd
