// Host memory a CPU kernel needs while it runs (oneDNN scratchpads, rounded
// GEMM operands, per-thread partial sums), taken from the CPU's caching pool
// and given back when the Scratch goes. Kernels never allocate tensors.
#pragma once

#include <cstddef>
#include <utility>

#include "backend/memory.hpp"

namespace rig::cpu {

// The CPU's memory pool: the caching allocator over aligned host memory that
// CPU tensors use too.
backend::MemoryPool& host_pool();

class Scratch {
 public:
  Scratch() = default;
  explicit Scratch(std::size_t bytes) : block_(host_pool().allocate(bytes)) {}
  ~Scratch() { host_pool().deallocate(block_); }
  Scratch(Scratch&& other) noexcept : block_(std::exchange(other.block_, {})) {}
  Scratch& operator=(Scratch&& other) noexcept {
    if (this != &other) {
      host_pool().deallocate(block_);
      block_ = std::exchange(other.block_, {});
    }
    return *this;
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::byte* data() const { return block_.data; }
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(block_.data);
  }
  bool empty() const { return block_.data == nullptr; }

 private:
  backend::Block block_;
};

}  // namespace rig::cpu
