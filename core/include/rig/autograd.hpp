// Define-by-run reverse-mode autograd: every op that reads a tensor needing a
// gradient records a Node; Tensor::backward() walks them in reverse order.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "rig/tensor.hpp"

namespace rig::autograd {

struct Node {
  std::string op;              // for messages: "matmul", "relu", ...
  std::vector<Tensor> inputs;  // what the op read
  // Given d(loss)/d(output), returns d(loss)/d(inputs[i]) for every input
  // (an undefined Tensor where an input needs no gradient).
  std::function<std::vector<Tensor>(const Tensor& grad_output)> backward;
};

// Attaches history to `output` when grad mode is on and an input requires a
// gradient; returns `output` either way.
Tensor record(Tensor output, std::string op, std::vector<Tensor> inputs,
              std::function<std::vector<Tensor>(const Tensor&)> backward);

// Runs backward from `root` (one element) with seed gradient 1.
void backward(const Tensor& root);

}  // namespace rig::autograd
