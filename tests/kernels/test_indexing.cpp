#include "cuda/kernels/indexing.hpp"

#include "cuda/kernels/index_add.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>

#include "backend/kernel_args.hpp"
#include "kernel_test_util.hpp"

namespace rig::kernels::test {
namespace {

static_assert(sizeof(RowPieceArg) == sizeof(backend::RowPiece));
static_assert(offsetof(RowPieceArg, bytes) == offsetof(backend::RowPiece, bytes));
static_assert(offsetof(RowPieceArg, dst_offset) == offsetof(backend::RowPiece, dst_offset));

// Index values in [0, limit) with repeats, as i32 or i64 bytes.
std::vector<std::uint8_t> indices(std::int64_t k, std::int64_t limit, DType type,
                                  std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(k) * dtype_size(type));
  for (std::int64_t t = 0; t < k; ++t) {
    const auto v = static_cast<std::int64_t>(gen() % static_cast<std::uint32_t>(limit));
    if (type == DType::i32) {
      const auto v32 = static_cast<std::int32_t>(v);
      std::memcpy(out.data() + 4 * t, &v32, 4);
    } else {
      std::memcpy(out.data() + 8 * t, &v, 8);
    }
  }
  return out;
}

std::vector<std::uint8_t> random_bytes(std::int64_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> v(static_cast<std::size_t>(n));
  for (auto& b : v) b = static_cast<std::uint8_t>(gen());
  return v;
}

struct Dims {
  std::int64_t outer, n, inner, k;
};
constexpr Dims kDims[] = {{1, 10, 1, 7}, {3, 5, 33, 12}, {2, 50, 8, 1}, {1, 4, 70, 40}};

TEST(KernelIndexing, IndexSelectAndIndexAddBitEqualToCpu) {
  for (const Dims d : kDims) {
    for (const DType it : {DType::i32, DType::i64}) {
      const std::vector<std::uint8_t> idx = indices(d.k, d.n, it, 3);
      const backend::ConstBuffer index{idx.data(), it, Shape{d.k}};
      for (const int bytes : {1, 2, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << d.outer << "x" << d.n << "x" << d.inner << " k " << d.k
                                          << " " << dtype_name(it) << " bytes " << bytes);
        const std::vector<std::uint8_t> x = random_bytes(d.outer * d.n * d.inner * bytes, 4);
        const auto out_bytes = static_cast<std::size_t>(d.outer * d.k * d.inner * bytes);
        std::vector<std::uint8_t> want(out_bytes, 1), got(out_bytes, 2);
        cpu().index_select(x.data(), static_cast<std::size_t>(bytes), d.outer, d.n, d.inner, index,
                           want.data());
        run(IndexSelect{x.data(), bytes, d.outer, d.n, d.inner, idx.data(), it, d.k, got.data()});
        EXPECT_TRUE(bit_equal(got, want));
      }
      SCOPED_TRACE(::testing::Message() << d.outer << "x" << d.n << "x" << d.inner << " k " << d.k
                                        << " " << dtype_name(it) << " index_add");
      const std::vector<float> grad = uniform(d.outer * d.k * d.inner, -1.0F, 1.0F, 5);
      const std::vector<float> dx0 = uniform(d.outer * d.n * d.inner, -1.0F, 1.0F, 6);
      std::vector<float> want = dx0, got = dx0;
      cpu().index_add(grad.data(), d.outer, d.n, d.inner, index, want.data());
      for (const std::uint64_t emu_seed : kSeeds) {
        got = dx0;
        run(IndexAdd{grad.data(), d.outer, d.n, d.inner, idx.data(), it, d.k, got.data()},
            emu_seed);
        EXPECT_TRUE(bit_equal(got, want));  // index order: the CPU's sums
      }
    }
  }
}

// KernelBackend::index_add's sorted path (index_add.hpp) over host scratch,
// `chunk` positions per IndexAddRank chunk (0: index_add_rank_chunk).
void run_sorted_index_add(const float* grad, std::int64_t outer, std::int64_t n, std::int64_t inner,
                          const void* index, DType type, std::int64_t k, float* dx,
                          std::int64_t chunk, std::uint64_t seed) {
  if (chunk == 0) chunk = index_add_rank_chunk(k);
  const std::int64_t chunks = (k + chunk - 1) / chunk;
  std::vector<std::uint32_t> counts(static_cast<std::size_t>(chunks * k) + 1, 0xFFFFFFFFU);
  std::vector<std::uint32_t> order(static_cast<std::size_t>(k) + 1, 0xFFFFFFFFU);
  std::vector<std::uint32_t> keys(static_cast<std::size_t>(k) + 1, 0xFFFFFFFFU);
  run(IndexAddRank{index, type, k, n, chunk, counts.data()}, seed);
  run(IndexAddScatter{index, type, k, n, chunks, counts.data(), order.data(), keys.data()}, seed);
  run(IndexAddSegments{grad, outer, n, inner, k, order.data(), keys.data(), dx}, seed);
}

// dx += grad at index in ascending position, one float rounding per add,
// out-of-range positions skipped: the CPU back end's sums (which assumes
// valid indices).
std::vector<float> reference_index_add(const std::vector<float>& grad, std::int64_t outer,
                                       std::int64_t n, std::int64_t inner,
                                       const std::vector<std::int64_t>& idx,
                                       std::vector<float> dx) {
  const auto k = static_cast<std::int64_t>(idx.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t t = 0; t < k; ++t) {
      const std::int64_t row = idx[static_cast<std::size_t>(t)];
      if (row < 0 || row >= n) continue;
      for (std::int64_t i = 0; i < inner; ++i) {
        dx[static_cast<std::size_t>((o * n + row) * inner + i)] +=
            grad[static_cast<std::size_t>((o * k + t) * inner + i)];
      }
    }
  }
  return dx;
}

std::vector<std::uint8_t> index_bytes(const std::vector<std::int64_t>& idx, DType type) {
  std::vector<std::uint8_t> out(idx.size() * dtype_size(type));
  for (std::size_t t = 0; t < idx.size(); ++t) {
    if (type == DType::i32) {
      const auto v32 = static_cast<std::int32_t>(idx[t]);
      std::memcpy(out.data() + 4 * t, &v32, 4);
    } else {
      std::memcpy(out.data() + 8 * t, &idx[t], 8);
    }
  }
  return out;
}

struct SortedCase {
  const char* name;
  std::int64_t outer, n, inner;
  std::vector<std::int64_t> idx;
  bool i64_only = false;
};

// Indices [k] in [0, n) with `hot_percent` of the positions on row `hot`.
std::vector<std::int64_t> hot_indices(std::int64_t k, std::int64_t n, int hot_percent,
                                      std::int64_t hot, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<std::int64_t> v(static_cast<std::size_t>(k));
  for (auto& x : v) {
    x = static_cast<int>(gen() % 100) < hot_percent
            ? hot
            : static_cast<std::int64_t>(gen() % static_cast<std::uint32_t>(n));
  }
  return v;
}

// The sorted path gives the CPU's bits: many duplicates of one row, rows
// out of range (negative, n, beyond) adding nothing, i32 and i64, k = 0 and
// 1, outer > 1, inner not a multiple of 4, partial counts over many chunks
// and chunks of several shared tiles; the column-walking IndexAdd agrees.
TEST(KernelIndexing, SortedIndexAddBitEqualToCpu) {
  std::vector<std::int64_t> wild = hot_indices(300, 40, 30, 7, 41);
  for (std::size_t t = 0; t < wild.size(); t += 7) wild[t] = t % 2 == 0 ? -1 - std::int64_t(t) : 40;
  wild[3] = std::int64_t{1} << 40;  // beyond 32 bits (i64 only)
  std::vector<std::int64_t> descending(64);
  for (std::size_t t = 0; t < descending.size(); ++t) descending[t] = 63 - std::int64_t(t);
  const std::vector<SortedCase> cases = {
      {"hot 70%", 2, 50, 5, hot_indices(400, 50, 70, 13, 42)},
      {"all one row", 1, 6, 3, std::vector<std::int64_t>(97, 5)},
      {"out of range", 3, 40, 6, wild, true},
      {"k 1", 2, 9, 7, {4}},
      {"k 1 out of range", 1, 9, 7, {-3}},
      {"k 0", 2, 9, 7, {}},
      {"distinct, descending", 1, 64, 33, descending},
      {"random", 1, 64, 33, hot_indices(64, 64, 0, 0, 43)},
      {"two tiles, two chunks", 1, 3000, 2, hot_indices(2500, 3000, 20, 2999, 44)},
  };
  for (const SortedCase& c : cases) {
    const auto k = static_cast<std::int64_t>(c.idx.size());
    const std::vector<float> grad = uniform(c.outer * k * c.inner, -1.0F, 1.0F, 45);
    const std::vector<float> dx0 = uniform(c.outer * c.n * c.inner, -1.0F, 1.0F, 46);
    const std::vector<float> want = reference_index_add(grad, c.outer, c.n, c.inner, c.idx, dx0);
    bool all_valid = true;
    for (const std::int64_t v : c.idx) all_valid = all_valid && v >= 0 && v < c.n;
    for (const DType it : {DType::i32, DType::i64}) {
      if (it == DType::i32 && c.i64_only) continue;
      const std::vector<std::uint8_t> idx = index_bytes(c.idx, it);
      if (all_valid) {
        std::vector<float> cpu_dx = dx0;
        cpu().index_add(grad.data(), c.outer, c.n, c.inner, {idx.data(), it, Shape{k}},
                        cpu_dx.data());
        ASSERT_TRUE(bit_equal(cpu_dx, want)) << c.name;
      }
      for (const std::int64_t chunk : {std::int64_t{0}, std::int64_t{3}, std::int64_t{2048}}) {
        if (chunk == 3 && k > 500) continue;  // emulator time
        for (const std::uint64_t seed : kSeeds) {
          SCOPED_TRACE(::testing::Message() << c.name << " " << dtype_name(it) << " chunk " << chunk
                                            << " seed " << seed);
          std::vector<float> got = dx0;
          run_sorted_index_add(grad.data(), c.outer, c.n, c.inner, idx.data(), it, k, got.data(),
                               chunk, seed);
          EXPECT_TRUE(bit_equal(got, want));
        }
      }
      std::vector<float> walked = dx0;
      run(IndexAdd{grad.data(), c.outer, c.n, c.inner, idx.data(), it, k, walked.data()});
      EXPECT_TRUE(bit_equal(walked, want)) << c.name << " " << dtype_name(it) << " IndexAdd";
    }
  }
}

// The ranks are a stable sort of the positions by row, out-of-range rows last.
TEST(KernelIndexing, IndexAddRankSortsStablyByRow) {
  const std::vector<std::int64_t> rows{3, -1, 0, 3, 9, 0, 3, 1, 5};  // n = 5: -1, 9, 5 out
  const std::vector<std::uint32_t> want_order{2, 5, 7, 0, 3, 6, 1, 4, 8};
  const std::vector<std::uint32_t> want_keys{0, 0, 1, 3, 3, 3, 5, 5, 5};
  const auto k = static_cast<std::int64_t>(rows.size());
  for (const std::int64_t chunk : {std::int64_t{1}, std::int64_t{4}, std::int64_t{1024}}) {
    const std::int64_t chunks = (k + chunk - 1) / chunk;
    std::vector<std::uint32_t> counts(static_cast<std::size_t>(chunks * k));
    std::vector<std::uint32_t> order(rows.size()), keys(rows.size());
    run(IndexAddRank{rows.data(), DType::i64, k, 5, chunk, counts.data()});
    run(IndexAddScatter{rows.data(), DType::i64, k, 5, chunks, counts.data(), order.data(),
                        keys.data()});
    EXPECT_EQ(order, want_order) << "chunk " << chunk;
    EXPECT_EQ(keys, want_keys) << "chunk " << chunk;
  }
}

struct GatherCase {
  Shape x_shape, index_shape;
  int axis;
};

TEST(KernelIndexing, GatherAndBackwardBitEqualToCpu) {
  const GatherCase cases[] = {
      {{7}, {12}, 0},
      {{4, 9}, {4, 20}, 1},       // along the last axis, repeats
      {{6, 5}, {10, 3}, 0},       // along the first, index narrower than x
      {{3, 5, 4}, {2, 8, 3}, 1},  // the middle axis, smaller off-axis extents
      {{2, 3, 1, 4}, {2, 3, 1, 6}, 3},
  };
  for (const GatherCase& c : cases) {
    for (const DType it : {DType::i32, DType::i64}) {
      SCOPED_TRACE(::testing::Message()
                   << to_string(c.x_shape) << " index " << to_string(c.index_shape) << " axis "
                   << c.axis << " " << dtype_name(it));
      const std::int64_t along = c.x_shape[static_cast<std::size_t>(c.axis)];
      const std::int64_t k = shape_numel(c.index_shape);
      const std::vector<std::uint8_t> idx = indices(k, along, it, 8);
      const backend::ConstBuffer index{idx.data(), it, c.index_shape};
      const Strides xs = contiguous_strides(c.x_shape);
      const auto rank = static_cast<int>(c.x_shape.size());

      const std::vector<float> x = uniform(shape_numel(c.x_shape), -1.0F, 1.0F, 9);
      std::vector<float> want(static_cast<std::size_t>(k)), got(want.size(), 5.0F);
      cpu().gather(backend::ConstBuffer{x.data(), DType::f32, c.x_shape}, c.axis, index,
                   want.data());
      Gather g{.x = x.data(),
               .element_bytes = 4,
               .rank = rank,
               .axis = c.axis,
               .index = idx.data(),
               .index_type = it,
               .out = got.data(),
               .axis_size = c.x_shape[static_cast<std::size_t>(c.axis)]};
      GatherBackward b{.rank = rank,
                       .axis = c.axis,
                       .index = idx.data(),
                       .index_type = it,
                       .axis_size = g.axis_size};
      for (int d = 0; d < rank; ++d) {
        g.index_shape[d] = b.index_shape[d] = c.index_shape[static_cast<std::size_t>(d)];
        g.x_strides[d] = b.x_strides[d] = xs[static_cast<std::size_t>(d)];
      }
      run(g);
      EXPECT_TRUE(bit_equal(got, want));

      const std::vector<float> grad = uniform(k, -1.0F, 1.0F, 10);
      std::vector<float> want_dx(x.size(), 0.0F);
      cpu().gather_backward(grad.data(), c.axis, index, want_dx.data(), c.x_shape);
      for (const std::uint64_t emu_seed : kSeeds) {
        std::vector<float> dx(x.size(), 0.0F);
        b.grad = grad.data();
        b.dx = dx.data();
        run(b, emu_seed);
        EXPECT_TRUE(bit_equal(dx, want_dx));
      }
    }
  }
}

// Indices out of range (the ops' checks raise them after the fact on a GPU)
// read zeros and add nothing: no memory outside the operands is touched.
TEST(KernelIndexing, IndicesOutOfRangeReadZerosAndAddNothing) {
  const std::vector<float> x = uniform(3 * 4, -1.0F, 1.0F, 31);  // [3, 4]
  const std::vector<std::int64_t> idx{2, -1, 3, 0, 7};
  std::vector<float> rows(5 * 4, 9.0F);
  run(IndexSelect{x.data(), 4, 1, 3, 4, idx.data(), DType::i64, 5, rows.data()});
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(rows[j], x[8 + j]);
    EXPECT_EQ(rows[4 + j], 0.0F);
    EXPECT_EQ(rows[8 + j], 0.0F);
    EXPECT_EQ(rows[12 + j], x[j]);
    EXPECT_EQ(rows[16 + j], 0.0F);
  }
  std::vector<float> dx(3 * 4, 0.0F);
  const std::vector<float> grad(5 * 4, 1.0F);
  run(IndexAdd{grad.data(), 1, 3, 4, idx.data(), DType::i64, 5, dx.data()});
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(dx[j], 1.0F);
    EXPECT_EQ(dx[4 + j], 0.0F);
    EXPECT_EQ(dx[8 + j], 1.0F);
  }
  // Gather along axis 1 of [3, 4] with an index [3, 2].
  const std::vector<std::int64_t> gi{0, 4, -2, 3, 1, 1};
  std::vector<float> out(6, 9.0F);
  Gather g{.x = x.data(),
           .element_bytes = 4,
           .rank = 2,
           .axis = 1,
           .index_shape = {3, 2},
           .x_strides = {4, 1},
           .index = gi.data(),
           .index_type = DType::i64,
           .out = out.data(),
           .axis_size = 4};
  run(g);
  EXPECT_EQ(out, (std::vector<float>{x[0], 0.0F, 0.0F, x[7], x[9], x[9]}));
  std::vector<float> gdx(12, 0.0F);
  const std::vector<float> gg(6, 1.0F);
  run(GatherBackward{.grad = gg.data(),
                     .rank = 2,
                     .axis = 1,
                     .index_shape = {3, 2},
                     .x_strides = {4, 1},
                     .index = gi.data(),
                     .index_type = DType::i64,
                     .dx = gdx.data(),
                     .axis_size = 4});
  EXPECT_EQ(gdx, (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0}));
}

TEST(KernelIndexing, SelectAndMaskedFillBitEqualToCpu) {
  const Shape shape{3, 5, 7};
  struct Case {
    Strides cond, a, b;
  };
  const Case cases[] = {
      {{35, 7, 1}, {35, 7, 1}, {35, 7, 1}},
      {{0, 1, 0}, {1, 3, 15}, {7, 0, 1}},   // broadcast cond, transposed a, broadcast b
      {{35, 7, 1}, {0, 0, 0}, {35, 7, 1}},  // masked fill: a is one value
  };
  for (const Case& c : cases) {
    for (const int bytes : {1, 2, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << "bytes " << bytes);
      const std::vector<std::uint8_t> cond = [] {
        std::vector<std::uint8_t> m = random_bytes(105, 11);
        for (auto& v : m) v = v % 3 == 0 ? 0 : v;  // nonzero values other than 1 count as true
        return m;
      }();
      const std::vector<std::uint8_t> a = random_bytes(105 * bytes, 12);
      const std::vector<std::uint8_t> b = random_bytes(105 * bytes, 13);
      std::vector<std::uint8_t> want(static_cast<std::size_t>(105 * bytes), 1), got(want.size(), 2);
      cpu().select(shape, static_cast<std::size_t>(bytes), {cond.data(), c.cond}, {a.data(), c.a},
                   {b.data(), c.b}, want.data());
      Select k{.ndim = 3,
               .cond = cond.data(),
               .a = a.data(),
               .b = b.data(),
               .out = got.data(),
               .element_bytes = bytes};
      for (int d = 0; d < 3; ++d) {
        const auto u = static_cast<std::size_t>(d);
        k.shape[d] = shape[u];
        k.strides[0][d] = c.cond[u];
        k.strides[1][d] = c.a[u];
        k.strides[2][d] = c.b[u];
      }
      run(k);
      EXPECT_TRUE(bit_equal(got, want));
    }
  }
}

TEST(KernelIndexing, RowCopiesBitEqualToCpu) {
  // Odd piece sizes and offsets (narrow words), aligned ones (16-byte words),
  // and one piece longer than a chunk.
  for (const std::int64_t rows : {1, 3, 17}) {
    const std::int64_t sizes[] = {5, 16, 32, 3, rows == 1 ? kRowChunkBytes + 40 : 48};
    std::vector<std::vector<std::uint8_t>> sources;
    std::vector<backend::RowPiece> pieces;
    std::int64_t row_bytes = 0, max_bytes = 0;
    for (std::size_t p = 0; p < std::size(sizes); ++p) {
      sources.push_back(random_bytes(rows * sizes[p], static_cast<std::uint32_t>(20 + p)));
      pieces.push_back(
          {reinterpret_cast<const std::byte*>(sources.back().data()), sizes[p], row_bytes});
      row_bytes += sizes[p];
      max_bytes = std::max(max_bytes, sizes[p]);
    }
    SCOPED_TRACE(::testing::Message() << "rows " << rows << " row bytes " << row_bytes);
    const auto total = static_cast<std::size_t>(rows * row_bytes);
    std::vector<std::uint8_t> want(total, 1), got(total, 2);
    auto* wp = reinterpret_cast<std::byte*>(want.data());
    auto* gp = reinterpret_cast<std::byte*>(got.data());
    cpu().concat_rows(pieces.data(), static_cast<std::int64_t>(pieces.size()), wp, row_bytes, rows);
    std::vector<RowPieceArg> args(pieces.size());
    std::memcpy(args.data(), pieces.data(), pieces.size() * sizeof(RowPieceArg));
    run(ConcatRows{args.data(), static_cast<std::int64_t>(args.size()), gp, row_bytes, rows,
                   max_bytes});
    EXPECT_TRUE(bit_equal(got, want));

    for (const std::int64_t offset : {0, 5, 21}) {
      for (const std::int64_t bytes : {std::int64_t{1}, std::int64_t{16}, row_bytes - 21}) {
        SCOPED_TRACE(::testing::Message() << "offset " << offset << " bytes " << bytes);
        const auto packed = static_cast<std::size_t>(rows * bytes);
        std::vector<std::uint8_t> want_x(packed, 3), got_x(packed, 4);
        cpu().extract_rows(wp, row_bytes, offset, reinterpret_cast<std::byte*>(want_x.data()),
                           bytes, rows);
        run(ExtractRows{wp, row_bytes, offset, reinterpret_cast<std::byte*>(got_x.data()), bytes,
                        rows});
        EXPECT_TRUE(bit_equal(got_x, want_x));

        std::vector<std::uint8_t> want_z = want, got_z = want;
        cpu().zero_rows(reinterpret_cast<std::byte*>(want_z.data()), row_bytes, offset, bytes,
                        rows);
        run(ZeroRows{reinterpret_cast<std::byte*>(got_z.data()), row_bytes, offset, bytes, rows});
        EXPECT_TRUE(bit_equal(got_z, want_z));
      }
    }
  }
}

}  // namespace
}  // namespace rig::kernels::test
