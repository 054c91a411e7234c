// oneDNN plumbing shared by the CPU kernels that use it (convolution).
//
// Threading: Debian's oneDNN runs on OpenMP. rig parallelises with its own pool
// (cpu/parallel.hpp) and calls oneDNN from inside it on batch chunks, each call
// single-threaded (an OpenMP team of one), so no OpenMP threads ever spin next
// to the pool's. Every oneDNN call (primitive creation included: oneDNN sizes
// its work split by omp_get_max_threads() then) runs inside a SingleThreaded
// scope, which restores the thread's OpenMP setting afterwards for other
// OpenMP users (an OpenMP build of OpenBLAS, say).
#pragma once

#include <dnnl.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string_view>

#include "cpu/scratch.hpp"

namespace rig::cpu::dnnl_util {

// The CPU engine (one per process).
const dnnl::engine& engine();

// While alive, OpenMP (so oneDNN) runs single-threaded on this thread.
class SingleThreaded {
 public:
  SingleThreaded();
  ~SingleThreaded();
  SingleThreaded(const SingleThreaded&) = delete;
  SingleThreaded& operator=(const SingleThreaded&) = delete;

 private:
  int previous_;
};

// This thread's stream.
dnnl::stream& stream();

// Runs `primitive` on this thread's stream and waits; returns the status
// instead of throwing (safe inside parallel_for).
dnnl_status_t execute(const dnnl::primitive& primitive,
                      std::initializer_list<dnnl_exec_arg_t> args);

// A memory object over `data` (not owned). Through oneDNN's C API: the C++
// wrapper's shared_ptr would cost a heap allocation per call.
struct MemoryDeleter {
  void operator()(dnnl_memory_t memory) const noexcept { dnnl_memory_destroy(memory); }
};
using Memory = std::unique_ptr<dnnl_memory, MemoryDeleter>;
Memory wrap(const dnnl::memory::desc& desc, const void* data);

// A buffer of at least `bytes` from rig's caching allocator (scratch space and
// blocked-layout copies live in rig's pool, not in oneDNN's allocations).
inline Scratch buffer(std::size_t bytes) {
  return Scratch(bytes);
}

// Throws std::runtime_error naming `what` when `status` is not success.
void check(dnnl_status_t status, std::string_view what);

}  // namespace rig::cpu::dnnl_util
