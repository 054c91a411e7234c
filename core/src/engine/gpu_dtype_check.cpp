#include "engine/gpu_dtype_check.hpp"

#include <string>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::engine {
namespace {

// The key that asks for bfloat16, or "" when none does.
std::string bfloat16_key(const EngineSettings& s) {
  if (s.dtype == "bfloat16") return "dtype";
  if (s.compute_dtype == DType::bf16) return "mixed_dtype";
  if (s.bf16_matmuls) return "matmul_precision";
  return "";
}

std::string instead(const std::string& key) {
  if (key == "dtype") return "dtype: float16 (or mixed with mixed_dtype: float16)";
  if (key == "mixed_dtype")
    return "mixed_dtype: float16 (float16 mixed precision with loss scaling, as AMP)";
  return "matmul_precision: float32";
}

}  // namespace

void check_gpu_dtypes(const DeviceChoice& choice, const EngineSettings& settings,
                      const config::ResolvedConfig& config) {
  if (!choice.gpu) return;
  const cuda::GpuInfo& gpu = *choice.gpu;
  if (gpu.compute_major >= 8) return;
  const std::string key = bfloat16_key(settings);
  if (key.empty()) return;
  const auto where = config.where(key);
  throw UserError(fmt::format(
      "{}: {}: bfloat16 needs a GPU of compute capability 8.0 or newer (A100, L4, H100, ...), "
      "but cuda:{} is {} (compute capability {}.{}): use {}, or device: cpu",
      where.describe(), where.key_path.empty() ? key : where.key_path, gpu.index, gpu.name,
      gpu.compute_major, gpu.compute_minor, instead(key)));
}

}  // namespace rig::engine
