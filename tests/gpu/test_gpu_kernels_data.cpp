// The elementwise, copy, reduction, indexing and selection kernels of
// core/cuda/kernels on a real GPU against the CPU back end on the same
// inputs: bit equality where no rounding can differ (copies, casts, binary
// ops, indexing, selection, maxima, f64 sums), the emulator tests'
// tolerances where exp / tanh or a float summation order are involved.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/strided_plan.hpp"
#include "cuda/runtime/kernel_runs.cuh"
#include "device_array.hpp"
#include "gpu_test.hpp"
#include "kernel_test_util.hpp"

namespace {

using namespace rig::kernels;
using rig::DType;
using rig::Shape;
using rig::Strides;
using rig::kernels::test::bit_equal;
using rig::kernels::test::close;
using rig::kernels::test::cpu;
using rig::kernels::test::uniform;
using rig_gpu_test::DeviceArray;

class GpuDataKernels : public rig_gpu_test::GpuTest {};

std::vector<std::int64_t> indices(std::int64_t k, std::int64_t limit, std::uint32_t seed) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) v[static_cast<std::size_t>(i)] = (i * 7919 + seed) % limit;
  return v;
}

TEST_F(GpuDataKernels, UnaryAndBinaryMatchCpu) {
  const std::int64_t n = 100003;
  const std::vector<float> x = uniform(n, 0.1F, 4.0F, 1);
  const std::vector<float> g = uniform(n, -1.0F, 1.0F, 2);
  const DeviceArray<float> gx(x), gg(g);
  for (const UnaryOp op : {UnaryOp::neg, UnaryOp::log, UnaryOp::sqrt, UnaryOp::relu, UnaryOp::exp,
                           UnaryOp::gelu, UnaryOp::tanh, UnaryOp::sigmoid}) {
    SCOPED_TRACE(static_cast<int>(op));
    const auto bop = static_cast<rig::backend::Unary>(op);
    std::vector<float> y(static_cast<std::size_t>(n)), dx(y.size());
    cpu().unary(bop, x.data(), y.data(), n, 0.0F);
    cpu().unary_backward(bop, g.data(), x.data(), y.data(), dx.data(), n, 0.0F);
    const DeviceArray<float> gy_cpu(y);
    DeviceArray<float> gy(y.size()), gdx(y.size());
    rig::cuda::run(UnaryForward{op, gx.data(), gy.data(), n, 0.0F}, nullptr);
    rig::cuda::run(UnaryBackward{op, gg.data(), gx.data(), gy_cpu.data(), gdx.data(), n, 0.0F},
                   nullptr);
    const bool exact = op == UnaryOp::neg || op == UnaryOp::sqrt || op == UnaryOp::relu;
    if (exact) {
      EXPECT_TRUE(bit_equal(gy.to_host(), y));
      EXPECT_TRUE(bit_equal(gdx.to_host(), dx));
    } else {  // the GPU's expf / logf / tanhf against the CPU's polynomials
      EXPECT_TRUE(close(gy.to_host(), y, 1e-6F, 2e-5F));
      EXPECT_TRUE(close(gdx.to_host(), dx, 1e-6F, 2e-5F));
    }
  }
  // out [5, 33, 7] = a [5, 33, 7] op b [33, 1] (broadcast over the first and last axes).
  const Shape shape{5, 33, 7};
  const Strides out_strides{33 * 7, 7, 1}, a_strides = out_strides, b_strides{0, 1, 0};
  const auto plan =
      rig::backend::make_strided_plan<3>(shape, {&out_strides, &a_strides, &b_strides});
  const std::vector<float> a = uniform(5 * 33 * 7, -3.0F, 3.0F, 3);
  const std::vector<float> b = uniform(33, 0.5F, 3.0F, 4);
  const DeviceArray<float> ga(a), gb(b);
  for (const BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
    std::vector<float> want(a.size());
    cpu().binary(static_cast<rig::backend::Binary>(op), plan, a.data(), b.data(), want.data());
    DeviceArray<float> got(a.size());
    BinaryKernel k{.op = op, .ndim = plan.ndim, .a = ga.data(), .b = gb.data(), .out = got.data()};
    for (int d = 0; d < plan.ndim; ++d) {
      k.shape[d] = plan.shape[d];
      for (int o = 0; o < 3; ++o) k.strides[o][d] = plan.strides[o][d];
    }
    rig::cuda::run(k, nullptr);
    EXPECT_TRUE(bit_equal(got.to_host(), want));
  }
}

TEST_F(GpuDataKernels, BiasActivationAndItsBackwardMatchCpu) {
  const std::int64_t rows = 301, cols = 513;
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::vector<float> y0 = uniform(rows * cols, -3.0F, 3.0F, 5);
  const std::vector<float> bias = uniform(cols, -0.5F, 0.5F, 6);
  const std::vector<float> g = uniform(rows * cols, -1.0F, 1.0F, 7);
  for (const rig::Activation act : {rig::Activation::relu, rig::Activation::gelu}) {
    SCOPED_TRACE(static_cast<int>(act));
    std::vector<float> y = y0, pre(n), dz(n), db(static_cast<std::size_t>(cols));
    cpu().bias_activation(y.data(), pre.data(), bias.data(), rows, cols, act);
    const std::vector<float>& saved = act == rig::Activation::gelu ? pre : y;
    cpu().activation_backward(act, g.data(), saved.data(), dz.data(), db.data(), rows, cols, 1.0F);

    DeviceArray<float> gy(y0), gpre(n);
    const DeviceArray<float> gbias(bias), gg(g), gsaved(saved);
    rig::cuda::run(BiasActivation{gy.data(), gpre.data(), gbias.data(), rows, cols, act}, nullptr);
    const std::int64_t blocks = activation_row_blocks(rows);
    DeviceArray<float> gdz(n), partial(static_cast<std::size_t>(blocks * cols)), gdb(cols);
    rig::cuda::run(ActivationBackward{act, gg.data(), gsaved.data(), gdz.data(), nullptr,
                                      partial.data(), rows, cols, 1.0F},
                   nullptr);
    rig::cuda::run(ColumnTotals{partial.data(), gdb.data(), blocks, cols}, nullptr);
    if (act == rig::Activation::relu) {
      EXPECT_TRUE(bit_equal(gy.to_host(), y));
      EXPECT_TRUE(bit_equal(gdz.to_host(), dz));
    } else {
      EXPECT_TRUE(close(gy.to_host(), y, 1e-6F, 2e-5F));
      EXPECT_TRUE(bit_equal(gpre.to_host(), pre));
      EXPECT_TRUE(close(gdz.to_host(), dz, 1e-6F, 2e-5F));
    }
    EXPECT_TRUE(close(gdb.to_host(), db, 1e-4F, 1e-5F));  // summed in another order
  }
}

TEST_F(GpuDataKernels, CopiesAndCastsAreBitEqualToCpu) {
  // A [37, 129] f32 matrix read transposed into bf16, then widened back.
  const std::int64_t r = 37, c = 129;
  const std::vector<float> x = uniform(r * c, -70000.0F, 70000.0F, 8);
  const Shape shape{c, r};
  const Strides dst_strides{r, 1}, src_strides{1, c};
  std::vector<std::uint16_t> want(static_cast<std::size_t>(r * c));
  cpu().copy_strided(shape, want.data(), dst_strides, DType::bf16, x.data(), src_strides,
                     DType::f32);
  const DeviceArray<float> gx(x);
  DeviceArray<std::uint16_t> got(want.size());
  rig::cuda::run(CopyStrided{.ndim = 2,
                             .shape = {c, r},
                             .strides = {{r, 1}, {1, c}},
                             .dst = got.data(),
                             .dst_type = DType::bf16,
                             .src = gx.data(),
                             .src_type = DType::f32},
                 nullptr);
  EXPECT_TRUE(bit_equal(got.to_host(), want));
  // f32 -> i32 (truncated, saturated).
  std::vector<std::int32_t> want_i(static_cast<std::size_t>(r * c));
  const Shape flat{r * c};
  const Strides one{1};
  cpu().copy_strided(flat, want_i.data(), one, DType::i32, x.data(), one, DType::f32);
  DeviceArray<std::int32_t> got_i(want_i.size());
  rig::cuda::run(CopyStrided{.ndim = 1,
                             .shape = {r * c},
                             .strides = {{1}, {1}},
                             .dst = got_i.data(),
                             .dst_type = DType::i32,
                             .src = gx.data(),
                             .src_type = DType::f32},
                 nullptr);
  EXPECT_TRUE(bit_equal(got_i.to_host(), want_i));
  // A misaligned contiguous byte copy: 16-byte words in the middle, bytes at the ends.
  std::vector<std::uint8_t> bytes(100001);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 31);
  const DeviceArray<std::uint8_t> src(bytes);
  DeviceArray<std::uint8_t> dst(bytes.size());
  rig::cuda::run(CopyContiguous{dst.data() + 3, src.data() + 3, 99990}, nullptr);
  const std::vector<std::uint8_t> back = dst.to_host();
  EXPECT_TRUE(std::equal(back.begin() + 3, back.begin() + 99993, bytes.begin() + 3));
}

TEST_F(GpuDataKernels, ReductionsMatchCpu) {
  const std::int64_t n = 1000003;
  const std::vector<float> x = uniform(n, -1.0F, 1.0F, 9);
  const DeviceArray<float> gx(x);
  for (const bool squares : {false, true}) {
    float want = 0.0F;
    if (squares) {
      cpu().sum_squares(x.data(), n, 2.0, &want);
    } else {
      cpu().sum_all(x.data(), n, 2.0, &want);
    }
    DeviceArray<double> partial(static_cast<std::size_t>(sum_chunks(n)));
    DeviceArray<float> got(1);
    rig::cuda::run(SumPartials{gx.data(), n, squares, partial.data()}, nullptr);
    rig::cuda::run(SumFinish{partial.data(), sum_chunks(n), 2.0, got.data()}, nullptr);
    // Both sum in f64 but in other orders: a bound relative to sum |x|.
    EXPECT_NEAR(got.to_host()[0], want, 1e-6 * static_cast<double>(n));
  }
  const std::int64_t outer = 13, r = 257, inner = 9;
  const std::vector<float> y = uniform(outer * r * inner, -5.0F, 5.0F, 10);
  const std::vector<float> g = uniform(outer * inner, -1.0F, 1.0F, 11);
  std::vector<float> sum(static_cast<std::size_t>(outer * inner)), mx(sum.size());
  std::vector<std::int64_t> index(sum.size());
  std::vector<float> dx(y.size());
  cpu().sum_axis(y.data(), sum.data(), outer, r, inner, 0.5F);
  cpu().max_axis(y.data(), mx.data(), index.data(), outer, r, inner);
  cpu().max_axis_backward(g.data(), index.data(), dx.data(), outer, r, inner);
  const DeviceArray<float> gy(y), gg(g);
  DeviceArray<float> gsum(sum.size()), gmx(sum.size()), gdx(y.size());
  DeviceArray<std::int64_t> gindex(sum.size());
  rig::cuda::run(SumAxis{gy.data(), gsum.data(), outer, r, inner, 0.5F}, nullptr);
  rig::cuda::run(MaxAxis{gy.data(), gmx.data(), gindex.data(), outer, r, inner}, nullptr);
  rig::cuda::run(MaxAxisBackward{gg.data(), gindex.data(), gdx.data(), outer, r, inner}, nullptr);
  EXPECT_TRUE(close(gsum.to_host(), sum, 1e-5F, 1e-5F));
  EXPECT_TRUE(bit_equal(gmx.to_host(), mx));
  EXPECT_TRUE(bit_equal(gindex.to_host(), index));
  EXPECT_TRUE(bit_equal(gdx.to_host(), dx));
}

TEST_F(GpuDataKernels, EmbeddingGatherAndSelectAreBitEqualToCpu) {
  // Embedding: x [1, vocab, dim] rows at index [k]; its backward sums repeated rows in order.
  const std::int64_t vocab = 1031, dim = 65, k = 4099;
  const std::vector<float> table = uniform(vocab * dim, -1.0F, 1.0F, 12);
  const std::vector<std::int64_t> ids = indices(k, 97, 3);  // many repeats
  const rig::backend::ConstBuffer index{ids.data(), DType::i64, Shape{k}};
  std::vector<float> rows(static_cast<std::size_t>(k * dim));
  cpu().index_select(table.data(), sizeof(float), 1, vocab, dim, index, rows.data());
  const std::vector<float> grad = uniform(k * dim, -1.0F, 1.0F, 13);
  std::vector<float> dtable(table.size(), 0.0F);
  cpu().index_add(grad.data(), 1, vocab, dim, index, dtable.data());

  const DeviceArray<float> gtable(table), ggrad(grad);
  const DeviceArray<std::int64_t> gids(ids);
  DeviceArray<float> grows(rows.size());
  DeviceArray<float> gdtable(std::vector<float>(table.size(), 0.0F));
  rig::cuda::run(
      IndexSelect{gtable.data(), 4, 1, vocab, dim, gids.data(), DType::i64, k, grows.data()},
      nullptr);
  rig::cuda::run(IndexAdd{ggrad.data(), 1, vocab, dim, gids.data(), DType::i64, k, gdtable.data()},
                 nullptr);
  EXPECT_TRUE(bit_equal(grows.to_host(), rows));
  EXPECT_TRUE(bit_equal(gdtable.to_host(), dtable));

  // torch.gather along axis 1 of x [6, 50] with index [6, 20], and its backward.
  const std::vector<float> x = uniform(300, -1.0F, 1.0F, 14);
  const std::vector<std::int64_t> gi = indices(120, 50, 5);
  std::vector<float> gathered(120), dx(300, 0.0F);
  const rig::backend::ConstBuffer xb{x.data(), DType::f32, Shape{6, 50}};
  const rig::backend::ConstBuffer ib{gi.data(), DType::i64, Shape{6, 20}};
  cpu().gather(xb, 1, ib, gathered.data());
  const std::vector<float> gg = uniform(120, -1.0F, 1.0F, 15);
  cpu().gather_backward(gg.data(), 1, ib, dx.data(), Shape{6, 50});
  const DeviceArray<float> gx(x), ggg(gg);
  const DeviceArray<std::int64_t> ggi(gi);
  DeviceArray<float> ggathered(120), gdx(std::vector<float>(300, 0.0F));
  rig::cuda::run(Gather{.x = gx.data(),
                        .element_bytes = 4,
                        .rank = 2,
                        .axis = 1,
                        .index_shape = {6, 20},
                        .x_strides = {50, 1},
                        .index = ggi.data(),
                        .index_type = DType::i64,
                        .out = ggathered.data(),
                        .axis_size = 50},
                 nullptr);
  rig::cuda::run(GatherBackward{.grad = ggg.data(),
                                .rank = 2,
                                .axis = 1,
                                .index_shape = {6, 20},
                                .x_strides = {50, 1},
                                .index = ggi.data(),
                                .index_type = DType::i64,
                                .dx = gdx.data(),
                                .axis_size = 50},
                 nullptr);
  EXPECT_TRUE(bit_equal(ggathered.to_host(), gathered));
  EXPECT_TRUE(bit_equal(gdx.to_host(), dx));

  // where(cond [7, 33], a [7, 33], b [1, 33] broadcast) and a masked fill (b a scalar).
  const std::vector<float> a = uniform(7 * 33, -1.0F, 1.0F, 16);
  const std::vector<float> b = uniform(33, 5.0F, 6.0F, 17);
  std::vector<std::uint8_t> cond(7 * 33);
  for (std::size_t i = 0; i < cond.size(); ++i) cond[i] = (i * 5 % 7) < 3;
  std::vector<float> want(a.size());
  cpu().select(Shape{7, 33}, 4, {cond.data(), Strides{33, 1}}, {a.data(), Strides{33, 1}},
               {b.data(), Strides{0, 1}}, want.data());
  const DeviceArray<std::uint8_t> gcond(cond);
  const DeviceArray<float> ga(a), gb(b);
  DeviceArray<float> got(a.size());
  rig::cuda::run(Select{.ndim = 2,
                        .shape = {7, 33},
                        .strides = {{33, 1}, {33, 1}, {0, 1}},
                        .cond = gcond.data(),
                        .a = ga.data(),
                        .b = gb.data(),
                        .out = got.data(),
                        .element_bytes = 4},
                 nullptr);
  EXPECT_TRUE(bit_equal(got.to_host(), want));
}

TEST_F(GpuDataKernels, RowCopiesAreBitEqualToCpu) {
  const std::int64_t rows = 37, a_bytes = 12, b_bytes = 40000, row_bytes = a_bytes + b_bytes;
  std::vector<std::uint8_t> a(static_cast<std::size_t>(rows * a_bytes));
  std::vector<std::uint8_t> b(static_cast<std::size_t>(rows * b_bytes));
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>(i * 7);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint8_t>(i * 13 + 1);
  std::vector<std::uint8_t> want(static_cast<std::size_t>(rows * row_bytes));
  const rig::backend::RowPiece cpu_pieces[] = {
      {reinterpret_cast<const std::byte*>(a.data()), a_bytes, 0},
      {reinterpret_cast<const std::byte*>(b.data()), b_bytes, a_bytes}};
  cpu().concat_rows(cpu_pieces, 2, reinterpret_cast<std::byte*>(want.data()), row_bytes, rows);

  const DeviceArray<std::uint8_t> ga(a), gb(b);
  DeviceArray<std::uint8_t> got(want.size());
  const std::vector<RowPieceArg> pieces = {
      {reinterpret_cast<const std::byte*>(ga.data()), a_bytes, 0},
      {reinterpret_cast<const std::byte*>(gb.data()), b_bytes, a_bytes}};
  DeviceArray<std::uint8_t> gpieces(sizeof(RowPieceArg) * pieces.size());
  RIG_CUDA_CHECK(cudaMemcpy(gpieces.data(), pieces.data(), gpieces.size(), cudaMemcpyHostToDevice));
  rig::cuda::run(ConcatRows{reinterpret_cast<const RowPieceArg*>(gpieces.data()), 2,
                            reinterpret_cast<std::byte*>(got.data()), row_bytes, rows, b_bytes},
                 nullptr);
  EXPECT_TRUE(bit_equal(got.to_host(), want));

  // Back out: the second piece of every row, then zero it in place.
  DeviceArray<std::uint8_t> back(b.size());
  rig::cuda::run(ExtractRows{reinterpret_cast<const std::byte*>(got.data()), row_bytes, a_bytes,
                             reinterpret_cast<std::byte*>(back.data()), b_bytes, rows},
                 nullptr);
  EXPECT_TRUE(bit_equal(back.to_host(), b));
  rig::cuda::run(
      ZeroRows{reinterpret_cast<std::byte*>(got.data()), row_bytes, a_bytes, b_bytes, rows},
      nullptr);
  cpu().zero_rows(reinterpret_cast<std::byte*>(want.data()), row_bytes, a_bytes, b_bytes, rows);
  EXPECT_TRUE(bit_equal(got.to_host(), want));
}

TEST_F(GpuDataKernels, ArgmaxAndTopKAreBitEqualToCpu) {
  // Beam search's shapes: [beams, vocab] rows, k = 2 * beam.
  const std::int64_t rows = 12, n = 32003, k = 8;
  std::vector<float> x = uniform(rows * n, -10.0F, 10.0F, 18);
  x[5] = x[17];  // a tie
  const rig::backend::ConstBuffer xb{x.data(), DType::f32, Shape{rows, n}};
  std::vector<std::int64_t> want_arg(static_cast<std::size_t>(rows));
  cpu().argmax(xb, rows, n, 1, want_arg.data());
  std::vector<float> want_values(static_cast<std::size_t>(rows * k));
  std::vector<std::int64_t> want_indices(want_values.size());
  cpu().topk(xb, rows, n, k, want_values.data(), want_indices.data());

  const DeviceArray<float> gx(x);
  DeviceArray<std::int64_t> arg(static_cast<std::size_t>(rows)), idx(want_indices.size());
  DeviceArray<float> values(want_values.size());
  rig::cuda::run(Argmax{gx.data(), DType::f32, rows, n, 1, arg.data()}, nullptr);
  rig::cuda::run(TopK{gx.data(), DType::f32, rows, n, k, values.data(), idx.data()}, nullptr);
  EXPECT_TRUE(bit_equal(arg.to_host(), want_arg));
  EXPECT_TRUE(bit_equal(values.to_host(), want_values));
  EXPECT_TRUE(bit_equal(idx.to_host(), want_indices));
}

}  // namespace
