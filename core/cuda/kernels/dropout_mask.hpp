// Dropout keep masks as bytes (Backend::dropout_mask, core/cpu/dropout.cpp):
// mask[i] = 1 where element first + i of the stream is kept, else 0, with
// the stream math::PhiloxStream::of(key.seed, key.step, key.rank,
// key.purpose) and the rule math::dropout_keeps(bits, dropout_threshold(p)),
// as DropoutForward uses them. Integer math only: bit-exact with the CPU.
//
// Wiring, per entry point:
//   dropout_mask: one DropoutMask{PhiloxStream::of(key.seed, key.step,
//     key.rank, key.purpose), math::dropout_threshold(p), mask, n, first}.
//     No scratch, no host copies; launches nothing for n 0.
// One thread per Philox block (4 stream elements, 4 mask bytes): a block
// wholly inside the mask and 4-byte aligned there is stored as one 32-bit
// word, the others byte by byte.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/math/philox.hpp"

namespace rig::kernels {

struct DropoutMask {
  math::PhiloxStream stream{};   // PhiloxStream::of(key.seed, key.step, key.rank, key.purpose)
  std::uint32_t threshold = 0;   // math::dropout_threshold(p)
  std::uint8_t* mask = nullptr;  // [n]
  std::int64_t n = 0;
  std::uint64_t first = 0;  // the stream element of mask[0]

  // Philox blocks covering stream elements [first, first + n).
  RIG_HD_INLINE std::int64_t blocks() const {
    if (n <= 0) return 0;
    const std::uint64_t last = first + static_cast<std::uint64_t>(n) - 1;
    return static_cast<std::int64_t>(last / 4 - first / 4 + 1);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, blocks(), 1, 32);  // ptxas: 30
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t count = blocks();
    const std::uint64_t first_block = first / 4;
    for (std::int64_t t = global_thread(ctx); t < count; t += grid_threads(ctx)) {
      const std::uint64_t b = first_block + static_cast<std::uint64_t>(t);
      const math::PhiloxBlock r = stream.block(b);
      // Mask position of the block's element 0 (negative: before mask[0]).
      const std::int64_t i0 = static_cast<std::int64_t>(4 * b - first);
      std::uint8_t keep[4];
      for (unsigned k = 0; k < 4; ++k) keep[k] = math::dropout_keeps(r.v[k], threshold) ? 1 : 0;
      const bool whole = i0 >= 0 && i0 + 4 <= n;
      if (whole && reinterpret_cast<std::uintptr_t>(mask + i0) % 4 == 0) {
        const std::uint32_t word =
            static_cast<std::uint32_t>(keep[0]) | static_cast<std::uint32_t>(keep[1]) << 8U |
            static_cast<std::uint32_t>(keep[2]) << 16U | static_cast<std::uint32_t>(keep[3]) << 24U;
        *reinterpret_cast<std::uint32_t*>(mask + i0) = word;  // little-endian: byte k = keep[k]
        continue;
      }
      for (unsigned k = 0; k < 4; ++k) {
        const std::int64_t i = i0 + static_cast<std::int64_t>(k);
        if (i >= 0 && i < n) mask[i] = keep[k];
      }
    }
  }
};

}  // namespace rig::kernels
