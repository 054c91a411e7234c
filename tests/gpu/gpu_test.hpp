// What every GPU test shares: the reason to skip (no usable device), the
// device the tests run on, and the test kernels.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "kernels.hpp"

namespace rig_gpu_test {

// Why the GPU tests cannot run on this machine, or "" when they can. Set once
// by main (gpu_main.cpp) from the CUDA back end's own probe.
const std::string& skip_reason();

// Whether kernel launches may be taken to run asynchronously with the host.
// False when RIG_GPU_TESTS_SERIAL_LAUNCHES is set: tools/gpu-check sets it for
// the compute-sanitizer runs, some of whose tools (initcheck) finish every
// launch before returning. The tests then still run, for the sanitizer, but do
// not assert that work is still in flight.
bool launches_run_asynchronously();

// The device the tests use: visible device 0 (CUDA_VISIBLE_DEVICES picks it).
constexpr int kDevice = 0;

// Skips the test, giving the reason, where no GPU can be used.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!skip_reason().empty()) GTEST_SKIP() << skip_reason();
  }
};

}  // namespace rig_gpu_test
