// Packed access: N consecutive elements of f32, f16 or bf16 moved by the
// widest memory instructions their bytes allow (16 bytes each at most), not
// one instruction per element. A bandwidth-bound kernel that loads 2 bytes a
// thread issues an instruction (and its indexing) per 2 bytes, and keeps few
// bytes in flight per SM; one 16-byte load moves 8 bf16 (PyTorch's vectorized
// element-wise loops and llm.c's 128-bit packs do the same). What that is
// worth on a GPU, ElementwiseBandwidth.PackedAgainstPerElement measures.
// The values are unpacked to f32 and packed back with the conversions of
// element_type.hpp, so a kernel's packed and per-element paths give the same
// bits.
//
// A pack k of a buffer is its elements [k N, k N + N): its address must be a
// multiple of its bytes (of 16 for packs of more), which pack_aligned checks
// of the buffer's start. Kernels check their operands once (uniform over the
// launch), take the packed path where all are aligned, and finish the
// elements past the last whole pack one by one.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "rig/half.hpp"
#include "rig/hd.hpp"
#include "rig/math/bits.hpp"

namespace rig::kernels {

// Elements of the packs of the element-wise kernels: 16 bytes of a 16-bit
// type, two 16-byte words of f32.
inline constexpr int kPack = 8;

// 16 bytes moved by one load and one store.
struct alignas(16) Bytes16 {
  std::uint32_t w[4];
};

template <int N>
struct Pack {
  float v[N];
};

RIG_HD_INLINE int element_bytes(ElementType type) {
  return type == ElementType::f32 ? 4 : 2;
}

// Whether `data` (null: no operand) can be read and written in packs of N
// elements of `type`: aligned to the pack's bytes, or to 16 for larger packs
// (moved as several 16-byte words).
template <int N>
RIG_HD_INLINE bool pack_aligned(const void* data, ElementType type) {
  const auto pack = static_cast<std::uintptr_t>(N * element_bytes(type));
  const std::uintptr_t bytes = pack < 16 ? pack : 16;
  return data == nullptr || reinterpret_cast<std::uintptr_t>(data) % bytes == 0;
}

namespace packed_detail {

// On the host (the emulator), a misaligned word stops the program as the
// GPU's misaligned-address error stops the kernel, so that a kernel test
// cannot pass with a pack the GPU would refuse.
template <class Word>
inline void check_word_aligned(const void* at) {
  if (reinterpret_cast<std::uintptr_t>(at) % sizeof(Word) != 0) __builtin_trap();
}

// Word w of `data` (a Word-aligned address): an aligned load on the GPU; on
// the host (the emulator) a copy, which no aliasing rule forbids.
template <class Word>
RIG_HD_INLINE Word load_word(const void* data, std::int64_t w) {
#if defined(__CUDA_ARCH__)
  return static_cast<const Word*>(data)[w];
#else
  check_word_aligned<Word>(static_cast<const Word*>(data) + w);
  Word word;
  __builtin_memcpy(&word, static_cast<const Word*>(data) + w, sizeof(Word));
  return word;
#endif
}

template <class Word>
RIG_HD_INLINE void store_word(void* data, std::int64_t w, const Word& word) {
#if defined(__CUDA_ARCH__)
  static_cast<Word*>(data)[w] = word;
#else
  check_word_aligned<Word>(static_cast<Word*>(data) + w);
  __builtin_memcpy(static_cast<Word*>(data) + w, &word, sizeof(Word));
#endif
}

// The 32-bit halves of `words` 32-bit words, as words of the widest width
// (16, 8 or 4 bytes) that fits them: `words` is 1, 2, 4 or a multiple of 4.
template <int Words>
struct Raw {
  std::uint32_t u[Words];
};

template <int Words>
RIG_HD_INLINE Raw<Words> load_raw(const void* data, std::int64_t pack) {
  Raw<Words> r;
  if constexpr (Words % 4 == 0) {
    for (int k = 0; k < Words / 4; ++k) {
      const Bytes16 b = load_word<Bytes16>(data, pack * (Words / 4) + k);
      for (int j = 0; j < 4; ++j) r.u[4 * k + j] = b.w[j];
    }
  } else if constexpr (Words == 2) {
    const std::uint64_t b = load_word<std::uint64_t>(data, pack);
    r.u[0] = static_cast<std::uint32_t>(b);
    r.u[1] = static_cast<std::uint32_t>(b >> 32);
  } else {
    static_assert(Words == 1, "packs of 4, 8 or a multiple of 16 bytes");
    r.u[0] = load_word<std::uint32_t>(data, pack);
  }
  return r;
}

template <int Words>
RIG_HD_INLINE void store_raw(void* data, std::int64_t pack, const Raw<Words>& r) {
  if constexpr (Words % 4 == 0) {
    for (int k = 0; k < Words / 4; ++k) {
      Bytes16 b;
      for (int j = 0; j < 4; ++j) b.w[j] = r.u[4 * k + j];
      store_word<Bytes16>(data, pack * (Words / 4) + k, b);
    }
  } else if constexpr (Words == 2) {
    store_word<std::uint64_t>(
        data, pack,
        static_cast<std::uint64_t>(r.u[0]) | (static_cast<std::uint64_t>(r.u[1]) << 32));
  } else {
    static_assert(Words == 1, "packs of 4, 8 or a multiple of 16 bytes");
    store_word<std::uint32_t>(data, pack, r.u[0]);
  }
}

}  // namespace packed_detail

// Pack `pack` (elements [pack N, pack N + N)) of `data`, as f32.
template <int N>
RIG_HD_INLINE Pack<N> load_pack(const void* data, ElementType type, std::int64_t pack) {
  static_assert(N % 2 == 0, "16-bit packs fill whole 32-bit words");
  Pack<N> p;
  if (type == ElementType::f32) {
    const auto r = packed_detail::load_raw<N>(data, pack);
    for (int k = 0; k < N; ++k) p.v[k] = math::bits_float(r.u[k]);
    return p;
  }
  const auto r = packed_detail::load_raw<N / 2>(data, pack);
  for (int k = 0; k < N; ++k) {
    const auto bits = static_cast<std::uint16_t>(r.u[k / 2] >> (16 * (k % 2)));
    p.v[k] = type == ElementType::f16 ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
  }
  return p;
}

// Stores p as pack `pack` of `data`, each element rounded to `type` as
// store_element rounds it.
template <int N>
RIG_HD_INLINE void store_pack(void* data, ElementType type, std::int64_t pack, const Pack<N>& p) {
  if (type == ElementType::f32) {
    packed_detail::Raw<N> r;
    for (int k = 0; k < N; ++k) r.u[k] = math::float_bits(p.v[k]);
    packed_detail::store_raw<N>(data, pack, r);
    return;
  }
  packed_detail::Raw<N / 2> r{};
  for (int k = 0; k < N; ++k) {
    const std::uint16_t bits =
        type == ElementType::f16 ? float_to_half_bits(p.v[k]) : float_to_bfloat16_bits(p.v[k]);
    r.u[k / 2] |= static_cast<std::uint32_t>(bits) << (16 * (k % 2));
  }
  packed_detail::store_raw<N / 2>(data, pack, r);
}

// The N elements of `data` from element `first` (a multiple of N for N > 1):
// a pack, or for N == 1 the element itself.
template <int N>
RIG_HD_INLINE Pack<N> load_elements(const void* data, ElementType type, std::int64_t first) {
  if constexpr (N == 1) {
    return Pack<1>{{load_element(data, type, first)}};
  } else {
    return load_pack<N>(data, type, first / N);
  }
}
template <int N>
RIG_HD_INLINE void store_elements(void* data, ElementType type, std::int64_t first,
                                  const Pack<N>& p) {
  if constexpr (N == 1) {
    store_element(data, type, first, p.v[0]);
  } else {
    store_pack<N>(data, type, first / N, p);
  }
}

// N consecutive int32 (max pooling's indices), moved as packed words like
// N f32; N == 1 is the element itself.
template <int N>
struct IntPack {
  std::int32_t v[N];
};
template <int N>
RIG_HD_INLINE IntPack<N> load_int_elements(const std::int32_t* data, std::int64_t first) {
  IntPack<N> p;
  if constexpr (N == 1) {
    p.v[0] = data[first];
  } else {
    const auto r = packed_detail::load_raw<N>(data, first / N);
    for (int k = 0; k < N; ++k) p.v[k] = static_cast<std::int32_t>(r.u[k]);
  }
  return p;
}
template <int N>
RIG_HD_INLINE void store_int_elements(std::int32_t* data, std::int64_t first, const IntPack<N>& p) {
  if constexpr (N == 1) {
    data[first] = p.v[0];
  } else {
    packed_detail::Raw<N> r;
    for (int k = 0; k < N; ++k) r.u[k] = static_cast<std::uint32_t>(p.v[k]);
    packed_detail::store_raw<N>(data, first / N, r);
  }
}

// A row of `cols` elements taken in chunks of N (the last may be partial) by
// a group of threads: f(q, valid) for chunks q = first, first + step, ... of
// the row, valid = its elements (N but for the last). The
// order of a thread's elements depends on cols only, so a row loaded as
// packs and one loaded element by element (load_row_chunk) sum alike. Loop
// over a chunk's kPack elements with a guard (e < valid), not up to valid:
// nvcc keeps a pack indexed by a fixed trip count in registers.
template <int N = kPack, class F>
RIG_HD_INLINE void for_chunks(std::int64_t cols, std::int64_t first, std::int64_t step, F&& f) {
  const std::int64_t chunks = (cols + N - 1) / N;
  for (std::int64_t q = first; q < chunks; q += step) {
    const std::int64_t left = cols - q * N;
    f(q, left < N ? static_cast<int>(left) : N);
  }
}
// ... by the threads of a block.
template <class Ctx, class F>
RIG_HD_INLINE void for_row_chunks(const Ctx& ctx, std::int64_t cols, F&& f) {
  for_chunks(cols, ctx.thread_rank(), ctx.block_threads(), f);
}

// How many of the N elements from `first` lie in [0, n): N, fewer for the
// last chunk, none past it.
template <int N>
RIG_HD_INLINE int chunk_elements(std::int64_t n, std::int64_t first) {
  const std::int64_t left = n - first;
  return left <= 0 ? 0 : left < N ? static_cast<int>(left) : N;
}

// The N elements of `data` from element `first` (a multiple of N), of which
// the first `valid` exist (the rest read as 0): a pack where `packed` (the
// buffer aligned for packs) and the chunk whole, else element by element. One
// compute body then serves both paths, with the same bits.
template <int N>
RIG_HD_INLINE Pack<N> load_chunk(const void* data, ElementType type, std::int64_t first, int valid,
                                 bool packed) {
  if (packed && valid == N) return load_pack<N>(data, type, first / N);
  Pack<N> p{};
  for (int e = 0; e < N; ++e) {
    if (e < valid) p.v[e] = load_element(data, type, first + e);
  }
  return p;
}
template <int N>
RIG_HD_INLINE void store_chunk(void* data, ElementType type, std::int64_t first, int valid,
                               bool packed, const Pack<N>& p) {
  if (packed && valid == N) {
    store_pack<N>(data, type, first / N, p);
    return;
  }
  for (int e = 0; e < N; ++e) {
    if (e < valid) store_element(data, type, first + e, p.v[e]);
  }
}

// Chunk q of the row at element offset `base` of `data` (elements [q kPack,
// q kPack + valid) of the row; the rest 0): a pack where `packed` (base
// aligned) and the chunk whole, else element by element.
RIG_HD_INLINE Pack<kPack> load_row_chunk(const void* data, ElementType type, std::int64_t base,
                                         std::int64_t q, int valid, bool packed) {
  return load_chunk<kPack>(data, type, base + q * kPack, valid, packed);
}
RIG_HD_INLINE void store_row_chunk(void* data, ElementType type, std::int64_t base, std::int64_t q,
                                   int valid, bool packed, const Pack<kPack>& p) {
  store_chunk<kPack>(data, type, base + q * kPack, valid, packed, p);
}

// A grid-stride loop over the n / N whole packs of [0, n), one a thread and
// step, pack(k) for each; then the last n % N elements, element(i) for each.
// Plan it with plan_grid_stride(device, n, N, registers).
template <int N = kPack, class Ctx, class PackFn, class ElementFn>
RIG_HD_INLINE void packed_grid_stride(Ctx& ctx, std::int64_t n, PackFn&& pack,
                                      ElementFn&& element) {
  const std::int64_t packs = n / N;
  const std::int64_t step = grid_threads(ctx);
  const std::int64_t first = global_thread(ctx);
  for (std::int64_t k = first; k < packs; k += step) pack(k);
  for (std::int64_t i = packs * N + first; i < n; i += step) element(i);
}

}  // namespace rig::kernels
