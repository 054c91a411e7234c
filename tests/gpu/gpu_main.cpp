// The GPU tests' main: asks the CUDA back end (the probe rig itself uses)
// whether a device can be used, so that without one every test skips with the
// reason instead of failing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/backend_abi.hpp"
#include "cuda/runtime/device_memory.hpp"
#include "gpu_test.hpp"

namespace rig_gpu_test {
namespace {

// 13000 -> "13.0".
std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string& reason() {
  static std::string text;
  return text;
}

std::string find_skip_reason() {
  using rig::cuda::ProbeStatus;
  rig::cuda::ProbeResult probe;
  rig_cuda_backend()->probe(&probe);
  switch (probe.status) {
    case ProbeStatus::ok:
      return "";
    case ProbeStatus::no_driver:
      return "no GPU: no CUDA driver is installed (libcuda.so.1 not found)";
    case ProbeStatus::old_driver:
      return "no GPU: the CUDA driver supports CUDA " + version_text(probe.driver_version) +
             ", older than the tests' runtime " + version_text(probe.runtime_version);
    case ProbeStatus::no_device:
      return "no GPU: the CUDA driver found no device";
    default:
      return std::string("no GPU: ") + probe.message;
  }
}

}  // namespace

const std::string& skip_reason() {
  return reason();
}

bool launches_run_asynchronously() {
  return std::getenv("RIG_GPU_TESTS_SERIAL_LAUNCHES") == nullptr;
}

}  // namespace rig_gpu_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  rig_gpu_test::reason() = rig_gpu_test::find_skip_reason();
  const int result = RUN_ALL_TESTS();
  // The caching allocator lives as long as the process; giving its cached
  // blocks back here lets compute-sanitizer's leak check report only device
  // memory that a test really failed to free.
  if (rig_gpu_test::skip_reason().empty()) {
    rig::cuda::device_allocator(rig_gpu_test::kDevice).empty_cache();
  }
  return result;
}
