// Module: hierarchical names for parameters, declared in the model's store.
#include <utility>

#include "rig/nn.hpp"

namespace rig::nn {

Module::Module(ParameterStore& store, std::string name) : store_(&store), name_(std::move(name)) {}

std::string Module::child(std::string_view local) const {
  if (name_.empty()) return std::string(local);
  std::string full;
  full.reserve(name_.size() + 1 + local.size());
  full.append(name_).append(1, '.').append(local);
  return full;
}

Tensor Module::parameter(std::string_view local, Shape shape, Initializer init) {
  return store_->declare(child(local), std::move(shape), init);
}

Tensor Module::buffer(std::string_view local, Shape shape, Initializer init) {
  return store_->declare_buffer(child(local), std::move(shape), init);
}

}  // namespace rig::nn
