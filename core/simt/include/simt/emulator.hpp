// The host SIMT emulator: runs a kernel written once over the execution
// context (simt/context.hpp) on the host, one fiber per thread of a block.
//
//   simt::emulate(LaunchShape{{rows}, {256}, bytes}, ScaleRows{x, y, cols});
//
// Blocks run one at a time, in an order shuffled by EmulatorOptions::seed.
// Within a block a thread runs alone until a scheduling point: sync(), a
// shuffle, or its return. When every thread of the block waits or has
// returned, the emulator resolves the waits: a warp whose 32 lanes all wait at
// the same shuffle exchanges its values; a block whose threads all wait at the
// same sync() passes the barrier. Runnable threads are resumed in an order
// shuffled by the seed, so different seeds give different interleavings.
//
// What the emulator reports (SimtError, naming the block, the threads and the
// call sites):
//   - barrier divergence: threads of a block wait at different sync() calls,
//     or some wait while others have returned;
//   - shuffles over inactive lanes: a lane of the warp does not exist (the
//     block is not a multiple of 32 threads), has returned, or waits elsewhere;
//   - launches CUDA would refuse: more than 1024 threads per block, an empty
//     grid, more dynamic shared memory than EmulatorOptions::max_shared_bytes.
// Shared memory (shared<T>() and reduce_scratch<T>()) is filled with 0xFF
// bytes at the start of every block, so a float read before it is written is
// a NaN: a missing barrier shows up as NaNs or stale values in the results.
// Both are heap allocations of exactly their size, so under AddressSanitizer
// (RIG_SANITIZE) a kernel reading or writing past them is reported; each
// fiber's stack sits above a guard page, so a stack overflow faults.
//
// An exception thrown by the kernel body stops the launch and is rethrown by
// emulate() as it is.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "simt/call_site.hpp"
#include "simt/context.hpp"
#include "simt/launch_shape.hpp"

namespace rig::simt {

struct EmulatorOptions {
  // Shuffles the order the blocks run in and the order threads are resumed.
  std::uint64_t seed = 0;
  // Stack of each fiber (one per thread of a block). AddressSanitizer's
  // redzones make frames several times larger, so its builds get more.
#if defined(__SANITIZE_ADDRESS__)
  std::size_t stack_bytes = 256 * 1024;
#else
  std::size_t stack_bytes = 64 * 1024;
#endif
  // Dynamic shared memory a launch may ask for: an H100's opt-in limit per
  // block (227 KiB). A launch above it is a SimtError.
  std::size_t max_shared_bytes = 227 * 1024;
};

// A launch the GPU would refuse, or a kernel the GPU would run wrongly or
// hang on (barrier divergence, shuffles over inactive lanes).
class SimtError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
class Launch;
enum class ShuffleOp : unsigned char { kIndex, kXor, kDown };
template <class T>
inline constexpr bool kShuffleType =
    std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && (sizeof(T) == 4 || sizeof(T) == 8);
}  // namespace detail

// The execution context of one emulated thread (the members of
// simt/context.hpp). emulate() makes it; kernels get it as `Ctx&`.
class EmulatedContext {
 public:
  EmulatedContext(const EmulatedContext&) = delete;
  EmulatedContext& operator=(const EmulatedContext&) = delete;

  Dim3 thread_idx() const { return thread_idx_; }
  Dim3 block_idx() const { return block_idx_; }
  Dim3 block_dim() const { return block_dim_; }
  Dim3 grid_dim() const { return grid_dim_; }
  unsigned thread_rank() const { return rank_; }
  unsigned block_threads() const { return block_threads_; }
  unsigned lane() const { return rank_ % kWarpSize; }
  unsigned warp() const { return rank_ / kWarpSize; }

  // Barrier of the block: every thread of the block must reach this call.
  void sync(CallSite site = CallSite::current());

  // Whole-warp shuffles: all 32 lanes of the warp must reach this call.
  template <class T>
  T shfl(T value, unsigned src_lane, CallSite site = CallSite::current()) {
    return exchange(value, detail::ShuffleOp::kIndex, src_lane, site);
  }
  template <class T>
  T shfl_xor(T value, unsigned lane_mask, CallSite site = CallSite::current()) {
    return exchange(value, detail::ShuffleOp::kXor, lane_mask, site);
  }
  template <class T>
  T shfl_down(T value, unsigned delta, CallSite site = CallSite::current()) {
    return exchange(value, detail::ShuffleOp::kDown, delta, site);
  }

  // Dynamic shared memory of the block (LaunchShape::shared_bytes bytes),
  // 16-byte aligned, 0xFF bytes at block start.
  template <class T>
  T* shared() const {
    return reinterpret_cast<T*>(shared_);
  }
  std::size_t shared_bytes() const { return shared_bytes_; }
  // kReduceSlots slots of T, separate from shared<T>(), 0xFF at block start.
  template <class T>
  T* reduce_scratch() const {
    static_assert(sizeof(T) <= 8, "reduce_scratch holds slots of at most 8 bytes");
    return reinterpret_cast<T*>(scratch_);
  }

 private:
  friend class detail::Launch;
  EmulatedContext() = default;

  template <class T>
  T exchange(T value, detail::ShuffleOp op, unsigned arg, const CallSite& site) {
    static_assert(detail::kShuffleType<T>, "shuffles take 4- or 8-byte arithmetic types");
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = exchange_bits(bits, op, arg, site);
    T result;
    std::memcpy(&result, &bits, sizeof(T));
    return result;
  }
  std::uint64_t exchange_bits(std::uint64_t bits, detail::ShuffleOp op, unsigned arg,
                              const CallSite& site);

  detail::Launch* launch_ = nullptr;
  Dim3 thread_idx_, block_idx_, block_dim_, grid_dim_;
  unsigned rank_ = 0;
  unsigned block_threads_ = 0;
  std::byte* shared_ = nullptr;
  std::size_t shared_bytes_ = 0;
  std::byte* scratch_ = nullptr;
};

// Runs kernel(ctx) for every thread of the launch, ctx an EmulatedContext&.
// Throws SimtError for an invalid launch or a kernel that diverges at a
// barrier or shuffles over inactive lanes; rethrows what the kernel throws.
// Not reentrant: a kernel body cannot call emulate().
using KernelThunk = void (*)(const void* kernel, EmulatedContext& ctx);
void emulate_erased(const LaunchShape& shape, const void* kernel, KernelThunk thunk,
                    const EmulatorOptions& options);

template <class Kernel>
void emulate(const LaunchShape& shape, const Kernel& kernel, const EmulatorOptions& options = {}) {
  emulate_erased(
      shape, &kernel,
      [](const void* k, EmulatedContext& ctx) { (*static_cast<const Kernel*>(k))(ctx); }, options);
}

}  // namespace rig::simt
