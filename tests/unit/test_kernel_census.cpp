// The kernel census (RIG_CUDA_CENSUS, core/cuda/backend/kernel_census.hpp) on
// the emulated CUDA device: each queued kernel, product, convolution and copy
// is counted under its name and operand types, with its elements and bytes,
// and the file is rewritten whole at each wait for the device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "census_file.hpp"
#include "cuda/emulated/emulated_device.hpp"

namespace rig {
namespace {

// The census's lines as what -> "launches elements bytes flops", and where
// `times` is given, what -> the line's device time ("-" where not timed).
std::map<std::string, std::string> read_census(
    const std::filesystem::path& file, std::map<std::string, std::string>* times = nullptr) {
  std::map<std::string, std::string> lines;
  for (const auto& [what, fields] : rig_test::read_census_file(file)) {
    lines[what] = fields.counts();
    if (times != nullptr) (*times)[what] = fields.ms;
  }
  return lines;
}

// A back end made while RIG_CUDA_CENSUS names `file` (read when it is made),
// with RIG_CUDA_CENSUS_SHAPES=1 where `shapes`.
std::unique_ptr<backend::Backend> census_backend(const std::filesystem::path& file,
                                                 cuda::EmulatedConvolutions convolutions,
                                                 bool shapes = false) {
  setenv("RIG_CUDA_CENSUS", file.c_str(), 1);
  if (shapes) setenv("RIG_CUDA_CENSUS_SHAPES", "1", 1);
  std::unique_ptr<backend::Backend> made = cuda::make_emulated_backend(0, convolutions);
  unsetenv("RIG_CUDA_CENSUS");
  unsetenv("RIG_CUDA_CENSUS_SHAPES");
  return made;
}

// x [1, 2, 4, 4] (32 elements), W [3, 2, 3, 3] (54), y [1, 3, 4, 4] (48).
backend::Conv2dShape small_conv() {
  backend::Conv2dShape s;
  s.n = 1;
  s.c_in = 2;
  s.h = s.w = 4;
  s.c_out = 3;
  s.kernel_h = s.kernel_w = 3;
  s.pad_h = s.pad_w = 1;
  s.out_h = s.out_w = 4;
  return s;
}

// One bf16 forward of small_conv() on zeroed x and W, then a wait for the device.
void run_small_bf16_conv(backend::Backend& b) {
  backend::MemoryPool& pool = b.memory(Device::cuda(0));
  const backend::Block x = pool.allocate(32 * sizeof(std::uint16_t));
  const backend::Block w = pool.allocate(54 * sizeof(std::uint16_t));
  const backend::Block y = pool.allocate(48 * sizeof(std::uint16_t));
  b.zero_bytes(x.data, 32 * sizeof(std::uint16_t));
  b.zero_bytes(w.data, 54 * sizeof(std::uint16_t));
  b.conv2d_forward_16(small_conv(), DType::bf16, x.data, w.data, y.data);
  b.synchronize();
  for (const backend::Block& block : {x, w, y}) pool.deallocate(block);
}

class KernelCensus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rig-census-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(KernelCensus, CountsKernelsByOperandTypesAndWritesAtEachWait) {
  const std::filesystem::path file = dir_ / "census.tsv";
  const auto b = census_backend(file, cuda::EmulatedConvolutions::with_16bit);
  backend::MemoryPool& pool = b->memory(Device::cuda(0));
  const backend::Block x = pool.allocate(1000 * sizeof(float));
  const backend::Block y = pool.allocate(1000 * sizeof(std::uint16_t));
  const std::vector<float> host(1000, 1.5F);
  b->from_host(x.data, host.data(), 1000 * sizeof(float));
  for (int i = 0; i < 3; ++i) {
    b->copy_strided({1000}, y.data, {1}, DType::bf16, x.data, {1}, DType::f32);
  }
  EXPECT_FALSE(std::filesystem::exists(file)) << "nothing has waited for the device yet";
  b->synchronize();
  std::map<std::string, std::string> times;
  std::map<std::string, std::string> lines = read_census(file, &times);
  // 3 launches of 1000 elements, 6 bytes each (4 read, 2 written), in packs.
  EXPECT_EQ(lines["CopyStrided f32 -> bf16, packed"], "3 3000 18000 0");
  // The emulator's time would be the host's: nothing is timed.
  EXPECT_EQ(times["CopyStrided f32 -> bf16, packed"], "-");
  EXPECT_EQ(lines["copy from host"], "1 0 4000 0");

  // A 16-bit convolution is counted with its floating-point operations.
  const backend::Conv2dShape s = small_conv();
  const backend::Block wx = pool.allocate(32 * sizeof(std::uint16_t));
  const backend::Block ww = pool.allocate(54 * sizeof(std::uint16_t));
  const backend::Block wy = pool.allocate(48 * sizeof(std::uint16_t));
  b->zero_bytes(wx.data, 32 * sizeof(std::uint16_t));
  b->zero_bytes(ww.data, 54 * sizeof(std::uint16_t));
  b->conv2d_forward_16(s, DType::bf16, wx.data, ww.data, wy.data);
  std::vector<std::uint16_t> out(48);
  b->to_host(out.data(), wy.data, out.size() * sizeof(std::uint16_t));
  lines = read_census(file);
  // 2 x 48 outputs x (2 channels x 9 taps) = 1728 operations.
  EXPECT_EQ(lines["convolution forward bf16"], "1 0 0 1728");
  EXPECT_EQ(lines["CopyStrided f32 -> bf16, packed"], "3 3000 18000 0") << "counted once";
  EXPECT_EQ(lines["copy to host"], "1 0 96 0");
  // A read collected later is a line of its own: it does not wait for the device.
  std::vector<float> later(4);
  b->to_host_later(x.data, 4 * sizeof(float))->wait_into(later.data());
  EXPECT_EQ(later, std::vector<float>(4, 1.5F));
  b->synchronize();
  lines = read_census(file);
  EXPECT_EQ(lines["copy to host, collected later"], "1 0 16 0");
  EXPECT_EQ(lines["copy to host"], "1 0 96 0");
  for (const backend::Block& block : {x, y, wx, ww, wy}) pool.deallocate(block);
}

TEST_F(KernelCensus, ShowsTheCopiesAroundF32OnlyConvolutions) {
  const std::filesystem::path file = dir_ / "census.tsv";
  const auto b = census_backend(file, cuda::EmulatedConvolutions::f32_only);
  run_small_bf16_conv(*b);
  std::map<std::string, std::string> lines = read_census(file);
  EXPECT_EQ(lines["convolution forward f32"], "1 0 0 1728");
  EXPECT_EQ(lines.count("convolution forward bf16"), 0U);
  // x and W widened (32 + 54 elements, 6 bytes each), y narrowed (48).
  EXPECT_EQ(lines["CopyStrided bf16 -> f32, packed"], "2 86 516 0");
  EXPECT_EQ(lines["CopyStrided f32 -> bf16, packed"], "1 48 288 0");
}

// With RIG_CUDA_CENSUS_SHAPES=1 each product and convolution shape has a
// line of its own: a GPU's timed census then says which shapes fall short.
TEST_F(KernelCensus, ShapesGiveEachProductAndConvolutionItsLine) {
  const std::filesystem::path file = dir_ / "census.tsv";
  const auto b = census_backend(file, cuda::EmulatedConvolutions::with_16bit, true);
  backend::MemoryPool& pool = b->memory(Device::cuda(0));
  const backend::Block a = pool.allocate(6 * 4 * sizeof(float));
  const backend::Block w = pool.allocate(4 * 5 * sizeof(float));
  const backend::Block c = pool.allocate(6 * 5 * sizeof(float));
  b->zero_bytes(a.data, 6 * 4 * sizeof(float));
  b->zero_bytes(w.data, 4 * 5 * sizeof(float));
  const auto as_floats = [](const backend::Block& block) {
    return reinterpret_cast<float*>(block.data);
  };
  // C [6, 5] = A [6, 4] W [4, 5], twice; cuBLASLt's column-major m, n, k are 5, 6, 4.
  for (int i = 0; i < 2; ++i) {
    b->gemm(
        {6, 5, 4, 1.0F, {as_floats(a), 4, false}, {as_floats(w), 5, false}, 0.0F, as_floats(c), 5},
        MatmulPrecision::f32);
  }
  run_small_bf16_conv(*b);
  std::map<std::string, std::string> lines = read_census(file);
  EXPECT_EQ(lines["cuBLASLt matmul f32 x f32 -> f32 [m 5 n 6 k 4]"], "2 0 0 480");
  EXPECT_EQ(lines["convolution forward bf16 [1x2x4x4 -> 3 3x3/1]"], "1 0 0 1728");
  EXPECT_EQ(lines.count("cuBLASLt matmul f32 x f32 -> f32"), 0U);
  for (const backend::Block& block : {a, w, c}) pool.deallocate(block);
}

}  // namespace
}  // namespace rig
