// 2-D convolution on oneDNN.
//
// Why oneDNN: measured on the 2-core AVX-512 dev machine (AMD EPYC, Zen 4),
// ResNet-block shape x [128,32,14,14], w [32,32,3,3], pad 1; ms, median of
// 10-20 runs, one thread / two threads:
//   oneDNN 2.6, blocked layout (jit:avx512_core): fwd 3.64 / 1.97,
//     bwd-data 3.66 / 1.96, bwd-weights 4.13 / 2.39; a reorder NCHW <->
//     nChw16c of x costs 0.05-0.08.
//   oneDNN 2.6, plain NCHW (picks x64:gemm:jit): fwd 7.9, bwd-data 10.0,
//     bwd-weights 8.3 (one thread).
//   im2col + OpenBLAS sgemm ([32x288] x [288x25088]): im2col 4.7 + sgemm 7.8
//     = fwd 12.6 (one thread); the two backward sgemms 7.3 and 7.1 plus col2im.
//   PyTorch 1.13 (oneDNN through ideep), same shape: fwd 4.1 / 2.2,
//     fwd+bwd 18.4 / 9.4.
// The blocked oneDNN kernels run near the core's FMA peak (~125 GFLOP/s per
// core) where OpenBLAS reaches ~60 on this shape, so convolution uses them.
// Through this file (reorders in and out included, two threads):
// fwd 2.0-2.1, bwd data + weights 4.4-4.6.
//
// bf16 (conv2d_*_bf16, where the CPU has AVX512-BF16 or AMX): the same
// primitives on bf16 x, w, y and dy, f32 accumulation, y rounded once; the
// gradients come out in f32 (dw summed over the chunks in f32 too) and are
// rounded once, after adding what dx and dw already hold where asked. Why:
// with bf16 dot products oneDNN's bf16 kernels take about half the time of
// its f32 ones, and no f32 copies of the operands are made.
//
// Primitives are created once per shape and cached. The batch is split into
// chunks that the pool runs in parallel, each a single-threaded oneDNN call
// (dnnl_util.hpp); weight gradients of the chunks are summed in chunk
// order, so results do not depend on which thread ran which chunk.
#include "cpu/conv.hpp"

#include <algorithm>
#include <array>
#include <compare>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "cpu/dnnl_util.hpp"
#include "cpu/parallel.hpp"
#include "cpu/tensor_copy.hpp"

namespace rig::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using DataType = memory::data_type;
namespace du = dnnl_util;

// A layout conversion, or nothing when both layouts are the same.
struct Reorder {
  memory::desc from, to;
  std::optional<dnnl::reorder> primitive;

  Reorder() = default;
  Reorder(const memory::desc& f, const memory::desc& t) : from(f), to(t) {
    if (!(f == t)) {
      primitive = dnnl::reorder(dnnl::reorder::primitive_desc(du::engine(), f, du::engine(), t));
    }
  }
  bool needed() const { return primitive.has_value(); }
  void run(const void* src, void* dst) const {
    const du::Memory a = du::wrap(from, src);
    const du::Memory b = du::wrap(to, dst);
    du::check(du::execute(*primitive, {{DNNL_ARG_FROM, a.get()}, {DNNL_ARG_TO, b.get()}}),
              "conv2d: reorder");
  }
};

// Everything oneDNN needs for one problem size (the batch of one chunk) and
// element type (f32 or bf16).
struct Plan {
  // x, w, y and dy as the caller lays them out, in the element type; dx and
  // dw as the caller gets them, in f32.
  memory::desc x_user, w_user, b_user, y_user, dx_user, dw_user;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  // The primitives' layouts, queried once: oneDNN's C++ query functions
  // allocate (a std::vector) on every call.
  memory::desc fwd_src, fwd_weights, fwd_dst, fwd_scratch;
  Reorder x_to_fwd, w_to_fwd, fwd_to_y;

  bool has_backward = false;
  dnnl::convolution_backward_data::primitive_desc data_pd;
  dnnl::convolution_backward_data data;
  memory::desc data_diff_dst, data_weights, data_diff_src, data_scratch;
  dnnl::convolution_backward_weights::primitive_desc weights_pd;
  dnnl::convolution_backward_weights weights;
  memory::desc weights_src, weights_diff_dst, weights_diff_weights, weights_scratch;
  Reorder dy_to_data, w_to_data, data_to_dx;
  Reorder dy_to_weights, x_to_weights, weights_to_dw;
};

using Key = std::array<std::int64_t, 19>;

Key key_of(const Conv2dShape& s, std::int64_t n, DataType type) {
  return {static_cast<std::int64_t>(type),
          n,
          s.c_in,
          s.h,
          s.w,
          s.c_out,
          s.kernel_h,
          s.kernel_w,
          s.stride_h,
          s.stride_w,
          s.pad_h,
          s.pad_w,
          s.dilation_h,
          s.dilation_w,
          s.groups,
          s.bias ? 1 : 0,
          s.out_h,
          s.out_w,
          s.channels_last ? 1 : 0};
}

memory::desc any(const memory::dims& dims, DataType type) {
  return {dims, type, Tag::any};
}

// The convolution's geometry in oneDNN's terms: dilation counts from 0, and
// the padding is symmetric (oneDNN's output size then rounds down like PyTorch's).
struct Geometry {
  memory::dims strides, dilates, padding;
  explicit Geometry(const Conv2dShape& s)
      : strides{s.stride_h, s.stride_w},
        dilates{s.dilation_h - 1, s.dilation_w - 1},
        padding{s.pad_h, s.pad_w} {}
};

// rig hands every primitive its scratchpad from the caching allocator.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void build_forward(Plan& p, const Conv2dShape& s, std::int64_t n, DataType type) {
  const memory::dims x_dims{n, s.c_in, s.h, s.w};
  const memory::dims y_dims{n, s.c_out, s.out_h, s.out_w};
  const memory::dims w_dims =
      s.groups == 1
          ? memory::dims{s.c_out, s.c_in, s.kernel_h, s.kernel_w}
          : memory::dims{s.groups, s.c_out / s.groups, s.c_in / s.groups, s.kernel_h, s.kernel_w};
  // oneDNN's dims are always NCHW-ordered; the tag says how they lie in memory.
  const Tag data = s.channels_last ? Tag::nhwc : Tag::nchw;
  const Tag weights = s.channels_last ? (s.groups == 1 ? Tag::ohwi : Tag::gohwi)
                                      : (s.groups == 1 ? Tag::oihw : Tag::goihw);
  p.x_user = memory::desc(x_dims, type, data);
  p.y_user = memory::desc(y_dims, type, data);
  p.w_user = memory::desc(w_dims, type, weights);
  p.dx_user = memory::desc(x_dims, DataType::f32, data);
  p.dw_user = memory::desc(w_dims, DataType::f32, weights);
  if (s.bias) p.b_user = memory::desc({s.c_out}, DataType::f32, Tag::x);

  const Geometry g(s);
  const dnnl::primitive_attr attr = user_scratchpad();
  const dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, any(x_dims, type),
      any(w_dims, type), s.bias ? p.b_user : memory::desc(), any(y_dims, type), g.strides,
      g.dilates, g.padding, g.padding);
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(desc, attr, du::engine());
  p.fwd = dnnl::convolution_forward(p.fwd_pd);
  p.fwd_src = p.fwd_pd.src_desc();
  p.fwd_weights = p.fwd_pd.weights_desc();
  p.fwd_dst = p.fwd_pd.dst_desc();
  p.fwd_scratch = p.fwd_pd.scratchpad_desc();
  p.x_to_fwd = Reorder(p.x_user, p.fwd_src);
  p.w_to_fwd = Reorder(p.w_user, p.fwd_weights);
  p.fwd_to_y = Reorder(p.fwd_dst, p.y_user);
}

void build_backward(Plan& p, const Conv2dShape& s) {
  const Geometry g(s);
  const auto x_dims = p.x_user.dims();
  const auto y_dims = p.y_user.dims();
  const auto w_dims = p.w_user.dims();
  const DataType type = p.x_user.data_type();
  const dnnl::primitive_attr attr = user_scratchpad();

  // The gradients in f32 whatever the type: added to, and rounded, by the caller.
  const dnnl::convolution_backward_data::desc data_desc(
      dnnl::algorithm::convolution_direct, any(x_dims, DataType::f32), any(w_dims, type),
      any(y_dims, type), g.strides, g.dilates, g.padding, g.padding);
  p.data_pd =
      dnnl::convolution_backward_data::primitive_desc(data_desc, attr, du::engine(), p.fwd_pd);
  p.data = dnnl::convolution_backward_data(p.data_pd);
  p.data_diff_dst = p.data_pd.diff_dst_desc();
  p.data_weights = p.data_pd.weights_desc();
  p.data_diff_src = p.data_pd.diff_src_desc();
  p.data_scratch = p.data_pd.scratchpad_desc();
  p.dy_to_data = Reorder(p.y_user, p.data_diff_dst);
  p.w_to_data = Reorder(p.w_user, p.data_weights);
  p.data_to_dx = Reorder(p.data_diff_src, p.dx_user);

  const dnnl::convolution_backward_weights::desc weights_desc(
      dnnl::algorithm::convolution_direct, any(x_dims, type), any(w_dims, DataType::f32),
      s.bias ? p.b_user : memory::desc(), any(y_dims, type), g.strides, g.dilates, g.padding,
      g.padding);
  p.weights_pd = dnnl::convolution_backward_weights::primitive_desc(weights_desc, attr,
                                                                    du::engine(), p.fwd_pd);
  p.weights = dnnl::convolution_backward_weights(p.weights_pd);
  p.weights_src = p.weights_pd.src_desc();
  p.weights_diff_dst = p.weights_pd.diff_dst_desc();
  p.weights_diff_weights = p.weights_pd.diff_weights_desc();
  p.weights_scratch = p.weights_pd.scratchpad_desc();
  p.dy_to_weights = Reorder(p.y_user, p.weights_diff_dst);
  p.x_to_weights = Reorder(p.x_user, p.weights_src);
  p.weights_to_dw = Reorder(p.weights_diff_weights, p.dw_user);
  p.has_backward = true;
}

// The cached plan for `s` with batch `n` (with backward primitives when asked).
std::shared_ptr<const Plan> plan_for(const Conv2dShape& s, std::int64_t n, bool backward,
                                     DataType type) {
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<Plan>> cache;
  constexpr std::size_t kMaxPlans = 256;  // a bound for programs that see many shapes
  const Key key = key_of(s, n, type);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  try {
    if (it == cache.end()) {
      if (cache.size() >= kMaxPlans) cache.clear();  // users keep their plans alive
      auto plan = std::make_shared<Plan>();
      build_forward(*plan, s, n, type);
      it = cache.emplace(key, std::move(plan)).first;
    }
    if (backward && !it->second->has_backward) build_backward(*it->second, s);
  } catch (const dnnl::error& e) {
    throw std::runtime_error(fmt::format(
        "conv2d: oneDNN has no {} {} convolution for x [{},{},{},{}], weight [{},{},{},{}] "
        "(stride {}x{}, padding {}x{}, dilation {}x{}, groups {}): {}",
        type == DataType::bf16 ? "bf16" : "f32", backward ? "backward" : "forward", n, s.c_in, s.h,
        s.w, s.c_out, s.c_in / s.groups, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h,
        s.pad_w, s.dilation_h, s.dilation_w, s.groups, e.what()));
  }
  return it->second;
}

// The batch split: `count` chunks of `size` images, the last one `tail` images.
struct Chunks {
  std::int64_t count = 1, size = 0, tail = 0;
};

Chunks chunks_of(std::int64_t n) {
  // A few chunks per thread let the pool balance uneven progress.
  const std::int64_t wanted =
      std::max<std::int64_t>(1, std::min<std::int64_t>(n, 2 * num_threads()));
  Chunks c;
  c.size = (n + wanted - 1) / wanted;
  c.count = (n + c.size - 1) / c.size;
  c.tail = n - (c.count - 1) * c.size;
  return c;
}

// Runs `r` into a new buffer when needed; returns the data to use.
const void* converted(const Reorder& r, const void* data, Scratch& holder) {
  if (!r.needed()) return data;
  holder = du::buffer(r.to.get_size());
  r.run(data, holder.data());
  return holder.data();
}

// Where a primitive writes: `user` directly, or a buffer that `r` converts back.
void* output_buffer(const Reorder& r, void* user, Scratch& holder) {
  if (!r.needed()) return user;
  holder = du::buffer(r.from.get_size());
  return holder.data();
}

dnnl_exec_arg_t arg(int which, const du::Memory& m) {
  return {which, m.get()};
}

// The plan of chunk `c`: all chunks share one, except a shorter last chunk.
struct ChunkPlans {
  Chunks chunks;
  std::shared_ptr<const Plan> full, tail;
  const Plan& of(std::int64_t c) const { return c == chunks.count - 1 ? *tail : *full; }
};

ChunkPlans plans_for(const Conv2dShape& s, bool backward, DataType type) {
  ChunkPlans p;
  p.chunks = chunks_of(s.n);
  p.full = plan_for(s, p.chunks.size, backward, type);
  p.tail = p.chunks.tail == p.chunks.size ? p.full : plan_for(s, p.chunks.tail, backward, type);
  return p;
}

// Weights converted once per call for every plan in use (at most two).
struct Weights {
  Scratch full_buffer, tail_buffer;
  const void* full = nullptr;
  const void* tail = nullptr;
  const void* of(std::int64_t c, const ChunkPlans& p) const {
    return c == p.chunks.count - 1 ? tail : full;
  }
};

Weights convert_weights(const ChunkPlans& p, const void* w, Reorder Plan::*reorder) {
  Weights out;
  out.full = converted((*p.full).*reorder, w, out.full_buffer);
  out.tail = p.tail == p.full ? out.full : converted((*p.tail).*reorder, w, out.tail_buffer);
  return out;
}

std::size_t element_size(DataType type) {
  return type == DataType::bf16 ? 2 : 4;
}

// y = conv(x, w) + b for x, w and y of `type` (b: f32, null without bias).
void forward(const Conv2dShape& s, DataType type, const void* x_data, const void* w, const float* b,
             void* y_data) {
  if (s.n == 0) return;
  const du::SingleThreaded single;
  const ChunkPlans plans = plans_for(s, false, type);
  const Weights weights = convert_weights(plans, w, &Plan::w_to_fwd);
  // Images as bytes, so that one loop serves both types.
  const auto* x = static_cast<const std::byte*>(x_data);
  auto* y = static_cast<std::byte*>(y_data);
  const auto x_image = static_cast<std::int64_t>(s.c_in * s.h * s.w * element_size(type));
  const auto y_image = static_cast<std::int64_t>(s.c_out * s.out_h * s.out_w * element_size(type));
  FirstError errors;
  parallel_for(plans.chunks.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      errors.run([&] {
        const du::SingleThreaded single;
        const Plan& p = plans.of(c);
        const std::int64_t first = c * plans.chunks.size;
        Scratch x_buffer, y_buffer;
        const void* src = converted(p.x_to_fwd, x + first * x_image, x_buffer);
        std::byte* y_user = y + first * y_image;
        void* dst = output_buffer(p.fwd_to_y, y_user, y_buffer);
        Scratch scratch = du::buffer(p.fwd_scratch.get_size());
        const du::Memory m_src = du::wrap(p.fwd_src, src);
        const du::Memory m_w = du::wrap(p.fwd_weights, weights.of(c, plans));
        const du::Memory m_dst = du::wrap(p.fwd_dst, dst);
        const du::Memory m_scratch = du::wrap(p.fwd_scratch, scratch.data());
        const du::Memory m_b = s.bias ? du::wrap(p.b_user, b) : du::Memory();
        dnnl_status_t status;
        if (s.bias) {
          status = du::execute(
              p.fwd, {arg(DNNL_ARG_SRC, m_src), arg(DNNL_ARG_WEIGHTS, m_w), arg(DNNL_ARG_BIAS, m_b),
                      arg(DNNL_ARG_DST, m_dst), arg(DNNL_ARG_SCRATCHPAD, m_scratch)});
        } else {
          status =
              du::execute(p.fwd, {arg(DNNL_ARG_SRC, m_src), arg(DNNL_ARG_WEIGHTS, m_w),
                                  arg(DNNL_ARG_DST, m_dst), arg(DNNL_ARG_SCRATCHPAD, m_scratch)});
        }
        du::check(status, "conv2d forward");
        if (p.fwd_to_y.needed()) p.fwd_to_y.run(dst, y_user);
      });
    }
  });
  errors.rethrow();
}

// The gradients (f32, null: not wanted) of a convolution of x, w and dy of `type`.
void backward(const Conv2dShape& s, DataType type, const void* x_data, const void* w,
              const void* dy_data, float* dx, float* dw, float* db) {
  const bool want_weights = dw != nullptr || db != nullptr;
  const std::int64_t w_numel = s.w_elements();
  if (s.n == 0) {
    if (dw) std::fill(dw, dw + w_numel, 0.0F);
    if (db) std::fill(db, db + s.c_out, 0.0F);
    return;
  }
  const du::SingleThreaded single;
  const ChunkPlans plans = plans_for(s, true, type);
  Weights weights;
  if (dx) weights = convert_weights(plans, w, &Plan::w_to_data);
  const std::int64_t x_image = s.c_in * s.h * s.w;
  const std::int64_t y_image = s.c_out * s.out_h * s.out_w;
  // x and dy as bytes, so that one loop serves both types; dx is f32 either way.
  const auto* x = static_cast<const std::byte*>(x_data);
  const auto* dy = static_cast<const std::byte*>(dy_data);
  const auto x_image_bytes = static_cast<std::int64_t>(x_image * element_size(type));
  const auto y_image_bytes = static_cast<std::int64_t>(y_image * element_size(type));
  // Per-chunk weight and bias gradients in the user layout, summed in chunk order below.
  const std::int64_t partial_numel = w_numel + (s.bias ? s.c_out : 0);
  Scratch partials;
  if (want_weights) {
    partials =
        Scratch(static_cast<std::size_t>(plans.chunks.count * partial_numel) * sizeof(float));
  }
  FirstError errors;
  parallel_for(plans.chunks.count, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      errors.run([&] {
        const du::SingleThreaded single;
        const Plan& p = plans.of(c);
        const std::int64_t first = c * plans.chunks.size;
        const std::byte* dy_user = dy + first * y_image_bytes;
        Scratch dy_data_buffer, dy_weights_buffer, x_buffer, dx_buffer, dw_buffer;
        const void* dy_data = nullptr;
        if (dx) {
          dy_data = converted(p.dy_to_data, dy_user, dy_data_buffer);
          float* dx_user = dx + first * x_image;
          void* diff_src = output_buffer(p.data_to_dx, dx_user, dx_buffer);
          Scratch scratch = du::buffer(p.data_scratch.get_size());
          const du::Memory m_dy = du::wrap(p.data_diff_dst, dy_data);
          const du::Memory m_w = du::wrap(p.data_weights, weights.of(c, plans));
          const du::Memory m_dx = du::wrap(p.data_diff_src, diff_src);
          const du::Memory m_scratch = du::wrap(p.data_scratch, scratch.data());
          du::check(du::execute(p.data, {arg(DNNL_ARG_DIFF_DST, m_dy), arg(DNNL_ARG_WEIGHTS, m_w),
                                         arg(DNNL_ARG_DIFF_SRC, m_dx),
                                         arg(DNNL_ARG_SCRATCHPAD, m_scratch)}),
                    "conv2d backward (data)");
          if (p.data_to_dx.needed()) p.data_to_dx.run(diff_src, dx_user);
        }
        if (!want_weights) return;
        // The data pass's converted dy serves here too when the layouts agree.
        const void* dy_weights = dy_data != nullptr && p.data_diff_dst == p.weights_diff_dst
                                     ? dy_data
                                     : converted(p.dy_to_weights, dy_user, dy_weights_buffer);
        const void* src = converted(p.x_to_weights, x + first * x_image_bytes, x_buffer);
        float* partial = partials.as<float>() + c * partial_numel;
        void* diff_w = output_buffer(p.weights_to_dw, partial, dw_buffer);
        Scratch scratch = du::buffer(p.weights_scratch.get_size());
        const du::Memory m_src = du::wrap(p.weights_src, src);
        const du::Memory m_dy = du::wrap(p.weights_diff_dst, dy_weights);
        const du::Memory m_dw = du::wrap(p.weights_diff_weights, diff_w);
        const du::Memory m_scratch = du::wrap(p.weights_scratch, scratch.data());
        const du::Memory m_db = s.bias ? du::wrap(p.b_user, partial + w_numel) : du::Memory();
        dnnl_status_t status;
        if (s.bias) {
          status = du::execute(p.weights,
                               {arg(DNNL_ARG_SRC, m_src), arg(DNNL_ARG_DIFF_DST, m_dy),
                                arg(DNNL_ARG_DIFF_WEIGHTS, m_dw), arg(DNNL_ARG_DIFF_BIAS, m_db),
                                arg(DNNL_ARG_SCRATCHPAD, m_scratch)});
        } else {
          status = du::execute(
              p.weights, {arg(DNNL_ARG_SRC, m_src), arg(DNNL_ARG_DIFF_DST, m_dy),
                          arg(DNNL_ARG_DIFF_WEIGHTS, m_dw), arg(DNNL_ARG_SCRATCHPAD, m_scratch)});
        }
        du::check(status, "conv2d backward (weights)");
        if (p.weights_to_dw.needed()) p.weights_to_dw.run(diff_w, partial);
      });
    }
  });
  errors.rethrow();
  if (!want_weights) return;
  const float* part = partials.as<float>();
  const std::int64_t count = plans.chunks.count;
  const auto reduce = [&](float* out, std::int64_t offset, std::int64_t numel) {
    for (std::int64_t i = 0; i < numel; ++i) {
      float total = part[offset + i];
      for (std::int64_t c = 1; c < count; ++c) total += part[c * partial_numel + offset + i];
      out[i] = total;
    }
  };
  if (dw) reduce(dw, 0, w_numel);
  if (db) reduce(db, w_numel, s.c_out);
}

}  // namespace

void conv2d_forward(const Conv2dShape& s, const float* x, const float* w, const float* b,
                    float* y) {
  forward(s, DataType::f32, x, w, b, y);
}

void conv2d_backward(const Conv2dShape& s, const float* x, const float* w, const float* dy,
                     float* dx, float* dw, float* db) {
  backward(s, DataType::f32, x, w, dy, dx, dw, db);
}

bool conv2d_bf16_supported() {
  // AVX512-BF16 (or AMX): oneDNN's bf16 kernels; elsewhere it would emulate
  // them, slower than the f32 path they replace.
  static const bool supported = [] {
    const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
    return (isa & bf16) == bf16;
  }();
  return supported;
}

void conv2d_forward_bf16(const Conv2dShape& s, const std::uint16_t* x, const std::uint16_t* w,
                         std::uint16_t* y) {
  forward(s, DataType::bf16, x, w, nullptr, y);
}

void conv2d_backward_bf16(const Conv2dShape& s, const std::uint16_t* x, const std::uint16_t* w,
                          const std::uint16_t* dy, std::uint16_t* dx, std::uint16_t* dw,
                          const backend::ConvGradAccumulation& accumulate) {
  const std::int64_t x_numel = s.x_elements();
  const std::int64_t w_numel = s.w_elements();
  Scratch dx_made, dw_made;
  if (dx) dx_made = Scratch(static_cast<std::size_t>(x_numel) * sizeof(float));
  if (dw) dw_made = Scratch(static_cast<std::size_t>(w_numel) * sizeof(float));
  backward(s, DataType::bf16, x, w, dy, dx ? dx_made.as<float>() : nullptr,
           dw ? dw_made.as<float>() : nullptr, nullptr);
  // out = made rounded, or out + made summed in f32 and rounded.
  const auto store = [](std::uint16_t* out, const float* made, std::int64_t n, bool add) {
    (add ? add_strided : copy_strided)({n}, out, {1}, DType::bf16, made, {1}, DType::f32);
  };
  if (dx) store(dx, dx_made.as<float>(), x_numel, accumulate.dx);
  if (dw) store(dw, dw_made.as<float>(), w_numel, accumulate.dw);
}

}  // namespace rig::cpu
