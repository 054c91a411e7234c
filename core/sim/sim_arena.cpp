// The sim device's memory: one memory file, a read-write view and a guard view
// (see sim_arena.hpp).
#include "sim/sim_arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

namespace rig::sim {
namespace detail {

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

Mapping::~Mapping() {
  if (address_ != nullptr) ::munmap(address_, bytes_);
}

}  // namespace detail

namespace {

constexpr std::size_t kGiB = std::size_t{1} << 30U;

std::size_t round_up(std::size_t value, std::size_t step) {
  return (value + step - 1) / step * step;
}
std::size_t round_down(std::size_t value, std::size_t step) {
  return value / step * step;
}

std::string describe_bytes(std::size_t bytes) {
  if (bytes % kGiB == 0) return fmt::format("{} GiB", bytes / kGiB);
  return fmt::format("{} bytes", bytes);
}

std::size_t page_size() {
  const long page = ::sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<std::size_t>(page) : 4096;
}

std::size_t checked_capacity(std::size_t bytes, std::size_t page) {
  if (bytes == 0 || bytes > SimArena::kMaxCapacityGb * kGiB) {
    throw std::invalid_argument(
        fmt::format("rig::sim::SimArena: a capacity of {} bytes: expected 1 byte to {} GiB", bytes,
                    SimArena::kMaxCapacityGb));
  }
  return round_up(bytes, page);
}

// An OS call failed with `error` (errno, read before anything could change it).
std::system_error os_error(int error, const std::string& message) {
  return {error, std::generic_category(), message};
}

// The memory file: `bytes` long but sparse, its pages exist once written. A
// memfd is charged to the memory of the process's cgroup as it is written, not
// at ftruncate (memfd_create makes it VM_NORESERVE).
detail::FileDescriptor create_file(std::size_t bytes) {
  detail::FileDescriptor file(::memfd_create("rig-sim", MFD_CLOEXEC));
  if (file.get() < 0) {
    const int error = errno;
    throw os_error(error, "rig::sim: memfd_create for the sim device's memory");
  }
  if (::ftruncate(file.get(), static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    throw os_error(error,
                   fmt::format("rig::sim: sizing the sim device's memory file to {}: set {} lower",
                               describe_bytes(bytes), kMemoryEnv));
  }
  return file;
}

// One reservation: a page kept inaccessible, the read-write view, the guard
// view. MAP_FIXED then maps the file over the reservation, so the two views lie
// exactly `capacity` apart and no other mapping can slip between them.
detail::Mapping map_views(int fd, std::size_t capacity, std::size_t page) {
  const std::size_t total = page + 2 * capacity;
  void* base =
      ::mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    const int error = errno;
    throw os_error(
        error, fmt::format("rig::sim: reserving address space for the sim device's two views of "
                           "{}: set {} lower, or raise the address-space limit (ulimit -v)",
                           describe_bytes(capacity), kMemoryEnv));
  }
  detail::Mapping reservation(base, total);
  std::byte* rw = static_cast<std::byte*>(base) + page;
  constexpr int kFlags = MAP_SHARED | MAP_FIXED | MAP_NORESERVE;
  if (::mmap(rw, capacity, PROT_READ | PROT_WRITE, kFlags, fd, 0) == MAP_FAILED ||
      ::mmap(rw + capacity, capacity, PROT_NONE, kFlags, fd, 0) == MAP_FAILED) {
    const int error = errno;
    throw os_error(error,
                   fmt::format("rig::sim: mapping the sim device's memory file ({}): set {} lower",
                               describe_bytes(capacity), kMemoryEnv));
  }
  return reservation;
}

// Without RIG_SIM_MEMORY_GB: kDefaultCapacity, but under an address-space limit
// at most a quarter of it (the two views take half, the program keeps the rest).
std::size_t default_capacity() {
  std::size_t capacity = kDefaultCapacity;
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    const std::size_t quarter = round_down(static_cast<std::size_t>(limit.rlim_cur) / 4, kGiB);
    capacity = std::clamp(quarter, kGiB, capacity);
  }
  return capacity;
}

SimArena* create_instance() {
  if (const auto configured = SimArena::configured_capacity()) return new SimArena(*configured);
  // Halve on ENOMEM: a kernel or container may allow less address space than
  // 64 GiB (vm.overcommit_memory=2 does not count these mappings: MAP_NORESERVE
  // and a memfd reserve no memory).
  for (std::size_t capacity = default_capacity();; capacity /= 2) {
    try {
      return new SimArena(capacity);
    } catch (const std::system_error& error) {
      if (error.code() != std::errc::not_enough_memory || capacity <= kGiB) throw;
    }
  }
}

}  // namespace

SimArena& SimArena::instance() {
  // Never deleted (see the header); LeakSanitizer sees it through this pointer.
  static SimArena* const arena = create_instance();
  return *arena;
}

std::optional<std::size_t> SimArena::configured_capacity() {
  const char* env = std::getenv(kMemoryEnv);
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string_view text(env);
  std::size_t gb = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), gb);
  if (error != std::errc() || end != text.data() + text.size() || gb == 0 || gb > kMaxCapacityGb) {
    throw std::invalid_argument(fmt::format(
        "{}='{}': expected a whole number of GiB from 1 to {}, the size of the sim device's memory "
        "(unset, it is {} GiB or what the address-space limit allows)",
        kMemoryEnv, text, kMaxCapacityGb, kDefaultCapacity / kGiB));
  }
  return gb * kGiB;
}

SimArena::SimArena(std::size_t capacity_bytes)
    : page_(page_size()),
      capacity_(checked_capacity(capacity_bytes, page_)),
      file_(create_file(capacity_)),
      reservation_(map_views(file_.get(), capacity_, page_)),
      rw_(reservation_.address() + page_),
      guard_(rw_ + capacity_) {
  static_assert(kAlignment > 0 && (kAlignment & (kAlignment - 1)) == 0);
  free_.emplace(0, capacity_);
}

std::byte* SimArena::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.end();
  std::size_t size = 0;
  if (bytes <= capacity_) {
    size = bytes == 0 ? kAlignment : round_up(bytes, kAlignment);
    // First fit in address order: as little fragmentation as best fit in
    // practice (Johnstone & Wilson, ISMM 1998), and one map to keep.
    it = std::find_if(free_.begin(), free_.end(),
                      [size](const auto& range) { return range.second >= size; });
  }
  if (it == free_.end()) {
    std::size_t largest = 0;
    for (const auto& range : free_) largest = std::max(largest, range.second);
    throw SimOutOfMemory(fmt::format(
        "rig::sim: out of sim device memory: asked for {} bytes, {} of {} bytes are in use and the "
        "largest free range is {} bytes: set {} higher, or keep fewer tensors alive",
        bytes, bytes_in_use_, capacity_, largest, kMemoryEnv));
  }
  const std::size_t offset = it->first;
  if (it->second == size) {
    live_.insert(free_.extract(it));  // the free range's node becomes the allocation's
  } else {
    live_.emplace(offset, size);  // the one step that may throw: nothing changed yet
    auto hint = std::next(it);
    auto rest = free_.extract(it);
    rest.key() += size;
    rest.mapped() -= size;
    free_.insert(hint, std::move(rest));
  }
  bytes_in_use_ += size;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  return reinterpret_cast<std::byte*>(guard_ + offset);
}

void SimArena::release(std::byte* guarded) noexcept {
  if (guarded == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto address = reinterpret_cast<std::uintptr_t>(guarded);
  auto block = contains(guarded) ? live_.extract(address - guard_) : decltype(live_)::node_type();
  if (block.empty()) {
    const char* why = contains(guarded)
                          ? "not the start of a live allocation (released twice, or inside one?)"
                      : address - rw_ < capacity_
                          ? "a read-write address from open(); release the guard address that "
                            "allocate() returned"
                          : "not an address of this sim arena";
    std::fprintf(stderr, "rig::sim::SimArena::release(%p): %s\n", static_cast<void*>(guarded), why);
    std::abort();
  }
  const std::size_t offset = block.key();
  const std::size_t size = block.mapped();
  bytes_in_use_ -= size;
  // Coalesce with the free ranges on either side; moving nodes, never allocating.
  std::size_t begin = offset;
  std::size_t end = offset + size;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == end) {
    end += next->second;
    next = free_.erase(next);
  }
  auto prev = next == free_.begin() ? free_.end() : std::prev(next);
  if (prev != free_.end() && prev->first + prev->second == begin) {
    begin = prev->first;
    prev->second = end - begin;
  } else {
    block.mapped() = end - begin;
    free_.insert(next, std::move(block));
  }
  // Invariant: no whole page inside a free range holds memory. The pages that
  // just became whole and free are those of [begin, end) that overlap the block.
  const std::size_t first = std::max(round_up(begin, page_), round_down(offset, page_));
  const std::size_t last = std::min(round_down(end, page_), round_up(offset + size, page_));
  if (first < last) give_back_pages(first, last);
}

void SimArena::give_back_pages(std::size_t begin, std::size_t end) noexcept {
  // Under the lock: once unlocked, the range may be allocated and written, and a
  // late hole would zero the new owner's data. A failure only keeps the memory.
  (void)::fallocate(file_.get(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(begin), static_cast<off_t>(end - begin));
}

void* SimArena::open_address(const void* guarded) const {
  if (guarded == nullptr) return nullptr;
  const auto address = reinterpret_cast<std::uintptr_t>(guarded);
  // Unsigned: an address below guard_ wraps round to a huge difference.
  if (address - guard_ <= capacity_) [[likely]] {
    return reinterpret_cast<void*>(address - capacity_);
  }
  throw std::logic_error(fmt::format(
      "rig::sim: open({}): {}", guarded,
      address - rw_ < capacity_
          ? "already a read-write address (opened twice?); open() takes the guard address a tensor "
            "holds"
          : fmt::format("not sim device memory (the guard view is [{:#x}, {:#x})): only addresses "
                        "from SimArena::allocate, or inside their allocations, can be opened",
                        guard_, guard_ + capacity_)));
}

std::size_t SimArena::allocation_size(const void* guarded) const {
  const auto address = reinterpret_cast<std::uintptr_t>(guarded);
  std::lock_guard<std::mutex> lock(mutex_);
  if (contains(guarded)) {
    const auto it = live_.find(address - guard_);
    if (it != live_.end()) return it->second;
  }
  throw std::logic_error(fmt::format(
      "rig::sim: allocation_size({}): not the start of a live sim allocation", guarded));
}

SimArenaStats SimArena::stats() const {
  SimArenaStats stats;
  stats.capacity_bytes = capacity_;
  struct stat file_status {};
  if (::fstat(file_.get(), &file_status) == 0) {
    stats.resident_bytes = static_cast<std::size_t>(file_status.st_blocks) * 512;  // POSIX units
  }
  std::lock_guard<std::mutex> lock(mutex_);
  stats.bytes_in_use = bytes_in_use_;
  stats.peak_bytes_in_use = peak_bytes_in_use_;
  stats.allocations = live_.size();
  stats.free_ranges = free_.size();
  for (const auto& range : free_) {
    stats.largest_free_bytes = std::max(stats.largest_free_bytes, range.second);
  }
  return stats;
}

void SimArena::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_bytes_in_use_ = bytes_in_use_;
}

}  // namespace rig::sim
