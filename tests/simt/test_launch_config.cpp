// The launch planner (simt/launch_config.hpp) with the A100's and H100's
// properties: occupancy per SM and the shapes of row-wise and elementwise
// launches.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "simt/launch_config.hpp"

namespace rig::simt {
namespace {

const DeviceProperties kA100 = DeviceProperties::a100_sxm();
const DeviceProperties kH100 = DeviceProperties::h100_sxm();

template <class Body>
std::string invalid_argument(Body&& body) {
  try {
    body();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchConfig, DevicePropertiesAreTheA100sAndTheH100s) {
  EXPECT_EQ(kA100.sm_count, 108);
  EXPECT_EQ(kA100.major * 10 + kA100.minor, 80);
  EXPECT_EQ(kA100.shared_per_sm, 167936u);
  EXPECT_EQ(kA100.shared_per_block_optin, 166912u);
  EXPECT_EQ(kH100.sm_count, 132);
  EXPECT_EQ(kH100.major * 10 + kH100.minor, 90);
  EXPECT_EQ(kH100.shared_per_sm, 233472u);
  EXPECT_EQ(kH100.shared_per_block_optin, 232448u);
  for (const auto* d : {&kA100, &kH100}) {
    EXPECT_EQ(d->max_threads_per_sm, 2048);
    EXPECT_EQ(d->max_blocks_per_sm, 32);
    EXPECT_EQ(d->regs_per_sm, 65536);
    EXPECT_EQ(d->shared_per_block, 49152u);
    EXPECT_EQ(d->reserved_shared_per_block, 1024u);
    EXPECT_EQ(d->max_grid_x, 2147483647u);
    EXPECT_EQ(d->max_grid_y, 65535u);
  }
}

TEST(LaunchConfig, BlocksPerSmLimitedByThreads) {
  // 256 threads = 8 warps of 64 per SM; 16 registers leave room for 32 warps
  // per sub-partition.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 256, .registers_per_thread = 16}), 8);
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 1024, .registers_per_thread = 32}), 2);
  // A partial warp takes a whole warp's slot: 97 threads are 4 warps.
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 96 + 1, .registers_per_thread = 16}), 16);
  // Small blocks: the 32 blocks per SM bind first.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 32, .registers_per_thread = 16}), 32);
}

TEST(LaunchConfig, BlocksPerSmLimitedByRegisters) {
  // 128 registers: 4096 per warp, 4 warps per sub-partition, 16 per SM.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 256, .registers_per_thread = 128}), 2);
  // 255 registers round up to 8192 per warp: 2 warps per sub-partition.
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 64, .registers_per_thread = 255}), 4);
  // 40 registers: 1280 per warp, 12 warps per sub-partition (not 12.8), 48 per SM.
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 128, .registers_per_thread = 40}), 12);
  // 1024 threads x 65 registers (2304 per warp x 32 warps) exceed 64 K per block.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 1024, .registers_per_thread = 65}), 0);
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 1024, .registers_per_thread = 64}), 1);
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 32, .registers_per_thread = 256}), 0);
}

TEST(LaunchConfig, BlocksPerSmLimitedBySharedMemory) {
  // 48 KiB + the 1 KiB reserve = 50176 bytes per block.
  const KernelResources k{
      .block_threads = 128, .shared_bytes = 48 * 1024, .registers_per_thread = 32};
  EXPECT_EQ(blocks_per_sm(kA100, k), 3);  // 167936 / 50176
  EXPECT_EQ(blocks_per_sm(kH100, k), 4);  // 233472 / 50176
  // The opt-in maximum fills the SM; a byte more does not fit.
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 128, .shared_bytes = 166912}), 1);
  EXPECT_EQ(blocks_per_sm(kA100, {.block_threads = 128, .shared_bytes = 166913}), 0);
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 128, .shared_bytes = 232448}), 1);
  // Rounded up to 128 bytes: 10000 + 1024 -> 11136; 233472 / 11136 = 20.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 64, .shared_bytes = 10000}), 20);
  // Without shared memory the reserve alone does not bind.
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 64, .registers_per_thread = 32}), 32);
}

TEST(LaunchConfig, BlocksPerSmIsZeroForBlocksThatDoNotExist) {
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 0}), 0);
  EXPECT_EQ(blocks_per_sm(kH100, {.block_threads = 1025}), 0);
}

TEST(LaunchConfig, PlanRowsGivesOneBlockPerRow) {
  const KernelResources k{.block_threads = 256, .shared_bytes = 1024};
  const LaunchShape s = plan_rows(kH100, 1000, k);
  EXPECT_EQ(s.grid, (Dim3{1000, 1, 1}));
  EXPECT_EQ(s.block, (Dim3{256, 1, 1}));
  EXPECT_EQ(s.shared_bytes, 1024u);
  EXPECT_EQ(plan_rows(kA100, 2147483647, k).grid, (Dim3{2147483647u, 1, 1}));
  EXPECT_EQ(plan_rows(kA100, 0, k).grid, (Dim3{0, 1, 1}));  // launch nothing
}

TEST(LaunchConfig, PlanRowsSplitsOverYBeyondTheGridsX) {
  const KernelResources k{.block_threads = 128};
  const std::int64_t max_x = 2147483647;
  // 2^31 rows: two rows of blocks of 2^30.
  LaunchShape s = plan_rows(kH100, max_x + 1, k);
  EXPECT_EQ(s.grid, (Dim3{1u << 30, 2, 1}));
  // 5 * max_x + 3 rows: 6 over y, ceil(rows / 6) over x, covering every row.
  const std::int64_t rows = 5 * max_x + 3;
  s = plan_rows(kA100, rows, k);
  EXPECT_EQ(s.grid.y, 6u);
  EXPECT_GE(std::int64_t{s.grid.x} * s.grid.y, rows);
  EXPECT_LT(std::int64_t{s.grid.x} * (s.grid.y - 1), rows);
  EXPECT_LE(s.grid.x, kA100.max_grid_x);
  // The largest grid: max_x * 65535 rows fit, one more does not.
  EXPECT_EQ(plan_rows(kH100, max_x * 65535, k).grid, (Dim3{2147483647u, 65535, 1}));
  const std::string what = invalid_argument([&] { plan_rows(kH100, max_x * 65535 + 1, k); });
  EXPECT_NE(what.find("140735340806146 rows"), std::string::npos) << what;
  EXPECT_NE(what.find("2147483647 x 65535"), std::string::npos) << what;
}

TEST(LaunchConfig, PlanRowsRejectsBlocksTheDeviceCannotRun) {
  std::string what = invalid_argument([] { plan_rows(kH100, 10, {.block_threads = 2048}); });
  EXPECT_NE(what.find("2048 threads"), std::string::npos) << what;
  EXPECT_NE(what.find("1 to 1024"), std::string::npos) << what;
  what = invalid_argument(
      [] { plan_rows(kA100, 10, {.block_threads = 256, .shared_bytes = 200 * 1024}); });
  EXPECT_NE(what.find("204800 bytes of shared memory exceed the device's 166912"),
            std::string::npos)
      << what;
  EXPECT_EQ(invalid_argument(
                [] { plan_rows(kH100, 10, {.block_threads = 256, .shared_bytes = 200 * 1024}); }),
            "");
  what = invalid_argument(
      [] { plan_rows(kH100, 10, {.block_threads = 1024, .registers_per_thread = 128}); });
  EXPECT_NE(what.find("does not fit"), std::string::npos) << what;
  EXPECT_NE(invalid_argument([] { plan_rows(kH100, -1, {.block_threads = 32}); }), "");
}

TEST(LaunchConfig, PlanElementwiseCapsTheGridAtFourWaves) {
  const KernelResources k{.block_threads = 256, .registers_per_thread = 32};
  // Few elements: one thread each.
  EXPECT_EQ(plan_elementwise(kH100, 1000, k).grid, (Dim3{4, 1, 1}));
  EXPECT_EQ(plan_elementwise(kH100, 1, k).grid, (Dim3{1, 1, 1}));
  EXPECT_EQ(plan_elementwise(kH100, 1024, k, 4).grid, (Dim3{1, 1, 1}));
  EXPECT_EQ(plan_elementwise(kH100, 1025, k, 4).grid, (Dim3{2, 1, 1}));
  // Many: 8 blocks per SM x 132 SMs x 4 waves.
  EXPECT_EQ(plan_elementwise(kH100, std::int64_t{1} << 32, k).grid, (Dim3{8 * 132 * 4, 1, 1}));
  EXPECT_EQ(plan_elementwise(kA100, std::int64_t{1} << 32, k).grid, (Dim3{8 * 108 * 4, 1, 1}));
  const LaunchShape s = plan_elementwise(kA100, 0, k);  // launch nothing
  EXPECT_EQ(s.grid, (Dim3{0, 1, 1}));
  EXPECT_EQ(s.block, (Dim3{256, 1, 1}));
  EXPECT_NE(invalid_argument([&] { plan_elementwise(kA100, 10, k, 0); }), "");
  EXPECT_NE(invalid_argument([&] { plan_elementwise(kA100, -1, k); }), "");
  EXPECT_NE(invalid_argument([] { plan_elementwise(kA100, 10, {.block_threads = 1025}); }), "");
}

}  // namespace
}  // namespace rig::simt
