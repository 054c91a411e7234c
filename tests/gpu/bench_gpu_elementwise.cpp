// The bandwidth of rig's element-wise kernels on 16-bit data, measured (label
// gpu; skips without a GPU): 64 Mi elements each, against cudaMemcpyAsync's
// device-to-device copy as the ceiling; the ratio to the copy says how near
// the memory's bandwidth they come. PackedAgainstPerElement times the
// kernels that move packs (kernels/packed.hpp) both ways. Each runs kWarmup times, then kRuns times
// timed one by one with cudaEvents; the medians are printed in one line
//   elementwise bandwidth (...): copy A GB/s; CopyStrided bf16 B GB/s (B/A); ...
// counting the bytes each kernel must read and write. No speed makes the
// test fail; the outputs are checked, so that a kernel that did nothing
// cannot look fast.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/runtime/kernel_runs.cuh"
#include "device_array.hpp"
#include "event_timer.hpp"
#include "gpu_test.hpp"
#include "rig/half.hpp"

using rig_gpu_test::DeviceArray;

namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 25;
constexpr std::int64_t kElements = std::int64_t{64} << 20;

class ElementwiseBandwidth : public rig_gpu_test::GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    RIG_CUDA_CHECK(cudaSetDevice(rig_gpu_test::kDevice));
    timer_ = std::make_unique<rig_gpu_test::EventTimer>();
    stream_ = timer_->stream();
  }
  void TearDown() override { timer_.reset(); }

  // GB/s of `step`, which moves `bytes`: the median of kRuns timed runs.
  template <class Step>
  double gb_per_s(double bytes, Step step) {
    const float ms = timer_->median_ms(kWarmup, kRuns, [&](int) { step(); });
    return bytes / (static_cast<double>(ms) * 1e6);
  }

  std::unique_ptr<rig_gpu_test::EventTimer> timer_;
  cudaStream_t stream_ = nullptr;
};

// A 1-D plan over n contiguous elements (every operand stride 1).
template <class Kernel>
void one_axis(Kernel& k, std::int64_t n) {
  k.ndim = 1;
  k.shape[0] = n;
}

}  // namespace

TEST_F(ElementwiseBandwidth, SixteenBitKernelsAgainstTheCopy) {
  namespace k = rig::kernels;
  const auto n = static_cast<std::size_t>(kElements);
  const std::uint16_t one = rig::float_to_bfloat16(1.0F), two = rig::float_to_bfloat16(2.0F);
  const DeviceArray<std::uint16_t> a(std::vector<std::uint16_t>(n, one));
  const DeviceArray<std::uint16_t> b(std::vector<std::uint16_t>(n, two));
  const DeviceArray<float> wide(std::vector<float>(n, 3.0F));
  DeviceArray<std::uint16_t> out(n), acc(std::vector<std::uint16_t>(n, 0));
  const double e = static_cast<double>(kElements);
  std::string line;
  const auto report = [&](const char* name, double rate, double ceiling) {
    char part[160];
    std::snprintf(part, sizeof part, "; %s %.0f GB/s (%.2f)", name, rate, rate / ceiling);
    line += part;
  };

  const double copy = gb_per_s(4.0 * e, [&] {
    RIG_CUDA_CHECK(cudaMemcpyAsync(out.data(), a.data(), n * 2, cudaMemcpyDeviceToDevice, stream_));
  });

  k::CopyStrided same;
  one_axis(same, kElements);
  same.strides[0][0] = same.strides[1][0] = 1;
  same.dst = out.data();
  same.src = b.data();
  same.dst_type = same.src_type = rig::DType::bf16;
  report("CopyStrided bf16", gb_per_s(4.0 * e, [&] { rig::cuda::run(same, stream_); }), copy);

  k::CopyStrided cast = same;
  cast.src = wide.data();
  cast.src_type = rig::DType::f32;
  report("CopyStrided f32 -> bf16", gb_per_s(6.0 * e, [&] { rig::cuda::run(cast, stream_); }),
         copy);
  EXPECT_EQ(out.to_host()[n - 1], rig::float_to_bfloat16(3.0F));

  k::AddStrided add;
  one_axis(add, kElements);
  add.strides[0][0] = add.strides[1][0] = 1;
  add.dst = acc.data();
  add.src = a.data();
  add.dst_type = add.src_type = rig::DType::bf16;
  report("AddStrided bf16", gb_per_s(6.0 * e, [&] { rig::cuda::run(add, stream_); }), copy);
  EXPECT_EQ(acc.to_host()[n - 1], rig::float_to_bfloat16(kWarmup + kRuns));

  k::BinaryKernel binary;
  one_axis(binary, kElements);
  binary.strides[0][0] = binary.strides[1][0] = binary.strides[2][0] = 1;
  binary.a = reinterpret_cast<const float*>(a.data());
  binary.b = reinterpret_cast<const float*>(b.data());
  binary.out = reinterpret_cast<float*>(out.data());
  binary.type = k::ElementType::bf16;
  report("BinaryKernel add bf16", gb_per_s(6.0 * e, [&] { rig::cuda::run(binary, stream_); }),
         copy);
  EXPECT_EQ(out.to_host()[0], rig::float_to_bfloat16(3.0F));

  // ResNet-50's first batch norm's shape at batch 256 / 4: [64, 64, 112 x 112].
  const std::int64_t bn_n = kElements / (64 * 112 * 112), bn_c = 64, bn_inner = 112 * 112;
  const auto bn_elements = static_cast<double>(bn_n * bn_c * bn_inner);
  const DeviceArray<float> scale(std::vector<float>(64, 0.5F)), shift(std::vector<float>(64, 1.0F));
  k::BatchNormApply apply{reinterpret_cast<const float*>(a.data()),
                          scale.data(),
                          shift.data(),
                          reinterpret_cast<float*>(out.data()),
                          bn_n,
                          bn_c,
                          bn_inner};
  apply.type = k::ElementType::bf16;
  apply.relu = true;
  report("BatchNormApply+relu bf16",
         gb_per_s(4.0 * bn_elements, [&] { rig::cuda::run(apply, stream_); }), copy);
  EXPECT_EQ(out.to_host()[0], rig::float_to_bfloat16(1.5F));

  const DeviceArray<float> coef(std::vector<float>(3 * 64, 0.25F));
  k::BatchNormBackwardDx dx{reinterpret_cast<const float*>(a.data()),
                            reinterpret_cast<const float*>(b.data()),
                            coef.data(),
                            reinterpret_cast<float*>(out.data()),
                            bn_n,
                            bn_c,
                            bn_inner};
  dx.type = k::ElementType::bf16;
  report("BatchNormBackwardDx bf16",
         gb_per_s(6.0 * bn_elements, [&] { rig::cuda::run(dx, stream_); }), copy);
  EXPECT_EQ(out.to_host()[0], rig::float_to_bfloat16(1.0F));  // 2 a + (1 b + k), all 0.25

  std::printf(
      "elementwise bandwidth (64 Mi elements, median of %d; in brackets: of the copy): "
      "cudaMemcpy device to device %.0f GB/s%s\n",
      kRuns, copy, line.c_str());
}

// The kernels that move packs (kernels/packed.hpp) on the shapes of the
// benchmarks, each twice: from aligned buffers (packs) and from the same
// buffers one element on (element by element, the same bits): what the
// packs are worth on this GPU.
TEST_F(ElementwiseBandwidth, PackedAgainstPerElement) {
  namespace k = rig::kernels;
  const auto n = static_cast<std::size_t>(kElements);
  const std::uint16_t one = rig::float_to_bfloat16(1.0F);
  const DeviceArray<std::uint16_t> a(std::vector<std::uint16_t>(n, one));
  const DeviceArray<std::uint16_t> b(std::vector<std::uint16_t>(n, one));
  const DeviceArray<std::uint16_t> y(std::vector<std::uint16_t>(n, one));
  DeviceArray<std::uint16_t> out(n);
  const double copy = gb_per_s(4.0 * static_cast<double>(kElements), [&] {
    RIG_CUDA_CHECK(cudaMemcpyAsync(out.data(), a.data(), n * 2, cudaMemcpyDeviceToDevice, stream_));
  });
  std::string line;
  // A partial reduction through launch_partial (its Packed kernel where
  // packed()), any other kernel as it is.
  const auto launch = [&](const auto& kernel) {
    if constexpr (requires { typename std::decay_t<decltype(kernel)>::Packed; }) {
      k::launch_partial(kernel, [&](const auto& chosen) { rig::cuda::run(chosen, stream_); });
    } else {
      rig::cuda::run(kernel, stream_);
    }
  };
  // kernel(offset) reads and writes from element `offset` of each buffer.
  const auto both = [&](const char* name, double bytes, const auto& kernel) {
    for (const std::int64_t offset : {0, 1}) {
      const auto k0 = kernel(offset);
      EXPECT_EQ(k0.packed(), offset == 0) << name;
      const double rate = gb_per_s(bytes, [&] { launch(k0); });
      char part[200];
      std::snprintf(part, sizeof part, "; %s %s %.0f GB/s (%.2f)", name,
                    offset == 0 ? "packed" : "per element", rate, rate / copy);
      line += part;
    }
  };
  const auto f = [](const std::uint16_t* p, std::int64_t offset) {
    return reinterpret_cast<const float*>(p + offset);
  };
  const auto w = [](std::uint16_t* p, std::int64_t offset) {
    return reinterpret_cast<float*>(p + offset);
  };

  // ResNet-50's channels-last batch norms: 256 channels.
  const std::int64_t c = 256, rows = (kElements - 8) / c;
  const auto bn = static_cast<double>(rows * c);
  const DeviceArray<float> scale(std::vector<float>(c, 0.5F)), shift(std::vector<float>(c, 1.0F));
  const DeviceArray<float> coef(std::vector<float>(3 * c, 0.25F)),
      mean(std::vector<float>(c, 1.0F));
  DeviceArray<float> part(static_cast<std::size_t>(k::batch_norm_backward_scratch(rows, c, 1)));
  both("BatchNormApply+relu nhwc", 4.0 * bn, [&](std::int64_t o) {
    k::BatchNormApply kernel{
        f(a.data(), o),      scale.data(), shift.data(), w(out.data(), o), rows, c, 1,
        k::ElementType::bf16};
    kernel.relu = true;
    return kernel;
  });
  both("BatchNormBackwardDx relu-from-x nhwc", 6.0 * bn, [&](std::int64_t o) {
    k::BatchNormBackwardDx kernel{
        f(a.data(), o),      f(b.data(), o), coef.data(), w(out.data(), o), rows, c, 1,
        k::ElementType::bf16};
    kernel.relu = {nullptr, scale.data(), shift.data()};
    return kernel;
  });
  const std::int64_t parts = c * k::batch_norm_chunks(rows, 1);
  both("BatchNormStatsPartial nhwc", 2.0 * bn, [&](std::int64_t o) {
    return k::BatchNormStatsPartial{
        f(a.data(), o), rows, c, 1, part.data(), part.data() + parts, k::ElementType::bf16};
  });
  both("BatchNormGradPartial relu masked-dy nhwc", 8.0 * bn, [&](std::int64_t o) {
    k::BatchNormGradPartial kernel{
        f(a.data(), o), f(b.data(), o),      mean.data(),         rows, c, 1,
        part.data(),    part.data() + parts, k::ElementType::bf16};
    kernel.relu.y = f(y.data(), o);
    kernel.masked_dy = w(out.data(), o);
    return kernel;
  });

  // transformer-base's layer norms: [rows, 512].
  const std::int64_t d = 512, ln_rows = (kElements - 8) / d;
  const auto ln = static_cast<double>(ln_rows * d);
  const DeviceArray<std::uint16_t> gamma(std::vector<std::uint16_t>(d + 8, one));
  DeviceArray<float> ln_mean(static_cast<std::size_t>(ln_rows)), ln_rstd(ln_mean.size());
  both("LayerNormForward", 4.0 * ln, [&](std::int64_t o) {
    return k::LayerNormForward{f(a.data(), o),
                               f(gamma.data(), o),
                               f(gamma.data(), o),
                               w(out.data(), o),
                               ln_mean.data(),
                               ln_rstd.data(),
                               ln_rows,
                               d,
                               1e-5F,
                               k::ElementType::bf16,
                               k::ElementType::bf16};
  });
  both("LayerNormBackwardDx accumulate", 8.0 * ln, [&](std::int64_t o) {
    k::LayerNormBackwardDx kernel{
        f(a.data(), o),       f(gamma.data(), o),  ln_mean.data(), ln_rstd.data(),
        f(b.data(), o),       w(out.data(), o),    ln_rows,        d,
        k::ElementType::bf16, k::ElementType::bf16};
    kernel.accumulate = true;
    return kernel;
  });

  // A residual connection's dropout.
  const std::int64_t dn = kElements - 8;
  DeviceArray<std::uint32_t> mask(static_cast<std::size_t>((dn + 31) / 32));
  both("DropoutForward + residual", 6.0 * static_cast<double>(dn), [&](std::int64_t o) {
    k::DropoutForward kernel{rig::math::PhiloxStream::of(1, 2, 0, 3),
                             rig::math::dropout_threshold(0.1F),
                             1.0F / 0.9F,
                             k::ElementType::bf16,
                             a.data() + o,
                             out.data() + o,
                             mask.data(),
                             dn};
    kernel.residual = b.data() + o;
    return kernel;
  });

  // ResNet-50's stem max pooling, channels last: [80, 112, 112, 64] to
  // [80, 56, 56, 64], 3 x 3, stride 2, padding 1.
  k::PoolGeometry pool;
  pool.channels_last = true;
  pool.channels = 64;
  pool.planes = 80 * pool.channels;
  pool.h = pool.w = 112;
  pool.out_h = pool.out_w = 56;
  pool.kernel_h = pool.kernel_w = 3;
  pool.stride_h = pool.stride_w = 2;
  pool.pad_h = pool.pad_w = 1;
  const auto pool_in = static_cast<double>(pool.planes * pool.in_size());
  const auto pool_out = static_cast<double>(pool.planes * pool.out_size());
  DeviceArray<std::int32_t> index(static_cast<std::size_t>(pool.planes * pool.out_size() + 8));
  both("MaxPool2dForward nhwc", 2.0 * pool_in + 6.0 * pool_out, [&](std::int64_t o) {
    k::MaxPool2dForward kernel{pool, f(a.data(), o), w(out.data(), o), index.data() + o};
    kernel.type = k::ElementType::bf16;
    return kernel;
  });
  both("MaxPool2dBackward nhwc", 6.0 * pool_out + 2.0 * pool_in, [&](std::int64_t o) {
    k::MaxPool2dBackward kernel{pool, index.data() + o, f(b.data(), o), w(out.data(), o)};
    kernel.type = k::ElementType::bf16;
    return kernel;
  });
  std::printf(
      "packed against per-element bandwidth (bf16, median of %d; in brackets: of the copy, "
      "%.0f GB/s)%s\n",
      kRuns, copy, line.c_str());
}
