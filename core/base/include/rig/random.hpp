// Counter-based randomness (Philox4x32-10). A stream is keyed by (seed, step,
// rank, purpose); element i of a stream is a pure function of the key and i,
// so dropout masks and shuffles are the same on every run, after a resume,
// with any number of threads, and on the GPU.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "rig/export.hpp"

namespace rig {

// 32-bit FNV-1a of a name: the purpose id of a named random stream.
std::uint32_t purpose_id(std::string_view name);

struct RandomKey {
  std::uint64_t seed = 0;     // random_seed
  std::uint64_t step = 0;     // global step (or epoch, for shuffles)
  std::uint32_t rank = 0;     // process rank (or micro-batch, when iter_size > 1)
  std::uint32_t purpose = 0;  // which stream: purpose_id("encoder.layers.0.attention.dropout")

  // The same key for another purpose, e.g. key.derive("layers.0.dropout").
  RandomKey derive(std::string_view name) const;
  friend bool operator==(const RandomKey&, const RandomKey&) = default;
};

// Philox4x32-10: four 32-bit outputs for one 128-bit counter and 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

// Element `index` of the stream, as 32 random bits: output index % 4 of block
// b = index / 4, where block b is Philox4x32-10 with (lo32/hi32 = low/high 32 bits)
//   key     = {lo32(seed), hi32(seed)}
//   counter = {lo32(b), rank ^ (hi32(b) << 16 mod 2^32), lo32(step), purpose ^ hi32(step)}
// (the CUDA backend computes exactly this). Distinct (step, rank, purpose, index)
// give distinct counters for any seed while step < 2^32, rank < 2^16 and
// index < 2^50 (a stream of 2^50 elements); beyond that, streams may overlap.
std::uint32_t random_bits(const RandomKey& key, std::uint64_t index);
// [0, 1) with 24 bits of randomness: (bits >> 8) * 2^-24.
// Dropout keeps element i when uniform_float(random_bits(key, i)) >= p, i.e.
// when (bits >> 8) >= ceil(p * 2^24); every back end must use this rule so
// that masks agree bit for bit.
float uniform_float(std::uint32_t bits);

// out[i] = uniform [low, high) of element first + i of the stream:
// f32(f64(low) + f64(high - low) * uniform_float(bits)), which is the same with
// or without FMA contraction; a result that rounds up to `high` becomes the
// float just below it.
void fill_uniform(const RandomKey& key, float* out, std::int64_t n, float low = 0.0F,
                  float high = 1.0F, std::uint64_t first = 0);
// out[i] = normal(mean, std) from elements 2(first+i), 2(first+i)+1 (Box-Muller
// in f64: u1 = ((a >> 8) + 1) 2^-24 in (0, 1], u2 = (b >> 8) 2^-24,
// mean + std sqrt(-2 ln u1) cos(2 pi u2), rounded to f32). Bit-identical
// across platforms up to the libm's log/cos rounding.
void fill_normal(const RandomKey& key, float* out, std::int64_t n, float mean = 0.0F,
                 float std = 1.0F, std::uint64_t first = 0);

}  // namespace rig
