// Dropout (Backend::dropout_forward/backward, core/cpu/dropout.cpp): element
// i is kept when math::dropout_keeps(stream.bits(i), threshold) with the
// stream math::PhiloxStream::of(key.seed, key.step, key.rank, key.purpose) and
// threshold math::dropout_threshold(p); dst = keep ? src * scale : 0 for f32,
// f16 and bf16 (computed in f32), mask bit i % 32 of word i / 32 = kept.
//   DropoutForward: each warp takes chunks of 128 elements (one Philox block,
//     4 elements, per lane); the 8 lanes of a mask word combine their bits
//     with shuffles and the first writes the word. As on the CPU, the last
//     word's bits past n are those of the stream's next elements.
//     Where the operands are aligned, a lane's 4 elements move as one pack
//     (packed.hpp).
//   DropoutBackward: dx = bit ? grad * scale : 0, a thread taking chunks of
//     kPack elements (a byte of the mask each): packs where grad and dx are
//     aligned, else element by element.
//   With DropoutRows (dropout_add only), the dropped tensor is first scaled
//     per row (forward), its gradient scaled per row last (backward).
//   With relu_mask (Backend::relu_mask): the stored dst > 0 as the bits
//     cuBLASLt's DRELU epilogue reads, bit (r * relu_mask_ld + c) for
//     element r * relu_cols + c (relu_cols % 8 == 0): the two lanes of 8
//     consecutive elements combine their bits with a shuffle and the first
//     writes the byte. dst null stores nothing else (a mask of src itself).
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/math/philox.hpp"

namespace rig::kernels {

inline constexpr std::int64_t kDropoutChunk = 4 * simt::kWarpSize;  // elements per warp step

// Backend::RowScale in a kernel: element i of the dropped tensor is
// multiplied by data[i / row_length] (of the kernel's type) and rounded to
// it, as a mul by a [..., 1] tensor rounds.
struct DropoutRows {
  const void* data = nullptr;
  std::int64_t row_length = 1;

  // N consecutive values from element `first` (the row is found once, then
  // followed across row ends).
  template <int N>
  RIG_HD_INLINE Pack<N> scaled(const Pack<N>& v, ElementType type, std::int64_t first) const {
    if (data == nullptr) return v;
    const auto [quotient, remainder] = div_mod(first, row_length);
    std::int64_t row = quotient, at = remainder;
    Pack<N> out;
    for (int e = 0; e < N; ++e) {
      out.v[e] = rounded_to(type, v.v[e] * load_element(data, type, row));
      if (++at == row_length) {
        at = 0;
        ++row;
      }
    }
    return out;
  }
};

struct DropoutForward {
  math::PhiloxStream stream{};  // PhiloxStream::of(key.seed, key.step, key.rank, key.purpose)
  std::uint32_t threshold = 0;  // math::dropout_threshold(p)
  float scale = 1.0F;
  ElementType type = ElementType::f32;
  const void* src = nullptr;
  void* dst = nullptr;                 // may be src
  std::uint32_t* mask_bits = nullptr;  // [ceil(n / 32)] or null
  std::int64_t n = 0;
  // Where set, dst = residual + the dropped value (rounded to `type` first:
  // the bits of dropout then an add; a residual connection in one pass).
  const void* residual = nullptr;
  DropoutRows rows{};  // src scaled per row first (with residual only)
  // Where set (no residual, relu_cols % 8 == 0, relu_mask_ld % 8 == 0): the
  // relu mask of the stored values, [n / relu_cols rows, relu_mask_ld bits].
  std::uint8_t* relu_mask = nullptr;
  std::int64_t relu_cols = 0, relu_mask_ld = 0;

  // A lane's Philox block is a pack of 4 elements (packed.hpp) where every
  // operand allows; a last, partial one goes element by element.
  RIG_HD bool packed() const {
    return pack_aligned<4>(src, type) && pack_aligned<4>(dst, type) &&
           pack_aligned<4>(residual, type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    const std::int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
    return plan_grid_stride(device, chunks * simt::kWarpSize, 1, 50);  // ptxas: 50 (sm_75)
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
    const std::int64_t words = (n + 31) / 32;
    const unsigned lane = ctx.lane();
    const std::int64_t warps = grid_threads(ctx) / simt::kWarpSize;
    const bool pack = packed();
    // Warp-uniform loop: every lane of a warp runs the same iterations.
    for (std::int64_t c = global_thread(ctx) / simt::kWarpSize; c < chunks; c += warps) {
      const std::int64_t block = c * simt::kWarpSize + lane;
      const math::PhiloxBlock r = stream.block(static_cast<std::uint64_t>(block));
      // The block's 4 elements: one pack where the operands allow, else
      // element by element (a last, partial block; lanes past n have none).
      const std::int64_t first = 4 * block;
      const int valid = chunk_elements<4>(n, first);
      const Pack<4> s = rows.scaled(load_chunk<4>(src, type, first, valid, pack), type, first);
      const Pack<4> res =
          residual != nullptr ? load_chunk<4>(residual, type, first, valid, pack) : Pack<4>{};
      Pack<4> out;
      std::uint32_t word = 0;
      for (unsigned k = 0; k < 4; ++k) {
        const bool keep = math::dropout_keeps(r.v[k], threshold);
        const float v = keep ? s.v[k] * scale : 0.0F;
        out.v[k] = residual == nullptr ? v : res.v[k] + rounded_to(type, v);
        word |= static_cast<std::uint32_t>(keep) << (4U * (lane % 8U) + k);
      }
      if (dst != nullptr) store_chunk<4>(dst, type, first, valid, pack, out);
      if (relu_mask != nullptr) store_relu_bits(ctx, first, valid, out);  // uniform
      if (mask_bits == nullptr) continue;                                 // uniform over the launch
      for (unsigned mask = 1; mask < 8; mask *= 2) word |= ctx.shfl_xor(word, mask);
      const std::int64_t w = c * 4 + lane / 8;
      if (lane % 8 == 0 && w < words) mask_bits[w] = word;
    }
  }

  // The relu bits of a lane's 4 values (element `first` on): the even lane
  // of each pair writes the byte of its 8 elements (first % 8 == 0 there).
  template <class Ctx>
  RIG_HD void store_relu_bits(Ctx& ctx, std::int64_t first, int valid, const Pack<4>& out) const {
    std::uint32_t nibble = 0;
    for (int k = 0; k < 4; ++k) {
      if (k < valid && rounded_to(type, out.v[k]) > 0.0F) nibble |= 1U << k;
    }
    const std::uint32_t other = ctx.shfl_xor(nibble, 1);
    if (ctx.lane() % 2 != 0 || valid == 0) return;
    const auto [row, col] = div_mod(first, relu_cols);
    relu_mask[(row * relu_mask_ld + col) / 8] = static_cast<std::uint8_t>(nibble | (other << 4));
  }
};

struct DropoutBackward {
  const std::uint32_t* mask_bits = nullptr;
  float scale = 1.0F;
  ElementType type = ElementType::f32;
  const void* grad = nullptr;
  void* dx = nullptr;  // may be grad
  std::int64_t n = 0;
  // dx rounded to `type`, then scaled per row and rounded again (the
  // backward of a mul by a [..., 1] tensor before the dropout).
  DropoutRows rows{};

  // In packs of kPack elements (packed.hpp, a byte of the mask each) where
  // grad and dx allow.
  RIG_HD bool packed() const {
    return pack_aligned<kPack>(grad, type) && pack_aligned<kPack>(dx, type);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kPack, 45);  // ptxas: 45 sm_75, 38 sm_90
  }

  // A thread takes chunks of kPack elements (a byte of the mask each), as
  // packs where grad and dx allow, else element by element.
  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    static_assert(32 % kPack == 0, "a chunk's mask bits lie in one word");
    const bool pack = packed();
    for_chunks(n, global_thread(ctx), grid_threads(ctx), [&](std::int64_t q, int valid) {
      const std::int64_t first = q * kPack;
      const std::uint32_t bits = mask_bits[first / 32] >> (first % 32);
      const Pack<kPack> g = load_chunk<kPack>(grad, type, first, valid, pack);
      Pack<kPack> d;
      for (int e = 0; e < kPack; ++e) {
        d.v[e] = ((bits >> e) & 1U) != 0 ? rounded_to(type, g.v[e] * scale) : 0.0F;
      }
      store_chunk<kPack>(dx, type, first, valid, pack, rows.scaled(d, type, first));
    });
  }
};

}  // namespace rig::kernels
