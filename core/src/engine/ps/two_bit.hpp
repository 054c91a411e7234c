// MXNet's 2-bit gradient compression: each element goes as +threshold,
// -threshold or 0, four to a byte, and what was not sent stays in the
// worker's residual and joins its next push.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace rig::engine::ps {

// Adds `gradients` to `residual`, then takes out of it what is sent.
std::vector<std::byte> compress_2bit(const float* gradients, float* residual, std::int64_t count,
                                     float threshold);

// The `count` values a compressed payload stands for.
void decompress_2bit(const std::vector<std::byte>& payload, std::int64_t count, float threshold,
                     float* out);

std::size_t compressed_2bit_bytes(std::int64_t count);

}  // namespace rig::engine::ps
