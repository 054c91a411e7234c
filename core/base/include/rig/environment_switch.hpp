// On/off switches read from the environment: 1 on; 0 off; unset or empty
// the switch's default (off unless said); anything else refused with
// std::invalid_argument naming the variable, the value and what is expected. Header-only: librig
// and librig_cuda (which does not link librig) read them alike, and the engine checks them up
// front, so a bad value exits 2 before anything runs.
#pragma once

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace rig {

inline bool environment_switch(const char* name, bool unset, const std::string& expected) {
  const char* value = std::getenv(name);
  const std::string text = value == nullptr ? "" : value;
  if (text.empty()) return unset;
  if (text == "0" || text == "1") return text == "1";
  throw std::invalid_argument(std::string(name) + "=" + text + ": expected " + expected);
}

// A switch that is off unless 1.
inline bool environment_switch(const char* name, const char* what_1_means) {
  return environment_switch(name, false, std::string("1 (") + what_1_means + ") or 0");
}

// RIG_GEMM_AUTOTUNE=1: cuBLASLt's candidate algorithms timed on each product
// shape's first call, the fastest kept (CublasLtGemm).
inline bool gemm_autotune_requested() {
  return environment_switch("RIG_GEMM_AUTOTUNE",
                            "time cuBLASLt's candidate algorithms on each product's first call "
                            "and keep the fastest");
}

// RIG_CUDA_CENSUS_SHAPES=1: the kernel census (RIG_CUDA_CENSUS) gives each
// product and convolution shape a line of its own.
inline bool census_shapes_requested() {
  return environment_switch("RIG_CUDA_CENSUS_SHAPES",
                            "a census line for each product and convolution shape");
}

// RIG_CUDA_RELU_MASKS=0: the CUDA back end's products take no relu mask
// (Backend::gemm_relu_masks false): a relu layer keeps its output for its
// backward pass, as on the CPU. On unless 0 (1 or unset); anything else is
// refused.
inline bool relu_masks_enabled() {
  return environment_switch("RIG_CUDA_RELU_MASKS", true,
                            "0 (relu layers keep their output for backward, no mask in the "
                            "products' epilogues) or 1 (the default)");
}

// RIG_HOST_MEMORY_CHECK=0: a new host segment is taken without checking that
// the host can still give it (backend::host_memory), for a machine whose cache
// Linux does not count as available (ZFS's ARC). On unless 0.
inline bool host_memory_check_enabled() {
  return environment_switch("RIG_HOST_MEMORY_CHECK", true,
                            "0 (take host memory without checking what the host can still give) "
                            "or 1 (the default)");
}

}  // namespace rig
