// The value behind a failed index check (Backend::check_index on the CUDA
// back end, which raises it at its next read of the device):
//   IndexValueAt: result[1] = index[result[0]] where result[0] >= 0 (the
//     position IndexCheckFinish found), else 0. One thread.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "rig/dtype.hpp"

namespace rig::kernels {

struct IndexValueAt {
  const void* index = nullptr;
  DType index_type = DType::i64;   // i32 or i64
  std::int64_t* result = nullptr;  // [2]: position (in), value (out)

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, 1);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (global_thread(ctx) != 0) return;
    const std::int64_t at = result[0];
    if (at < 0) {
      result[1] = 0;
    } else if (index_type == DType::i32) {
      result[1] = static_cast<const std::int32_t*>(index)[at];
    } else {
      result[1] = static_cast<const std::int64_t*>(index)[at];
    }
  }
};

}  // namespace rig::kernels
