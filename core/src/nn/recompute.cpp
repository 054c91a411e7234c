// nn::recompute: a segment's activations recomputed in the backward pass
// instead of kept.
#include "rig/autograd.hpp"
#include "rig/nn.hpp"

namespace rig::nn {

namespace {

thread_local bool t_recomputing = false;

// Sets t_recomputing for a segment's second run, restoring an outer one's.
class RecomputingScope {
 public:
  RecomputingScope() : outer_(t_recomputing) { t_recomputing = true; }
  ~RecomputingScope() { t_recomputing = outer_; }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;

 private:
  bool outer_;
};

// Detached copies of `inputs` that require a gradient where the inputs do:
// the leaves of one run of the segment, apart from the graph outside it.
TensorList detached_leaves(const TensorList& inputs) {
  TensorList leaves;
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      Tensor leaf = input.detach();
      leaf.set_requires_grad(true);
      leaves.push_back(leaf);
    } else {
      leaves.push_back(input);
    }
  }
  return leaves;
}

// The backward pass of a recomputed segment: `fn` run again on fresh leaves
// and backpropagated from `grad`. Its gradients go where the plain graph's
// would, so that its ops make the same choices and roundings (a product that
// adds into a pending 16-bit gradient rounds once, a separate add twice):
// into the gradient the outer pass already holds for an input (the
// encoder's output, which every decoder layer reads), and from a seed this
// pass owns, as a node owns its output's gradient.
TensorList run_again(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                     const Tensor& grad) {
  const TensorList leaves = detached_leaves(inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    const Tensor pending = autograd::accumulation_target(i);
    if (pending.defined()) {
      Tensor leaf = leaves[i];
      leaf.set_grad(pending);
    }
  }
  Tensor again;
  {
    const GradModeGuard recording(true);
    const RecomputingScope second_run;
    again = fn(leaves);
  }
  if (again.requires_grad()) autograd::backward(again, grad.clone());
  TensorList grads;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const bool wanted = inputs[i].defined() && inputs[i].requires_grad();
    grads.push_back(wanted ? leaves[i].grad() : Tensor());
  }
  return grads;
}

}  // namespace

bool recomputing() {
  return t_recomputing;
}

Tensor recompute(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs) {
  bool needs_grad = false;
  for (const Tensor& input : inputs) needs_grad |= input.defined() && input.requires_grad();
  if (!grad_mode_enabled() || !needs_grad) return fn(inputs);
  // The first run records its graph as the second will (the same code
  // paths), and drops it with `first`: its activations go at once.
  Tensor output;
  {
    const Tensor first = fn(detached_leaves(inputs));
    output = first.detach();
  }
  return autograd::record(output, "recompute", inputs,
                          [fn, inputs](const Tensor& grad) { return run_again(fn, inputs, grad); });
}

}  // namespace rig::nn
