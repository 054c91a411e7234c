// Strided copies, casts and fills (Backend::copy_strided / fill_strided,
// core/cpu/tensor_copy.cpp) over up to kCopyMaxDims axes with arbitrary
// element strides, and a contiguous byte copy:
//   CopyStrided: dst = src converted to dst's dtype (f32, f16, bf16, i32,
//     i64, u8): floats to integers truncated toward zero, saturated, NaN -> 0;
//     integers to integers wrapped; integers to floats through f32 (as the
//     CPU: static_cast<float>, then narrowed); narrowing to f16/bf16 rounds to
//     nearest even. The same dtype copies the bits. Grid-stride per element,
//     or in packs (packed.hpp) for a contiguous cast between floating dtypes.
//   FillStrided: dst = value converted to dst's dtype as above (packed where
//     dst is contiguous and floating).
//   CopyContiguous: `bytes` bytes, in words of the widest of 16, 8, 4, 2, 1
//     bytes that both pointers are aligned to (16-byte loads and stores when
//     both are 16-byte aligned), the bytes past the last whole word one at a
//     time. The launcher uses it for copy_strided with equal dtypes and both
//     operands contiguous.
// The launcher merges axes first (backend::make_strided_plan) so that ndim
// stays within kCopyMaxDims.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/dtype.hpp"
#include "rig/half.hpp"

namespace rig::kernels {

inline constexpr int kCopyMaxDims = 8;

RIG_HD_INLINE int dtype_bytes(DType t) {
  switch (t) {
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    default:
      return 4;
  }
}

RIG_HD_INLINE bool dtype_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

// f -> integer: NaN 0, saturated at the type's limits, else truncated. The
// limits as floats (2^31, 2^63 round up: at or beyond them saturates).
RIG_HD_INLINE std::int64_t saturate_i64(float v) {
  if (!(v == v)) return 0;
  if (v <= -9223372036854775808.0F) return static_cast<std::int64_t>(0x8000000000000000ULL);
  if (v >= 9223372036854775808.0F) return 0x7FFFFFFFFFFFFFFFLL;
  return static_cast<std::int64_t>(v);
}
RIG_HD_INLINE std::int32_t saturate_i32(float v) {
  if (!(v == v)) return 0;
  if (v <= -2147483648.0F) return static_cast<std::int32_t>(0x80000000U);
  if (v >= 2147483648.0F) return 0x7FFFFFFF;
  return static_cast<std::int32_t>(v);
}
RIG_HD_INLINE std::uint8_t saturate_u8(float v) {
  if (!(v == v)) return 0;
  if (v <= 0.0F) return 0;
  if (v >= 255.0F) return 255;
  return static_cast<std::uint8_t>(v);
}

RIG_HD_INLINE void store_float_as(void* dst, DType t, std::int64_t i, float f) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(dst)[i] = f;
      break;
    case DType::f16:
      static_cast<std::uint16_t*>(dst)[i] = float_to_half_bits(f);
      break;
    case DType::bf16:
      static_cast<std::uint16_t*>(dst)[i] = float_to_bfloat16_bits(f);
      break;
    case DType::i32:
      static_cast<std::int32_t*>(dst)[i] = saturate_i32(f);
      break;
    case DType::i64:
      static_cast<std::int64_t*>(dst)[i] = saturate_i64(f);
      break;
    case DType::u8:
      static_cast<std::uint8_t*>(dst)[i] = saturate_u8(f);
      break;
  }
}

RIG_HD_INLINE void store_int_as(void* dst, DType t, std::int64_t i, std::int64_t v) {
  switch (t) {
    case DType::i32:
      static_cast<std::int32_t*>(dst)[i] = static_cast<std::int32_t>(v);  // wraps
      break;
    case DType::i64:
      static_cast<std::int64_t*>(dst)[i] = v;
      break;
    case DType::u8:
      static_cast<std::uint8_t*>(dst)[i] = static_cast<std::uint8_t>(v);  // wraps
      break;
    default:
      store_float_as(dst, t, i, static_cast<float>(v));
      break;
  }
}

RIG_HD_INLINE float load_float(const void* src, DType t, std::int64_t i) {
  switch (t) {
    case DType::f16:
      return half_bits_to_float(static_cast<const std::uint16_t*>(src)[i]);
    case DType::bf16:
      return bfloat16_bits_to_float(static_cast<const std::uint16_t*>(src)[i]);
    default:
      return static_cast<const float*>(src)[i];
  }
}

RIG_HD_INLINE std::int64_t load_int(const void* src, DType t, std::int64_t i) {
  switch (t) {
    case DType::i32:
      return static_cast<const std::int32_t*>(src)[i];
    case DType::u8:
      return static_cast<const std::uint8_t*>(src)[i];
    default:
      return static_cast<const std::int64_t*>(src)[i];
  }
}

// Copies element si of src to element di of dst, converting.
RIG_HD_INLINE void convert_element(void* dst, DType dt, std::int64_t di, const void* src, DType st,
                                   std::int64_t si) {
  if (dt == st) {
    switch (dtype_bytes(dt)) {
      case 1:
        static_cast<std::uint8_t*>(dst)[di] = static_cast<const std::uint8_t*>(src)[si];
        return;
      case 2:
        static_cast<std::uint16_t*>(dst)[di] = static_cast<const std::uint16_t*>(src)[si];
        return;
      case 4:
        static_cast<std::uint32_t*>(dst)[di] = static_cast<const std::uint32_t*>(src)[si];
        return;
      default:
        static_cast<std::uint64_t*>(dst)[di] = static_cast<const std::uint64_t*>(src)[si];
        return;
    }
  }
  if (dtype_floating(st)) {
    store_float_as(dst, dt, di, load_float(src, st, si));
  } else {
    store_int_as(dst, dt, di, load_int(src, st, si));
  }
}

// Element i of src as stored: its bytes in the low bytes of a word (both
// the GPU and the emulator's hosts are little-endian), so that
// convert_element(dst, dt, di, &word, st, 0) stores it converted.
RIG_HD_INLINE std::uint64_t load_stored(const void* src, DType t, std::int64_t i) {
  switch (dtype_bytes(t)) {
    case 1:
      return static_cast<const std::uint8_t*>(src)[i];
    case 2:
      return static_cast<const std::uint16_t*>(src)[i];
    case 4:
      return static_cast<const std::uint32_t*>(src)[i];
    default:
      return static_cast<const std::uint64_t*>(src)[i];
  }
}

// A floating dtype as the element-wise kernels' ElementType (t floating).
RIG_HD_INLINE ElementType element_type_of(DType t) {
  return t == DType::f16    ? ElementType::f16
         : t == DType::bf16 ? ElementType::bf16
                            : ElementType::f32;
}

// Whether a contiguous operand of dtype t at `data` (stride `stride`) can
// move in packs of kPack floats (packed.hpp).
RIG_HD_INLINE bool float_packs(const void* data, DType t, std::int64_t stride) {
  return stride == 1 && dtype_floating(t) && pack_aligned<kPack>(data, element_type_of(t));
}

struct CopyStrided {
  int ndim = 1;  // >= 1, <= kCopyMaxDims
  std::int64_t shape[kCopyMaxDims] = {};
  std::int64_t strides[2][kCopyMaxDims] = {};  // [0] dst, [1] src, in elements
  void* dst = nullptr;
  DType dst_type = DType::f32;
  const void* src = nullptr;  // must not overlap dst
  DType src_type = DType::f32;

  // A contiguous cast between two floating dtypes in packs (packed.hpp): the
  // conversions of load_float and store_float_as, the same bits (a copy
  // within one dtype keeps its bits, NaN payloads and all, element by
  // element; the launcher sends contiguous ones to CopyContiguous).
  RIG_HD bool packed() const {
    return ndim == 1 && dst_type != src_type && float_packs(dst, dst_type, strides[0][0]) &&
           float_packs(src, src_type, strides[1][0]);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(ndim, shape), packed() ? kPack : kUnroll,
                            64);  // ptxas: 64
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      std::int64_t dst;
      std::uint64_t stored;
    };
    if (packed()) {  // uniform over the launch
      const ElementType st = element_type_of(src_type), dt = element_type_of(dst_type);
      packed_grid_stride(
          ctx, shape[0],
          [&](std::int64_t k) { store_pack<kPack>(dst, dt, k, load_pack<kPack>(src, st, k)); },
          [&](std::int64_t i) { convert_element(dst, dst_type, i, src, src_type, i); });
      return;
    }
    unrolled_grid_stride(
        ctx, shape_elements(ndim, shape),
        [&](std::int64_t i) {
          std::int64_t off[2];
          strided_offsets(i, ndim, shape, strides, off);
          return Loaded{off[0], load_stored(src, src_type, off[1])};
        },
        [&](std::int64_t, const Loaded& v) {
          convert_element(dst, dst_type, v.dst, &v.stored, src_type, 0);
        });
  }
};

// dst = value converted to dst_type; a destination stride 0 (repeated
// elements) is written by several threads with the same bits.
struct FillStrided {
  int ndim = 1;
  std::int64_t shape[kCopyMaxDims] = {};
  std::int64_t strides[1][kCopyMaxDims] = {};
  void* dst = nullptr;
  DType dst_type = DType::f32;
  float value = 0.0F;

  // A contiguous floating fill in packs (packed.hpp).
  RIG_HD bool packed() const { return ndim == 1 && float_packs(dst, dst_type, strides[0][0]); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(ndim, shape), packed() ? kPack : 1);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = shape_elements(ndim, shape);
    if (packed()) {  // uniform over the launch
      Pack<kPack> fill;
      for (float& v : fill.v) v = value;
      const ElementType dt = element_type_of(dst_type);
      packed_grid_stride(
          ctx, n, [&](std::int64_t k) { store_pack<kPack>(dst, dt, k, fill); },
          [&](std::int64_t i) { store_float_as(dst, dst_type, i, value); });
      return;
    }
    for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) {
      std::int64_t off[1];
      strided_offsets(i, ndim, shape, strides, off);
      store_float_as(dst, dst_type, off[0], value);
    }
  }
};

// The widest word (16, 8, 4, 2 or 1 bytes) both addresses are aligned to.
RIG_HD_INLINE int copy_word_bytes(const void* dst, const void* src) {
  const auto bits = reinterpret_cast<std::uintptr_t>(dst) | reinterpret_cast<std::uintptr_t>(src);
  if (bits % 16 == 0) return 16;
  if (bits % 8 == 0) return 8;
  if (bits % 4 == 0) return 4;
  if (bits % 2 == 0) return 2;
  return 1;
}

template <class Word>
RIG_HD_INLINE void copy_word(void* dst, const void* src, std::int64_t w) {
  static_cast<Word*>(dst)[w] = static_cast<const Word*>(src)[w];
}

// Word w of width `width` (1, 2, 4, 8 or 16 bytes; src null: zeroes).
RIG_HD_INLINE void move_word(void* dst, const void* src, int width, std::int64_t w) {
  switch (width) {
    case 16:
      if (src != nullptr) {
        copy_word<Bytes16>(dst, src, w);
      } else {
        static_cast<Bytes16*>(dst)[w] = Bytes16{{0, 0, 0, 0}};
      }
      return;
    case 8:
      if (src != nullptr) {
        copy_word<std::uint64_t>(dst, src, w);
      } else {
        static_cast<std::uint64_t*>(dst)[w] = 0;
      }
      return;
    case 4:
      if (src != nullptr) {
        copy_word<std::uint32_t>(dst, src, w);
      } else {
        static_cast<std::uint32_t*>(dst)[w] = 0;
      }
      return;
    case 2:
      if (src != nullptr) {
        copy_word<std::uint16_t>(dst, src, w);
      } else {
        static_cast<std::uint16_t*>(dst)[w] = 0;
      }
      return;
    default:
      static_cast<std::uint8_t*>(dst)[w] =
          src != nullptr ? static_cast<const std::uint8_t*>(src)[w] : std::uint8_t{0};
      return;
  }
}

// Items of a span copy of `bytes` bytes in words of `width`: the whole words,
// then the tail bytes one each.
RIG_HD_INLINE std::int64_t span_items(std::int64_t bytes, int width) {
  return bytes / width + bytes % width;
}

// Item t of such a copy (src null: zeroes).
RIG_HD_INLINE void span_item(std::byte* dst, const std::byte* src, std::int64_t bytes, int width,
                             std::int64_t t) {
  const std::int64_t words = bytes / width;
  if (t < words) {
    move_word(dst, src, width, t);
  } else {
    const std::int64_t b = words * width + (t - words);
    dst[b] = src != nullptr ? src[b] : std::byte{0};
  }
}

struct CopyContiguous {
  void* dst = nullptr;
  const void* src = nullptr;  // must not overlap dst
  std::int64_t bytes = 0;

  int width() const { return copy_word_bytes(dst, src); }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, span_items(bytes, width()));
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const int w = copy_word_bytes(dst, src);
    const std::int64_t items = span_items(bytes, w);
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      span_item(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), bytes, w, t);
    }
  }
};

}  // namespace rig::kernels
