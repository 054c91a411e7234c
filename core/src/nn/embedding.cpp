// Embedding: rows of a [vocab, dim] table (ops::embedding).
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "rig/nn.hpp"

namespace rig::nn {

Embedding::Embedding(ParameterStore& store, std::string name, std::int64_t vocab_size,
                     std::int64_t dim, Initializer init)
    : Module(store, std::move(name)) {
  if (vocab_size < 1 || dim < 1) {
    throw std::invalid_argument(fmt::format("Embedding '{}': vocab_size {} and dim {} must be >= 1",
                                            this->name(), vocab_size, dim));
  }
  weight_ = parameter("weight", {vocab_size, dim}, init);
}

Tensor Embedding::forward(const Tensor& ids) const {
  return ops::embedding(weight_, ids);
}

}  // namespace rig::nn
