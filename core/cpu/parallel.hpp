// A small persistent thread pool for the CPU kernels: parallel_for splits an
// index range over the machine's cores. No allocation per call.
#pragma once

#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>

#include "rig/cores.hpp"

namespace rig::cpu {

// Threads used by parallel_for (the calling thread included); defaults to the
// cores this process may run on (its CPU affinity, rig/cores.hpp), or
// RIG_NUM_THREADS when set.
int num_threads();
using rig::affinity_cores;
void set_num_threads(int threads);

namespace detail {
using RangeFn = void (*)(void* context, std::int64_t begin, std::int64_t end);
void parallel_for_impl(std::int64_t n, std::int64_t grain, RangeFn fn, void* context);
}  // namespace detail

// Runs fn(begin, end) over disjoint chunks covering [0, n), each at least
// `grain` long (the last may be shorter). Runs inline when the range is small,
// when there is one thread, or when called from inside another parallel_for.
// fn must not throw.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t grain, Fn&& fn) {
  auto trampoline = [](void* context, std::int64_t begin, std::int64_t end) {
    (*static_cast<std::remove_reference_t<Fn>*>(context))(begin, end);
  };
  detail::parallel_for_impl(n, grain, trampoline, const_cast<void*>(static_cast<const void*>(&fn)));
}

// Keeps the first exception thrown by any chunk of a parallel_for (whose fn
// must not throw) and rethrows it afterwards on the calling thread.
class FirstError {
 public:
  template <class F>
  void run(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr first_;
};

}  // namespace rig::cpu
