// The SIMT emulator's scheduler: one fiber per thread of a block,
// resumed in seeded random order between scheduling points (sync(), shuffles,
// return). See simt/emulator.hpp for what it checks.
#include "simt/emulator.hpp"

// GCC 12 reports a false -Wrestrict in std::string's operator+ at -O3 (GCC bug
// 105329); the messages below are built with it.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fiber_context.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define RIG_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RIG_SIMT_ASAN 1
#endif
#endif
#if defined(RIG_SIMT_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(__SANITIZE_THREAD__)
#define RIG_SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RIG_SIMT_TSAN 1
#endif
#endif
#if defined(RIG_SIMT_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

namespace {

// Tells ThreadSanitizer that execution moves to `fiber` (its record of a
// fiber or of the launching thread); nothing without ThreadSanitizer.
inline void tsan_switch_to([[maybe_unused]] void* fiber) {
#if defined(RIG_SIMT_TSAN)
  __tsan_switch_to_fiber(fiber, 0);
#endif
}

}  // namespace

#ifndef RIG_SIMT_SOURCE_ROOT
#define RIG_SIMT_SOURCE_ROOT ""
#endif

namespace rig::simt {
namespace detail {
namespace {

// CUDA's limits on a launch.
constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kMaxBlockXY = 1024;
constexpr unsigned kMaxBlockZ = 64;
constexpr unsigned kMaxGridX = 2147483647u;
constexpr unsigned kMaxGridYZ = 65535;
// The emulator runs every block on the host: more than this many is a mistake.
constexpr unsigned long long kMaxEmulatedBlocks = 1ull << 24;
constexpr std::size_t kAlign = 16;

enum class State : unsigned char {
  kFresh,     // not yet run in this block
  kRunnable,  // released from a barrier or a shuffle
  kBarrier,   // waits at sync()
  kShuffle,   // waits at a shuffle
  kDone,      // returned from the kernel
};

// Thrown inside a fiber to unwind it when the launch stops; caught by the
// fiber's entry. Not a std::exception, so kernels do not catch it by accident.
struct FiberAbort {};

std::string dim_string(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string_view short_path(const char* file) {
  std::string_view path(file);
  const std::string_view root(RIG_SIMT_SOURCE_ROOT);
  if (!root.empty() && path.starts_with(root)) path.remove_prefix(root.size());
  return path;
}

std::string site_string(const CallSite& site) {
  std::string out(short_path(site.file_name()));
  out += ":" + std::to_string(site.line()) + ":" + std::to_string(site.column());
  return out;
}

bool same_site(const CallSite& a, const CallSite& b) {
  return a.line() == b.line() && a.column() == b.column() &&
         (a.file_name() == b.file_name() || std::strcmp(a.file_name(), b.file_name()) == 0);
}

const char* op_name(ShuffleOp op) {
  switch (op) {
    case ShuffleOp::kIndex:
      return "shfl()";
    case ShuffleOp::kXor:
      return "shfl_xor()";
    case ShuffleOp::kDown:
      return "shfl_down()";
  }
  return "a shuffle";
}

// "0-15, 17, 20-31"
std::string ranges(const std::vector<unsigned>& ids) {
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ids[i]);
    if (j > i) out += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return out;
}

// Groups of ids sharing a description, in order of first appearance, written
// as "threads 0-15 wait at sync() in f.hpp:42:5, threads 16-31 have exited".
class Groups {
 public:
  void add(unsigned id, std::string what) {
    for (auto& [text, ids] : groups_) {
      if (text == what) {
        ids.push_back(id);
        return;
      }
    }
    groups_.emplace_back(std::move(what), std::vector<unsigned>{id});
  }
  // noun: "thread" or "lane". Each description is "verb|rest", e.g.
  // "wait|waits| at sync() in ...": plural verb, singular verb, the rest.
  std::string text(const char* noun) const {
    std::string out;
    for (const auto& [what, ids] : groups_) {
      const auto bar1 = what.find('|');
      const auto bar2 = what.find('|', bar1 + 1);
      const bool many = ids.size() > 1;
      if (!out.empty()) out += ", ";
      out += noun;
      if (many) out += "s";
      out += " " + ranges(ids) + " ";
      out += many ? what.substr(0, bar1) : what.substr(bar1 + 1, bar2 - bar1 - 1);
      out += what.substr(bar2 + 1);
    }
    return out;
  }

 private:
  std::vector<std::pair<std::string, std::vector<unsigned>>> groups_;
};

std::uint64_t mix(std::uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The fibers' stacks: one mapping, each stack above a PROT_NONE guard page so
// that a stack overflow faults instead of corrupting its neighbour.
class StackArena {
 public:
  StackArena(std::size_t count, std::size_t stack_bytes)
      : count_(count), stack_bytes_(stack_bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    guard_ = page;
    stride_ = (stack_bytes + page - 1) / page * page + page;
    bytes_ = stride_ * count;
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      throw SimtError("SIMT emulator: cannot map " + std::to_string(bytes_) + " bytes for " +
                      std::to_string(count) + " fiber stacks (EmulatorOptions::stack_bytes = " +
                      std::to_string(stack_bytes) + ")");
    }
    base_ = static_cast<std::byte*>(p);
    for (std::size_t i = 0; i < count; ++i) mprotect(base_ + i * stride_, guard_, PROT_NONE);
  }
  StackArena(const StackArena&) = delete;
  StackArena& operator=(const StackArena&) = delete;
  ~StackArena() {
#if defined(RIG_SIMT_ASAN)
    // Frames left on the stacks (fibers that never return) poisoned their
    // shadow; clear it so memory mapped here later is not reported.
    __asan_unpoison_memory_region(base_, bytes_);
#endif
    munmap(base_, bytes_);
  }
  std::byte* stack(std::size_t i) const {
    return base_ + i * stride_ + guard_;
  }
  std::size_t stack_size() const {
    return stride_ - guard_;
  }
  bool fits(std::size_t count, std::size_t stack_bytes) const {
    return count <= count_ && stack_bytes == stack_bytes_;
  }
  // Before a launch runs on the first `count` stacks again.
  void reuse([[maybe_unused]] std::size_t count) {
#if defined(RIG_SIMT_ASAN)
    // Frames of the last launch's fibers (those abandoned inside a kernel)
    // left their shadow poisoned.
    for (std::size_t i = 0; i < count; ++i) __asan_unpoison_memory_region(stack(i), stack_size());
#endif
  }

 private:
  std::size_t count_ = 0, stack_bytes_ = 0;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0, stride_ = 0, guard_ = 0;
};

// The fibers' stacks are mapped once per host thread and reused by its later
// launches: mapping them, guarding each and faulting their pages in again for
// every launch made a small kernel's launch slow. Grows to the largest block.
StackArena& thread_stack_arena(std::size_t count, std::size_t stack_bytes) {
  thread_local std::unique_ptr<StackArena> arena;
  if (!arena || !arena->fits(count, stack_bytes)) {
    arena.reset();
    arena = std::make_unique<StackArena>(count, stack_bytes);
  }
  arena->reuse(count);
  return *arena;
}

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete (p, std::align_val_t{kAlign}); }
};
using AlignedBytes = std::unique_ptr<std::byte, AlignedDelete>;
AlignedBytes aligned_bytes(std::size_t n) {
  return AlignedBytes(static_cast<std::byte*>(::operator new (n, std::align_val_t{kAlign})));
}

void validate(const LaunchShape& shape, const EmulatorOptions& options) {
  const auto shape_text = [&] {
    return "launch of grid " + dim_string(shape.grid) + " x block " + dim_string(shape.block) +
           " with " + std::to_string(shape.shared_bytes) + " bytes of shared memory";
  };
  const Dim3& b = shape.block;
  const Dim3& g = shape.grid;
  if (b.count() == 0 || b.count() > kMaxBlockThreads) {
    throw SimtError("SIMT emulator: invalid " + shape_text() + ": a block of " +
                    std::to_string(b.count()) + " threads; CUDA allows 1 to " +
                    std::to_string(kMaxBlockThreads) + " threads per block");
  }
  if (b.x > kMaxBlockXY || b.y > kMaxBlockXY || b.z > kMaxBlockZ) {
    throw SimtError("SIMT emulator: invalid " + shape_text() +
                    ": CUDA allows blocks of at most (1024,1024,64)");
  }
  if (g.count() == 0) {
    throw SimtError("SIMT emulator: invalid " + shape_text() +
                    ": every grid dimension must be at least 1 (launch nothing instead)");
  }
  if (g.x > kMaxGridX || g.y > kMaxGridYZ || g.z > kMaxGridYZ) {
    throw SimtError("SIMT emulator: invalid " + shape_text() +
                    ": CUDA allows grids of at most (2147483647,65535,65535)");
  }
  if (g.count() > kMaxEmulatedBlocks) {
    throw SimtError("SIMT emulator: " + shape_text() + " has " + std::to_string(g.count()) +
                    " blocks; the emulator runs at most " + std::to_string(kMaxEmulatedBlocks));
  }
  if (shape.shared_bytes > options.max_shared_bytes) {
    throw SimtError("SIMT emulator: invalid " + shape_text() + ": " +
                    std::to_string(shape.shared_bytes) +
                    " bytes of dynamic shared memory per block exceed the limit of " +
                    std::to_string(options.max_shared_bytes) +
                    " (EmulatorOptions::max_shared_bytes); use less shared memory per block");
  }
}

struct Fiber {
  FiberContext context;
  std::byte* stack = nullptr;
  std::size_t stack_size = 0;
  [[maybe_unused]] void* fake_stack = nullptr;  // ASan's fake stack while suspended
  void* tsan_fiber = nullptr;                   // ThreadSanitizer's record of it
  bool started = false;                         // entered fiber_main
  bool abort_thrown = false;
  State state = State::kFresh;
  CallSite site;
  ShuffleOp op = ShuffleOp::kIndex;
  unsigned arg = 0;
  std::uint64_t bits = 0, result = 0;
};

thread_local Launch* tls_launch = nullptr;

}  // namespace

class Launch {
 public:
  Launch(const LaunchShape& shape, const void* kernel, KernelThunk thunk,
         const EmulatorOptions& options)
      : shape_(shape),
        kernel_(kernel),
        thunk_(thunk),
        seed_(options.seed),
        n_(static_cast<unsigned>(shape.block.count())),
        contexts_(new EmulatedContext[n_]),
        fibers_(n_),
        shared_(aligned_bytes(shape.shared_bytes)),
        scratch_(aligned_bytes(kReduceSlots * 8)),
        stacks_(thread_stack_arena(n_, options.stack_bytes)) {
    for (unsigned t = 0; t < n_; ++t) {
      EmulatedContext& ctx = contexts_[t];
      ctx.launch_ = this;
      ctx.rank_ = t;
      ctx.block_threads_ = n_;
      ctx.block_dim_ = shape.block;
      ctx.grid_dim_ = shape.grid;
      ctx.thread_idx_ = Dim3{t % shape.block.x, (t / shape.block.x) % shape.block.y,
                             t / (shape.block.x * shape.block.y)};
      ctx.shared_ = shared_.get();
      ctx.shared_bytes_ = shape.shared_bytes;
      ctx.scratch_ = scratch_.get();
      Fiber& f = fibers_[t];
      f.stack = stacks_.stack(t);
      f.stack_size = stacks_.stack_size();
      f.context.prepare(f.stack, f.stack_size, &Launch::fiber_main);
#if defined(RIG_SIMT_TSAN)
      // Each fiber a thread of its own to ThreadSanitizer, which otherwise
      // takes the switched stacks for one impossibly deep stack and fails.
      f.tsan_fiber = __tsan_create_fiber(0);
#endif
    }
#if defined(RIG_SIMT_TSAN)
    main_tsan_fiber_ = __tsan_get_current_fiber();
#endif
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  ~Launch() {
    shutdown();
#if defined(RIG_SIMT_TSAN)
    for (const Fiber& f : fibers_) __tsan_destroy_fiber(f.tsan_fiber);
#endif
  }

  void run() {
    tls_launch = this;
    struct Reset {
      ~Reset() { tls_launch = nullptr; }
    } reset;
    const unsigned long long blocks = shape_.grid.count();
    std::vector<std::uint32_t> order(blocks);
    for (std::uint32_t b = 0; b < blocks; ++b) order[b] = b;
    std::mt19937_64 rng(mix(seed_));
    std::shuffle(order.begin(), order.end(), rng);
    try {
      for (const std::uint32_t b : order) run_block(b);
    } catch (...) {
      stop();
      throw;
    }
  }

  // A thread reaches sync() (kBarrier) or a shuffle (kShuffle): it waits
  // until the scheduler releases it.
  void wait(unsigned id, State state, const CallSite& site) {
    Fiber& f = fibers_[id];
    if (aborting_) return unwind(f);
    f.state = state;
    f.site = site;
    to_scheduler(f);
    if (aborting_) unwind(f);
  }

  std::uint64_t exchange(unsigned id, std::uint64_t bits, ShuffleOp op, unsigned arg,
                         const CallSite& site) {
    Fiber& f = fibers_[id];
    f.bits = bits;
    f.result = bits;
    f.op = op;
    f.arg = arg;
    wait(id, State::kShuffle, site);
    return f.result;
  }

 private:
  static void fiber_main() {
    Launch* self = tls_launch;
    const unsigned id = self->current_;
    Fiber& f = self->fibers_[id];
#if defined(RIG_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, &self->main_bottom_, &self->main_size_);
#endif
    f.started = true;
    while (!self->quitting_) {
      try {
        self->thunk_(self->kernel_, self->contexts_[id]);
      } catch (const FiberAbort&) {
      } catch (...) {
        if (!self->error_) self->error_ = std::current_exception();
      }
      f.state = State::kDone;
      self->to_scheduler(f);
    }
    // Leave for good: ASan frees this fiber's fake stack.
#if defined(RIG_SIMT_ASAN)
    __sanitizer_start_switch_fiber(nullptr, self->main_bottom_, self->main_size_);
#endif
    tsan_switch_to(self->main_tsan_fiber_);
    FiberContext::switch_to(f.context, self->main_context_);
  }

  // Unwinds a fiber of a stopped launch once; a kernel that swallows the
  // FiberAbort runs on without waiting anywhere.
  void unwind(Fiber& f) {
    if (f.abort_thrown) return;
    f.abort_thrown = true;
    throw FiberAbort{};
  }

  void resume(unsigned id) {
    Fiber& f = fibers_[id];
    current_ = id;
#if defined(RIG_SIMT_ASAN)
    __sanitizer_start_switch_fiber(&main_fake_stack_, f.stack, f.stack_size);
#endif
    tsan_switch_to(f.tsan_fiber);
    FiberContext::switch_to(main_context_, f.context);
#if defined(RIG_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(main_fake_stack_, nullptr, nullptr);
#endif
  }

  void to_scheduler(Fiber& f) {
#if defined(RIG_SIMT_ASAN)
    __sanitizer_start_switch_fiber(&f.fake_stack, main_bottom_, main_size_);
#endif
    tsan_switch_to(main_tsan_fiber_);
    FiberContext::switch_to(f.context, main_context_);
#if defined(RIG_SIMT_ASAN)
    __sanitizer_finish_switch_fiber(f.fake_stack, &main_bottom_, &main_size_);
#endif
  }

  void run_block(std::uint32_t linear) {
    const Dim3& g = shape_.grid;
    block_ = Dim3{linear % g.x, (linear / g.x) % g.y, linear / (g.x * g.y)};
    std::memset(shared_.get(), 0xFF, shape_.shared_bytes);
    std::memset(scratch_.get(), 0xFF, kReduceSlots * 8);
    for (unsigned t = 0; t < n_; ++t) {
      contexts_[t].block_idx_ = block_;
      fibers_[t].state = State::kFresh;
    }
    std::mt19937_64 rng(mix(seed_ ^ mix(linear + 1)));
    std::vector<unsigned> runnable;
    runnable.reserve(n_);
    for (;;) {
      runnable.clear();
      unsigned done = 0;
      for (unsigned t = 0; t < n_; ++t) {
        const State s = fibers_[t].state;
        if (s == State::kFresh || s == State::kRunnable) runnable.push_back(t);
        if (s == State::kDone) ++done;
      }
      if (runnable.empty()) {
        if (done == n_) return;
        release();
        continue;
      }
      std::shuffle(runnable.begin(), runnable.end(), rng);
      for (const unsigned t : runnable) {
        resume(t);
        if (error_) std::rethrow_exception(error_);
      }
    }
  }

  // Every thread of the block waits or has returned: exchange the values of
  // the warps whose lanes all wait at one shuffle, else pass the barrier.
  void release() {
    bool exchanged = false;
    for (unsigned lo = 0; lo < n_; lo += kWarpSize) {
      const unsigned hi = std::min(n_, lo + kWarpSize);
      bool any = false;
      for (unsigned t = lo; t < hi; ++t) any = any || fibers_[t].state == State::kShuffle;
      if (!any) continue;
      bool whole = hi - lo == kWarpSize;
      const Fiber& first = fibers_[lo];
      for (unsigned t = lo; t < hi && whole; ++t) {
        whole = fibers_[t].state == State::kShuffle && same_site(fibers_[t].site, first.site);
      }
      if (!whole) throw SimtError(shuffle_divergence(lo, hi));
      for (unsigned lane = 0; lane < kWarpSize; ++lane) {
        Fiber& f = fibers_[lo + lane];
        std::uint64_t src = lane;
        switch (f.op) {
          case ShuffleOp::kIndex:
            src = f.arg % kWarpSize;
            break;
          case ShuffleOp::kXor:
            src = lane ^ f.arg;
            break;
          case ShuffleOp::kDown:
            src = std::uint64_t{lane} + f.arg;
            break;
        }
        if (src >= kWarpSize) src = lane;  // past the warp: the lane's own value
        f.result = fibers_[lo + src].bits;
      }
      for (unsigned t = lo; t < hi; ++t) fibers_[t].state = State::kRunnable;
      exchanged = true;
    }
    if (exchanged) return;
    // No shuffle waits: every live thread waits at a barrier.
    const Fiber* first = nullptr;
    bool same = true;
    for (unsigned t = 0; t < n_; ++t) {
      const Fiber& f = fibers_[t];
      if (f.state != State::kBarrier) {
        same = false;
        continue;
      }
      if (first == nullptr) first = &f;
      same = same && same_site(f.site, first->site);
    }
    if (!same) throw SimtError(barrier_divergence());
    for (unsigned t = 0; t < n_; ++t) fibers_[t].state = State::kRunnable;
  }

  std::string where() const {
    return "block " + dim_string(block_) + " of a launch of grid " + dim_string(shape_.grid) +
           " x block " + dim_string(shape_.block);
  }

  std::string waits_at(const Fiber& f) const {
    if (f.state == State::kDone) return "have|has| exited";
    if (f.state == State::kBarrier) return "wait|waits| at sync() in " + site_string(f.site);
    if (f.state == State::kShuffle) {
      return std::string("wait|waits| at ") + op_name(f.op) + " in " + site_string(f.site);
    }
    return "are|is| runnable";  // not reached: release() runs when none is
  }

  std::string barrier_divergence() const {
    Groups groups;
    for (unsigned t = 0; t < n_; ++t) groups.add(t, waits_at(fibers_[t]));
    return "SIMT emulator: barrier divergence in " + where() + ": " + groups.text("thread") +
           ". Every thread of a block must reach the same sync() call, and none may return "
           "before it.";
  }

  std::string shuffle_divergence(unsigned lo, unsigned hi) const {
    Groups groups;
    for (unsigned t = lo; t < hi; ++t) groups.add(t - lo, waits_at(fibers_[t]));
    for (unsigned t = hi; t < lo + kWarpSize; ++t) {
      groups.add(t - lo, "do|does| not exist (the block has " + std::to_string(n_) + " threads)");
    }
    return "SIMT emulator: shuffle over inactive lanes in " + where() + ", warp " +
           std::to_string(lo / kWarpSize) + " (threads " + std::to_string(lo) + "-" +
           std::to_string(hi - 1) + "): " + groups.text("lane") +
           ". All 32 lanes of a warp must reach the same shuffle (mask 0xffffffff).";
  }

  // The launch stopped (an error in the scheduler or a kernel): unwind the
  // fibers suspended inside the kernel, so their destructors run.
  void stop() {
    aborting_ = true;
    for (unsigned t = 0; t < n_; ++t) {
      Fiber& f = fibers_[t];
      if (!f.started) continue;
      if (f.state == State::kRunnable || f.state == State::kBarrier || f.state == State::kShuffle) {
        resume(t);
      }
    }
  }

  // Lets every fiber suspended between blocks leave for good. A fiber still
  // inside the kernel (one that swallowed its FiberAbort and never returned)
  // is abandoned: its stack is plain memory.
  void shutdown() {
    quitting_ = true;
    for (unsigned t = 0; t < n_; ++t) {
      Fiber& f = fibers_[t];
      if (f.started && (f.state == State::kDone || f.state == State::kFresh)) {
        resume(t);
        f.started = false;
      }
    }
  }

  LaunchShape shape_;
  const void* kernel_;
  KernelThunk thunk_;
  std::uint64_t seed_;
  unsigned n_;
  std::unique_ptr<EmulatedContext[]> contexts_;
  std::vector<Fiber> fibers_;
  AlignedBytes shared_;
  AlignedBytes scratch_;
  StackArena& stacks_;  // this host thread's (thread_stack_arena)
  FiberContext main_context_;
  [[maybe_unused]] void* main_fake_stack_ = nullptr;
  [[maybe_unused]] const void* main_bottom_ = nullptr;
  [[maybe_unused]] std::size_t main_size_ = 0;
  void* main_tsan_fiber_ = nullptr;  // the launching thread's
  unsigned current_ = 0;
  Dim3 block_;
  bool aborting_ = false;
  bool quitting_ = false;
  std::exception_ptr error_;
};

}  // namespace detail

void EmulatedContext::sync(CallSite site) {
  launch_->wait(rank_, detail::State::kBarrier, site);
}

std::uint64_t EmulatedContext::exchange_bits(std::uint64_t bits, detail::ShuffleOp op, unsigned arg,
                                             const CallSite& site) {
  return launch_->exchange(rank_, bits, op, arg, site);
}

void emulate_erased(const LaunchShape& shape, const void* kernel, KernelThunk thunk,
                    const EmulatorOptions& options) {
  detail::validate(shape, options);
  // Checked before the launch takes this host thread's fiber stacks, which
  // the running launch's fibers are on.
  if (detail::tls_launch != nullptr) {
    throw SimtError("SIMT emulator: emulate() called from inside an emulated kernel");
  }
  detail::Launch launch(shape, kernel, thunk, options);
  launch.run();
}

}  // namespace rig::simt
