// Elementwise f32 kernels (backend.hpp "Elementwise", core/cpu/elementwise.cpp):
//   UnaryForward / UnaryBackward: Backend::unary / unary_backward, grid-stride
//     per element. UnaryOp lists backend::Unary's operations in its order (the
//     launcher casts one into the other).
//   BinaryKernel: Backend::binary, out = a op b over a broadcasting plan
//     (backend::StridedPlan<3>: operands 0 out, 1 a, 2 b) whose shape and
//     strides travel as plain arrays.
//   BiasActivation: Backend::bias_activation, y = act(y + bias) per row in
//     place; pre (gelu only, as on the CPU) receives y + bias.
//   BiasReluDropoutStore: Backend::bias_activation_16, BiasActivation (relu or
//     none), dropout and the cast to 16 bits of a linear layer in one pass.
//   ActivationBackward (+ ColumnTotals): Backend::activation_backward,
//     activation_backward_bf16 and activation_backward_16 (whose 16-bit db
//     ColumnTotals rounds at its store, one row block or many). dz = g *
//     act'(saved) (times relu_scale for relu) and db = column sums of dz in
//     the CPU's order: rows in blocks of
//     kActivationRowBlock, each block summed in row order from 0 into its own
//     partial row, then the partial rows summed in block order from 0. One
//     thread per (row block, column), so db does not depend on scheduling.
// The per-element math is rig/math (activations.hpp) over math::DeviceMath.
// Storage type: UnaryForward, UnaryBackward, BinaryKernel and BiasActivation
// carry `type` (f32, f16 or bf16), the type of every float tensor they touch
// except BiasActivation's bias (always f32; BiasReluDropoutStore's has its
// own bias_type). The pointers keep their float*
// types, and for f16/bf16 they hold 16-bit values (read and written through
// load_element/store_element). The math is f32 throughout; each output is
// rounded once, at its store.
#pragma once

#include <cstdint>

#include "cuda/kernels/common.hpp"
#include "cuda/kernels/element_type.hpp"
#include "cuda/kernels/packed.hpp"
#include "rig/half.hpp"
#include "rig/math/activations.hpp"
#include "rig/math/device_math.hpp"
#include "rig/math/philox.hpp"
#include "rig/op_types.hpp"

namespace rig::kernels {

// backend::Unary's values, in its order.
enum class UnaryOp : std::uint8_t {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  relu,
  gelu,
  gelu_tanh,
  tanh,
  sigmoid,
  add_scalar,
  mul_scalar,
  pow_scalar,
};

// backend::Binary's values, in its order.
enum class BinaryOp : std::uint8_t { add, sub, mul, div };

// pow with the common exponents done exactly, as core/cpu/elementwise.cpp does.
RIG_HD_INLINE float pow_scalar(float x, float p) {
  if (p == 2.0F) return x * x;
  if (p == 1.0F) return x;
  if (p == 0.5F) return ::sqrtf(x);
  if (p == -1.0F) return 1.0F / x;
  if (p == 3.0F) return x * x * x;
  if (p == -0.5F) return 1.0F / ::sqrtf(x);
  return ::powf(x, p);
}

RIG_HD_INLINE float unary_value(UnaryOp op, float x, float s) {
  using M = math::DeviceMath;
  switch (op) {
    case UnaryOp::neg:
      return -x;
    case UnaryOp::exp:
      return M::exp(x);
    case UnaryOp::log:
      return M::log(x);
    case UnaryOp::sqrt:
      return M::sqrt(x);
    case UnaryOp::rsqrt:
      return 1.0F / M::sqrt(x);
    case UnaryOp::relu:
      return x < 0.0F ? 0.0F : x;  // NaN propagates
    case UnaryOp::gelu:
      return math::gelu<M>(x);
    case UnaryOp::gelu_tanh:
      return math::gelu_tanh<M>(x);
    case UnaryOp::tanh:
      return M::tanh(x);
    case UnaryOp::sigmoid:
      return math::sigmoid<M>(x);
    case UnaryOp::add_scalar:
      return x + s;
    case UnaryOp::mul_scalar:
      return x * s;
    case UnaryOp::pow_scalar:
      return pow_scalar(x, s);
  }
  return x;
}

// dx = g * op'(x) from the forward's input x or output y (what the CPU reads),
// both of storage type `type`.
RIG_HD_INLINE float unary_grad(UnaryOp op, float g, const float* x, const float* y, std::int64_t i,
                               float s, ElementType type = ElementType::f32) {
  using M = math::DeviceMath;
  const auto xi = [&] { return load_element(x, type, i); };
  const auto yi = [&] { return load_element(y, type, i); };
  switch (op) {
    case UnaryOp::neg:
      return -g;
    case UnaryOp::exp:
      return g * yi();
    case UnaryOp::log:
      return g / xi();
    case UnaryOp::sqrt:
      return g * 0.5F / yi();
    case UnaryOp::rsqrt: {
      const float yv = yi();
      return g * -0.5F * yv * yv * yv;
    }
    case UnaryOp::relu:
      return yi() > 0.0F ? g : 0.0F;
    case UnaryOp::gelu:
      return g * math::gelu_grad<M>(xi());
    case UnaryOp::gelu_tanh:
      return g * math::gelu_tanh_grad<M>(xi());
    case UnaryOp::tanh:
      return math::tanh_backward(g, yi());
    case UnaryOp::sigmoid:
      return math::sigmoid_backward(g, yi());
    case UnaryOp::add_scalar:
      return g;
    case UnaryOp::mul_scalar:
      return g * s;
    case UnaryOp::pow_scalar:
      if (s == 2.0F) return g * 2.0F * xi();
      if (s == 0.0F) return 0.0F;
      return g * s * pow_scalar(xi(), s - 1.0F);
  }
  return g;
}

struct UnaryForward {
  UnaryOp op = UnaryOp::neg;
  const float* x = nullptr;
  float* y = nullptr;  // may be x
  std::int64_t n = 0;
  float scalar = 0.0F;
  ElementType type = ElementType::f32;  // of x and y

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kUnroll);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const UnaryOp o = op;  // the lambdas capture locals, not the kernel's `this`
    const float* xs = x;
    float* ys = y;
    const float s = scalar;
    const ElementType t = type;
    unrolled_grid_stride(
        ctx, n, [&](std::int64_t i) { return load_element(xs, t, i); },
        [&](std::int64_t i, float v) { store_element(ys, t, i, unary_value(o, v, s)); });
  }
};

struct UnaryBackward {
  UnaryOp op = UnaryOp::neg;
  const float* g = nullptr;
  const float* x = nullptr;  // the forward's input, or null when op' does not read it
  const float* y = nullptr;  // the forward's output, or null when op' does not read it
  float* dx = nullptr;       // may be g
  std::int64_t n = 0;
  float scalar = 0.0F;
  ElementType type = ElementType::f32;  // of g, x, y and dx

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, n, kUnroll, 77);  // ptxas: 77
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      float g, x, y;  // x, y: 0 where not read
    };
    const UnaryOp o = op;  // the lambdas capture locals, not the kernel's `this`
    const float* gs = g;
    const float* xs = x;
    const float* ys = y;
    float* out = dx;
    const float s = scalar;
    const ElementType t = type;
    unrolled_grid_stride(
        ctx, n,
        [&](std::int64_t i) {
          return Loaded{load_element(gs, t, i), xs != nullptr ? load_element(xs, t, i) : 0.0F,
                        ys != nullptr ? load_element(ys, t, i) : 0.0F};
        },
        [&](std::int64_t i, const Loaded& v) {
          // x and y as loaded (widened): unary_grad reads them as f32 element 0.
          store_element(out, t, i,
                        unary_grad(o, v.g, xs != nullptr ? &v.x : nullptr,
                                   ys != nullptr ? &v.y : nullptr, 0, s));
        });
  }
};

RIG_HD_INLINE float binary_value(BinaryOp op, float a, float b) {
  switch (op) {
    case BinaryOp::add:
      return a + b;
    case BinaryOp::sub:
      return a - b;
    case BinaryOp::mul:
      return a * b;
    case BinaryOp::div:
      return a / b;
  }
  return a;
}

// out = a op b: ndim, shape and strides are a backend::StridedPlan<3>'s
// (operands 0 out, 1 a, 2 b; element strides, 0 on broadcast axes).
struct BinaryKernel {
  BinaryOp op = BinaryOp::add;
  int ndim = 1;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[3][kMaxDims] = {};
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  ElementType type = ElementType::f32;  // of a, b and out
  // out = relu(the value as stored), relu's rule: the bits of this kernel
  // and then UnaryForward's relu, in one pass (Backend::add_relu).
  bool relu = false;

  // In packs of kPack along the last axis (packed.hpp) where out's last axis
  // is contiguous and a multiple of kPack long, and each input either
  // contiguous along it (a pack) or broadcast along it (stride 0: one value
  // for the pack), every pack aligned.
  RIG_HD bool packed() const {
    const int last = ndim - 1;
    if (ndim < 1 || shape[last] % kPack != 0 || strides[0][last] != 1) return false;
    const void* operands[3] = {out, a, b};
    for (int o = 0; o < 3; ++o) {
      if (strides[o][last] == 0) continue;  // one value a pack: any offset will do
      if (strides[o][last] != 1 || !pack_aligned<kPack>(operands[o], type)) return false;
      for (int d = 0; d < last; ++d) {
        if (strides[o][d] % kPack != 0) return false;
      }
    }
    return true;
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, shape_elements(ndim, shape), packed() ? kPack : kUnroll,
                            54);  // ptxas: 54
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    struct Loaded {
      std::int64_t out;
      float a, b;
    };
    if (packed()) {  // uniform over the launch
      const int last = ndim - 1;
      // An input's pack at element offset `at`: a pack, or one value.
      const auto input = [&](const float* data, int o, std::int64_t at) {
        if (strides[o][last] != 0) return load_pack<kPack>(data, type, at / kPack);
        Pack<kPack> p;
        const float v = load_element(data, type, at);
        for (float& e : p.v) e = v;
        return p;
      };
      packed_grid_stride(
          ctx, shape_elements(ndim, shape),
          [&](std::int64_t k) {
            std::int64_t off[3];
            strided_offsets(k * kPack, ndim, shape, strides, off);
            const Pack<kPack> av = input(a, 1, off[1]);
            const Pack<kPack> bv = input(b, 2, off[2]);
            Pack<kPack> r;
            for (int e = 0; e < kPack; ++e) {
              const float v = binary_value(op, av.v[e], bv.v[e]);
              r.v[e] = relu ? relu_of_stored(type, v) : v;
            }
            store_pack<kPack>(out, type, off[0] / kPack, r);
          },
          [](std::int64_t) {});  // no partial pack: the last axis is a multiple of kPack
      return;
    }
    unrolled_grid_stride(
        ctx, shape_elements(ndim, shape),
        [&](std::int64_t i) {
          std::int64_t off[3];
          strided_offsets(i, ndim, shape, strides, off);
          return Loaded{off[0], load_element(a, type, off[1]), load_element(b, type, off[2])};
        },
        [&](std::int64_t, const Loaded& v) {
          const float r = binary_value(op, v.a, v.b);
          store_element(out, type, v.out, relu ? relu_of_stored(type, r) : r);
        });
  }
};

RIG_HD_INLINE float activation_value(Activation act, float v) {
  using M = math::DeviceMath;
  switch (act) {
    case Activation::none:
      return v;
    case Activation::relu:
      return v < 0.0F ? 0.0F : v;
    case Activation::gelu:
      return math::gelu<M>(v);
    case Activation::tanh:
      return M::tanh(v);
    case Activation::sigmoid:
      return math::sigmoid<M>(v);
  }
  return v;
}

// g * act'(saved); saved is the output (relu, tanh, sigmoid) or the
// pre-activation (gelu); none gives g.
RIG_HD_INLINE float activation_grad(Activation act, float g, float saved, float relu_scale) {
  switch (act) {
    case Activation::none:
      return g;
    case Activation::relu:
      return saved > 0.0F ? g * relu_scale : 0.0F;
    case Activation::gelu:
      return g * math::gelu_grad<math::DeviceMath>(saved);
    case Activation::tanh:
      return math::tanh_backward(g, saved);
    case Activation::sigmoid:
      return math::sigmoid_backward(g, saved);
  }
  return g;
}

// In place on y [rows, cols]. Launch nothing when bias is null and the
// activation none (the CPU returns).
struct BiasActivation {
  float* y = nullptr;
  float* pre = nullptr;         // [rows, cols] or null; written for gelu only
  const float* bias = nullptr;  // [cols] or null
  std::int64_t rows = 0, cols = 0;
  Activation activation = Activation::none;
  ElementType type = ElementType::f32;  // of y and pre (bias stays f32)

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, rows * cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = rows * cols;
    for (std::int64_t i = global_thread(ctx); i < n; i += grid_threads(ctx)) {
      float v = load_element(y, type, i);
      if (bias != nullptr) v += bias[div_mod(i, cols).remainder];
      if (pre != nullptr && activation == Activation::gelu) store_element(pre, type, i, v);
      store_element(y, type, i, activation_value(activation, v));
    }
  }
};

// y [rows, cols] (the f32 product) -> out in `type`: relu (or nothing) of
// y + bias, then, where `dropped`, dropout by the stream's element i as
// DropoutForward, rounded once at the store: the bits of BiasActivation,
// DropoutForward on f32 and a cast, in one pass instead of three (a 16-bit
// linear layer's output). One thread per Philox block of 4 elements.
struct BiasReluDropoutStore {
  const float* y = nullptr;
  const void* bias = nullptr;  // [cols] of bias_type, or null
  ElementType bias_type = ElementType::f32;
  void* out = nullptr;
  ElementType type = ElementType::bf16;
  std::int64_t rows = 0, cols = 0;
  bool relu = false;
  bool dropped = false;
  math::PhiloxStream stream{};  // where dropped: PhiloxStream::of(key...)
  std::uint32_t threshold = 0;  // math::dropout_threshold(p)
  float scale = 1.0F;

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, (rows * cols + 3) / 4, 1, 60);  // ptxas: 60 sm_75, 45 sm_90
  }

  // A block's 4 elements as one pack (packed.hpp) of y, the bias and out
  // where all allow (4 | cols: the pack's bias is a pack too).
  RIG_HD bool packed() const {
    return cols % 4 == 0 && pack_aligned<4>(y, ElementType::f32) &&
           pack_aligned<4>(bias, bias_type) && pack_aligned<4>(out, type);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t n = rows * cols;
    const std::int64_t blocks = (n + 3) / 4;
    const bool pack = packed();
    for (std::int64_t b = global_thread(ctx); b < blocks; b += grid_threads(ctx)) {
      const math::PhiloxBlock r =
          dropped ? stream.block(static_cast<std::uint64_t>(b)) : math::PhiloxBlock{};
      const std::int64_t first = 4 * b;
      const int valid = chunk_elements<4>(n, first);
      Pack<4> v = load_chunk<4>(y, ElementType::f32, first, valid, pack);
      Pack<4> bv{};
      if (bias != nullptr) {
        if (pack) {  // 4 | cols: the block's bias is a pack too
          bv = load_pack<4>(bias, bias_type, div_mod(b, cols / 4).remainder);
        } else {
          for (int k = 0; k < 4; ++k) {
            if (k < valid)
              bv.v[k] = load_element(bias, bias_type, div_mod(first + k, cols).remainder);
          }
        }
      }
      for (int k = 0; k < 4; ++k) {
        if (bias != nullptr) v.v[k] += bv.v[k];
        if (relu) v.v[k] = v.v[k] < 0.0F ? 0.0F : v.v[k];
        if (dropped) v.v[k] = math::dropout_keeps(r.v[k], threshold) ? v.v[k] * scale : 0.0F;
      }
      store_chunk<4>(out, type, first, valid, pack, v);
    }
  }
};

// Rows per partial row of db (the CPU's kRowBlock).
inline constexpr std::int64_t kActivationRowBlock = 64;

RIG_HD_INLINE std::int64_t activation_row_blocks(std::int64_t rows) {
  return (rows + kActivationRowBlock - 1) / kActivationRowBlock;
}

// One thread per (row block, column): dz (f32) and/or dz16 (of the 16-bit
// type `half`, rounded to nearest even) for the block's rows, and the block's column sum into
// db_partial[block * cols + column] (summed in row order from 0). With one
// row block (rows <= 64) pass db itself as db_partial; with more, pass
// activation_row_blocks(rows) * cols floats of scratch and run ColumnTotals
// after. Any of dz, dz16, db_partial may be null. To match the CPU:
// Backend::activation_backward writes no dz for Activation::none (pass
// null), and launches nothing when it is none and db is null.
struct ActivationBackward {
  Activation activation = Activation::none;
  const float* g = nullptr;
  const float* saved = nullptr;  // null for none
  float* dz = nullptr;
  std::uint16_t* dz16 = nullptr;
  float* db_partial = nullptr;
  std::int64_t rows = 0, cols = 0;
  float relu_scale = 1.0F;
  const std::uint16_t* g16 = nullptr;      // g in `half` instead (g null)
  const std::uint16_t* saved16 = nullptr;  // saved in `half` instead (saved null)
  ElementType half = ElementType::bf16;    // of dz16, g16 and saved16

  // In packs of kPack columns (packed.hpp) where cols and every operand
  // allow: a thread per (row block, kPack columns), its rows kUnroll at a
  // time, all loads before the first store (stores of one row could alias
  // the next one's loads, so the compiler would not reorder them).
  RIG_HD bool packed() const {
    return cols % kPack == 0 && pack_aligned<kPack>(g, ElementType::f32) &&
           pack_aligned<kPack>(saved, ElementType::f32) &&
           pack_aligned<kPack>(dz, ElementType::f32) && pack_aligned<kPack>(g16, half) &&
           pack_aligned<kPack>(saved16, half) && pack_aligned<kPack>(dz16, half);
  }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    const std::int64_t items = activation_row_blocks(rows) * (packed() ? cols / kPack : cols);
    return plan_grid_stride(device, items, 1, 96);  // ptxas: 96
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    if (packed()) {  // uniform over the launch
      packed_columns(ctx);
      return;
    }
    const std::int64_t items = activation_row_blocks(rows) * cols;
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      const auto [block, c] = div_mod(t, cols);
      const std::int64_t r0 = block * kActivationRowBlock;
      const std::int64_t r1 = r0 + kActivationRowBlock < rows ? r0 + kActivationRowBlock : rows;
      float sum = 0.0F;
      for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t i = r * cols + c;
        const float gi = g16 != nullptr ? load_element(g16, half, i) : g[i];
        const float d = activation_grad(activation, gi,
                                        saved16 != nullptr ? load_element(saved16, half, i)
                                        : saved != nullptr ? saved[i]
                                                           : 0.0F,
                                        relu_scale);
        if (dz != nullptr) dz[i] = d;
        if (dz16 != nullptr) store_element(dz16, half, i, d);
        sum += d;
      }
      if (db_partial != nullptr) db_partial[block * cols + c] = sum;
    }
  }

  // packed(): the same sums (each column's in row order from 0) and stores.
  template <class Ctx>
  RIG_HD void packed_columns(Ctx& ctx) const {
    constexpr int kRows = kUnroll;
    const std::int64_t packs = cols / kPack;
    const std::int64_t items = activation_row_blocks(rows) * packs;
    const void* gp = g16 != nullptr ? static_cast<const void*>(g16) : g;
    const ElementType g_type = g16 != nullptr ? half : ElementType::f32;
    const void* sp = saved16 != nullptr ? static_cast<const void*>(saved16) : saved;
    const ElementType s_type = saved16 != nullptr ? half : ElementType::f32;
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      const auto [block, pc] = div_mod(t, packs);
      const std::int64_t r0 = block * kActivationRowBlock;
      const std::int64_t r1 = r0 + kActivationRowBlock < rows ? r0 + kActivationRowBlock : rows;
      Pack<kPack> sum{};
      for (std::int64_t r = r0; r < r1; r += kRows) {
        Pack<kPack> gv[kRows]{}, sv[kRows]{};
        RIG_UNROLL for (int u = 0; u < kRows; ++u) {
          if (r + u >= r1) continue;
          const std::int64_t k = (r + u) * packs + pc;  // the pack's index in [rows, cols]
          gv[u] = load_pack<kPack>(gp, g_type, k);
          sv[u] = sp != nullptr ? load_pack<kPack>(sp, s_type, k) : Pack<kPack>{};
        }
        RIG_UNROLL for (int u = 0; u < kRows; ++u) {
          if (r + u >= r1) continue;
          const std::int64_t k = (r + u) * packs + pc;
          Pack<kPack> d;
          for (int e = 0; e < kPack; ++e) {
            d.v[e] = activation_grad(activation, gv[u].v[e], sv[u].v[e], relu_scale);
            sum.v[e] += d.v[e];
          }
          if (dz != nullptr) store_pack<kPack>(dz, ElementType::f32, k, d);
          if (dz16 != nullptr) store_pack<kPack>(dz16, half, k, d);
        }
      }
      if (db_partial != nullptr) {
        for (int e = 0; e < kPack; ++e) db_partial[block * cols + pc * kPack + e] = sum.v[e];
      }
    }
  }
};

// out[c] = sum over b of partial[b * cols + c], in order b = 0, 1, ... from 0,
// stored as out_type (rounded once for f16 / bf16): the second stage of
// ActivationBackward's db.
struct ColumnTotals {
  const float* partial = nullptr;  // [blocks, cols]
  void* out = nullptr;             // [cols] of out_type
  std::int64_t blocks = 0, cols = 0;
  ElementType out_type = ElementType::f32;
  bool accumulate = false;  // out += the totals (in f32, rounded once)
  // A second set of partial rows and its row, of the same shape and type,
  // totalled in the same launch (layer norm's dbeta beside its dgamma: a
  // launch of a few microseconds fewer); out2 null: none.
  const float* partial2 = nullptr;
  void* out2 = nullptr;
  bool accumulate2 = false;

  RIG_HD std::int64_t sets() const { return out2 != nullptr ? 2 : 1; }

  simt::LaunchShape plan(const simt::DeviceProperties& device) const {
    return plan_grid_stride(device, sets() * cols);
  }

  template <class Ctx>
  RIG_HD void operator()(Ctx& ctx) const {
    const std::int64_t items = sets() * cols;
    for (std::int64_t t = global_thread(ctx); t < items; t += grid_threads(ctx)) {
      const bool second = t >= cols;
      const std::int64_t c = second ? t - cols : t;
      const float* rows = second ? partial2 : partial;
      void* row = second ? out2 : out;
      float total = 0.0F;
      for (std::int64_t b = 0; b < blocks; ++b) total += rows[b * cols + c];
      if (second ? accumulate2 : accumulate) total += load_element(row, out_type, c);
      store_element(row, out_type, c, total);
    }
  }
};

}  // namespace rig::kernels
