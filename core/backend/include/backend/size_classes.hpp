// The sizes both caching allocators serve (backend::CachingAllocator on the
// host and the sim device, cuda::DeviceCachingAllocator on a GPU): requests up
// to 1 MiB are rounded to a size class, multiples of `granularity` up to
// 4 KiB, then 8 classes per power of two (at most 12.5% waste), each with a
// free list of whole blocks; larger ones are pieces of segments
// (SegmentPool), multiples of `granularity`. Only the granularity differs:
// 64 B on the host (a cache line), 512 B on a GPU.
#pragma once

#include <bit>
#include <cstddef>

namespace rig::backend::size_classes {

inline constexpr std::size_t kMiB = std::size_t{1} << 20U;
inline constexpr std::size_t kSmallLimit = 4096;  // whole multiples of the granularity up to here
inline constexpr unsigned kSmallBits = 12;        // log2(kSmallLimit)
inline constexpr unsigned kSubSteps = 8;          // classes per power of two above kSmallLimit
inline constexpr std::size_t kLargeAbove = kMiB;  // larger requests take pieces of segments
// Up to this, a large request's segment is kSharedSegment, which several share.
inline constexpr std::size_t kSharedSegmentUpTo = 10 * kMiB;
inline constexpr std::size_t kSharedSegment = 20 * kMiB;
inline constexpr std::size_t kSegmentGranularity = 2 * kMiB;

constexpr std::size_t round_up(std::size_t bytes, std::size_t granularity) {
  return (bytes + granularity - 1) & ~(granularity - 1);
}

// The size a request of `bytes` is served at (smaller than `bytes` only when
// that overflowed).
constexpr std::size_t round_size(std::size_t bytes, std::size_t granularity) {
  if (bytes <= kSmallLimit || bytes > kLargeAbove) {
    return bytes == 0 ? granularity : round_up(bytes, granularity);
  }
  // 2^p < bytes <= 2^(p+1): round up to a multiple of 2^p / kSubSteps.
  const unsigned p = static_cast<unsigned>(std::bit_width(bytes - 1)) - 1;
  return round_up(bytes, std::size_t{1} << (p - 3));
}

constexpr bool is_large(std::size_t rounded) {
  return rounded > kLargeAbove;
}

// The segment a large request of `rounded` bytes allocates when no free piece
// fits: kSharedSegment up to kSharedSegmentUpTo, else `rounded` rounded up to
// 2 MiB (smaller than `rounded` only when that overflowed).
constexpr std::size_t segment_size(std::size_t rounded) {
  return rounded <= kSharedSegmentUpTo ? kSharedSegment : round_up(rounded, kSegmentGranularity);
}

// The small classes: their number, a rounded size's index and its inverse.
constexpr std::size_t class_count(std::size_t granularity) {
  return kSmallLimit / granularity + 8 * kSubSteps;  // 4 KiB .. 1 MiB: 8 powers of two
}

constexpr std::size_t class_index(std::size_t rounded, std::size_t granularity) {
  if (rounded <= kSmallLimit) return rounded / granularity - 1;
  const unsigned p = static_cast<unsigned>(std::bit_width(rounded - 1)) - 1;
  const std::size_t k = rounded >> (p - 3);  // kSubSteps + 1 .. 2 kSubSteps
  return kSmallLimit / granularity + (p - kSmallBits) * kSubSteps + (k - kSubSteps - 1);
}

constexpr std::size_t class_capacity(std::size_t index, std::size_t granularity) {
  if (index < kSmallLimit / granularity) return (index + 1) * granularity;
  const std::size_t j = index - kSmallLimit / granularity;
  const std::size_t p = kSmallBits + j / kSubSteps;
  return (kSubSteps + 1 + j % kSubSteps) << (p - 3);
}

}  // namespace rig::backend::size_classes
