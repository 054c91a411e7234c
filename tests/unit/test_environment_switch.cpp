// The environment's on / off switches (rig/environment_switch.hpp): 1 on;
// unset, empty or 0 off; anything else refused naming the variable, the value
// and what 1 means. The engine reads them before building a run, so a bad
// value exits 2 (cli.kernel_census checks RIG_CUDA_CENSUS_SHAPES through rig).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "rig/environment_switch.hpp"

namespace {

void expect_switch(const char* name, bool (*read)(), const std::string& meaning) {
  SCOPED_TRACE(name);
  unsetenv(name);
  EXPECT_FALSE(read());
  setenv(name, "", 1);
  EXPECT_FALSE(read());
  setenv(name, "0", 1);
  EXPECT_FALSE(read());
  setenv(name, "1", 1);
  EXPECT_TRUE(read());
  setenv(name, "yes", 1);
  try {
    read();
    ADD_FAILURE() << name << "=yes was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), std::string(name) + "=yes: expected 1 (" + meaning + ") or 0");
  }
  unsetenv(name);
}

TEST(EnvironmentSwitch, GemmAutotuneAndCensusShapes) {
  expect_switch("RIG_GEMM_AUTOTUNE", rig::gemm_autotune_requested,
                "time cuBLASLt's candidate algorithms on each product's first call and keep the "
                "fastest");
  expect_switch("RIG_CUDA_CENSUS_SHAPES", rig::census_shapes_requested,
                "a census line for each product and convolution shape");
}

// The one switch that is on unless 0.
TEST(EnvironmentSwitch, ReluMasksAreOnUnlessZero) {
  unsetenv("RIG_CUDA_RELU_MASKS");
  EXPECT_TRUE(rig::relu_masks_enabled());
  setenv("RIG_CUDA_RELU_MASKS", "", 1);
  EXPECT_TRUE(rig::relu_masks_enabled());
  setenv("RIG_CUDA_RELU_MASKS", "1", 1);
  EXPECT_TRUE(rig::relu_masks_enabled());
  setenv("RIG_CUDA_RELU_MASKS", "0", 1);
  EXPECT_FALSE(rig::relu_masks_enabled());
  setenv("RIG_CUDA_RELU_MASKS", "off", 1);
  try {
    rig::relu_masks_enabled();
    ADD_FAILURE() << "RIG_CUDA_RELU_MASKS=off was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("RIG_CUDA_RELU_MASKS=off: expected 0"), std::string::npos)
        << e.what();
  }
  unsetenv("RIG_CUDA_RELU_MASKS");
}

}  // namespace
