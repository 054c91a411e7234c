// The memory of the `sim` device: a testing device that runs the CPU kernels on
// memory that no code outside the sim backend can read or write, so that a whole
// experiment proves, on a machine without a GPU, that rig never dereferences
// device memory from host code.
//
// One memory file (memfd_create) is mapped twice, side by side in one
// reservation of address space:
//
//   [ 1 page, no access | read-write view | guard view, no access (PROT_NONE) ]
//
// Tensors hold guard-view addresses: host code that dereferences one faults at
// once (SIGSEGV), as it would on a CUDA device pointer. The sim backend's kernels
// translate them with open() to the read-write view, which maps the same file at
// the same offsets, so the translation is one constant offset. The read-write
// view has inaccessible pages on both sides, so a kernel that runs off either end
// of it faults too.
//
// Pages cost memory only once written; freed whole pages are given back to the
// kernel (a hole punched in the file), so a long run does not grow without bound.
//
// After fork() without exec, parent and child share the memory (the mappings are
// MAP_SHARED): use the sim device in one process of a family only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace rig::sim {

// The environment variable that sizes SimArena::instance(): whole GiB.
inline constexpr const char* kMemoryEnv = "RIG_SIM_MEMORY_GB";
// The size of SimArena::instance() without RIG_SIM_MEMORY_GB (or less, see instance()).
inline constexpr std::size_t kDefaultCapacity = std::size_t{64} << 30U;
// The alignment of every allocation: a cache line, what AVX-512 loads want.
inline constexpr std::size_t kAlignment = 64;

struct SimArenaStats {
  std::size_t capacity_bytes = 0;
  std::size_t bytes_in_use = 0;       // allocated, each allocation rounded up to kAlignment
  std::size_t peak_bytes_in_use = 0;  // highest bytes_in_use since construction or reset_peak
  std::size_t allocations = 0;        // live allocations
  std::size_t free_ranges = 0;        // 1 when nothing is allocated (everything coalesced)
  std::size_t largest_free_bytes = 0;
  std::size_t resident_bytes = 0;  // memory the file holds: pages written and not given back
};

// Out of sim memory: a std::bad_alloc (what the caching allocator above catches)
// whose what() says how much was asked for, what is left and what to change.
class SimOutOfMemory : public std::bad_alloc {
 public:
  explicit SimOutOfMemory(const std::string& message) : message_(message) {}
  const char* what() const noexcept override { return message_.what(); }

 private:
  std::runtime_error message_;  // a string whose copies cannot throw
};

namespace detail {

// RAII: a file descriptor, closed on destruction.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&&) = delete;
  ~FileDescriptor();
  int get() const noexcept { return fd_; }

 private:
  int fd_;
};

// RAII: a range of address space from mmap, unmapped on destruction.
class Mapping {
 public:
  Mapping(void* address, std::size_t bytes) noexcept : address_(address), bytes_(bytes) {}
  Mapping(Mapping&& other) noexcept
      : address_(std::exchange(other.address_, nullptr)), bytes_(other.bytes_) {}
  Mapping& operator=(Mapping&&) = delete;
  ~Mapping();
  std::uintptr_t address() const noexcept { return reinterpret_cast<std::uintptr_t>(address_); }

 private:
  void* address_;
  std::size_t bytes_;
};

}  // namespace detail

class SimArena {
 public:
  // The process's arena, created on first use (thread-safe: a function-local
  // static), sized by RIG_SIM_MEMORY_GB, else kDefaultCapacity or what the
  // address-space limit (ulimit -v) and the kernel allow, halving down to 1 GiB.
  // Throws std::invalid_argument for a bad RIG_SIM_MEMORY_GB and
  // std::system_error when the address space cannot be reserved (a later call
  // tries again).
  //
  // It is never destroyed: tensors in static or thread-local objects, and the
  // caching allocator above, may release sim memory while the program exits,
  // after a destroyed arena would have unmapped it. The kernel takes the
  // mappings and the file back at exit.
  static SimArena& instance();

  // The largest arena: 32 TiB, whose two views fill half of x86-64's 128 TiB
  // of user address space.
  static constexpr std::size_t kMaxCapacityGb = std::size_t{1} << 15U;

  // RIG_SIM_MEMORY_GB in bytes; nullopt when unset or empty. Throws
  // std::invalid_argument naming the variable when it is not a whole number of
  // GiB from 1 to kMaxCapacityGb.
  static std::optional<std::size_t> configured_capacity();

  // An arena of `capacity_bytes` (rounded up to whole pages), for tests and for
  // instance(). Throws std::invalid_argument for 0 or more than kMaxCapacityGb
  // GiB, and std::system_error when the memory file or the address space cannot
  // be had.
  explicit SimArena(std::size_t capacity_bytes);
  ~SimArena() = default;
  SimArena(const SimArena&) = delete;
  SimArena& operator=(const SimArena&) = delete;

  // A guard-view address of `bytes` (rounded up to kAlignment), aligned to
  // kAlignment. Its contents are unspecified (as cudaMalloc's): zero when never
  // written, else what an earlier allocation left. allocate(0) takes kAlignment
  // bytes, so it too returns a unique address that must be released. Throws
  // SimOutOfMemory (a std::bad_alloc) when no free range is large enough.
  std::byte* allocate(std::size_t bytes);
  // Frees an address allocate() returned; nullptr is ignored. Whole pages that
  // become free go back to the kernel. Anything else (a double release, an
  // interior or read-write address) is a bug that cannot be reported from
  // noexcept: it prints what was passed and aborts.
  void release(std::byte* guarded) noexcept;

  // Whether `address` lies in the guard view (false for read-write addresses).
  bool contains(const void* address) const noexcept {
    const auto a = reinterpret_cast<std::uintptr_t>(address);
    return a >= guard_ && a - guard_ < capacity_;
  }

  // The read-write twin of a guard-view address, for the sim backend's kernels
  // only; nullptr stays nullptr, and the end of the guard view (an end pointer)
  // is allowed. Any other address is a bug: throws std::logic_error naming it.
  // Lock-free: one comparison and one subtraction.
  template <class T>
  T* open(T* guarded) const {
    return static_cast<T*>(open_address(guarded));
  }

  // The size (rounded up to kAlignment) of the live allocation that starts at
  // `guarded`; throws std::logic_error for any other address.
  std::size_t allocation_size(const void* guarded) const;

  std::size_t capacity() const noexcept { return capacity_; }
  SimArenaStats stats() const;
  void reset_peak();

 private:
  void* open_address(const void* guarded) const;
  void give_back_pages(std::size_t begin, std::size_t end) noexcept;

  // Declared in construction order: a later one that throws destroys the earlier.
  const std::size_t page_;
  const std::size_t capacity_;
  const detail::FileDescriptor file_;  // the memory file
  const detail::Mapping reservation_;  // both views and the page before them
  const std::uintptr_t rw_;            // the read-write view: file offset 0 is here
  const std::uintptr_t guard_;         // the guard view: rw_ + capacity_

  mutable std::mutex mutex_;
  // Offset -> size. Both maps have the same node type, so a block moves between
  // them without allocating: release() never allocates.
  std::map<std::size_t, std::size_t> free_;
  std::map<std::size_t, std::size_t> live_;
  std::size_t bytes_in_use_ = 0;
  std::size_t peak_bytes_in_use_ = 0;
};

}  // namespace rig::sim
