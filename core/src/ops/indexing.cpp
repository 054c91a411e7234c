// Shape and indexing ops: concat, split, gather, index_select.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ops/op_util.hpp"
#include "rig/autograd.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

namespace {

using detail::backend_of;
using detail::empty_on;
using detail::normalize_axis;
using detail::require_defined;
using detail::require_dtype;
using detail::require_same_device;

std::int64_t product(const Shape& shape, std::size_t begin, std::size_t end) {
  std::int64_t n = 1;
  for (std::size_t d = begin; d < end; ++d) n *= shape[d];
  return n;
}

std::string shapes_of(const TensorList& tensors) {
  std::string s;
  for (const auto& t : tensors) {
    if (!s.empty()) s += ", ";
    s += t.defined() ? to_string(t.shape()) : "undefined";
  }
  return s;
}

// A gradient as a contiguous f32 tensor (what the accumulating kernels take).
Tensor f32_contiguous(const Tensor& g) {
  return g.dtype() == DType::f32 ? g.contiguous() : g.to(DType::f32).contiguous();
}

// Copies `src` (contiguous, `shape` with `size` along `axis`) into the slice
// [offset, offset + size) of `dst` (contiguous, same dtype).
void write_slice(const Tensor& src, Tensor& dst, std::int64_t axis, std::int64_t offset) {
  const auto ax = static_cast<std::size_t>(axis);
  const std::int64_t rows = product(dst.shape(), 0, ax);
  const auto elem = static_cast<std::int64_t>(dtype_size(dst.dtype()));
  const std::int64_t inner = product(dst.shape(), ax + 1, dst.shape().size()) * elem;
  const backend::RowPiece piece{src.raw_data(), src.size(axis) * inner, offset * inner};
  backend_of(dst).concat_rows(&piece, 1, dst.raw_data(), dst.size(axis) * inner, rows);
}

void zero_slice(Tensor& dst, std::int64_t axis, std::int64_t offset, std::int64_t size) {
  const auto ax = static_cast<std::size_t>(axis);
  const auto elem = static_cast<std::int64_t>(dtype_size(dst.dtype()));
  const std::int64_t inner = product(dst.shape(), ax + 1, dst.shape().size()) * elem;
  backend_of(dst).zero_rows(dst.raw_data(), dst.size(axis) * inner, offset * inner, size * inner,
                            product(dst.shape(), 0, ax));
}

// The slice [offset, offset + size) of `src` (contiguous) along `axis` as a
// contiguous tensor: a view when that is already contiguous, else a copy.
Tensor read_slice(const Tensor& src, std::int64_t axis, std::int64_t offset, std::int64_t size) {
  const auto ax = static_cast<std::size_t>(axis);
  const std::int64_t rows = product(src.shape(), 0, ax);
  if (rows == 1) return src.slice(axis, offset, offset + size);
  Shape shape = src.shape();
  shape[ax] = size;
  Tensor out = empty_on(src, shape, src.dtype());
  const auto elem = static_cast<std::int64_t>(dtype_size(src.dtype()));
  const std::int64_t inner = product(src.shape(), ax + 1, src.shape().size()) * elem;
  backend_of(src).extract_rows(src.raw_data(), src.size(axis) * inner, offset * inner,
                               out.raw_data(), size * inner, rows);
  return out;
}

// The outputs of one split share a gradient buffer of x's shape: the first
// output to get a gradient allocates it, every output writes its slice, and a
// hidden node between x and the outputs hands it on (zeroing the slices of
// outputs that got no gradient). Only that node feeds the buffer to the
// engine, so no full-size gradient per output is built or summed.
struct SplitState {
  Tensor buffer;
  std::vector<bool> written;
};

}  // namespace

Tensor concat(const TensorList& tensors, std::int64_t axis) {
  if (tensors.empty()) throw std::invalid_argument("concat: no tensors");
  for (const auto& t : tensors) require_defined("concat", t, "every input");
  const Tensor& first = tensors.front();
  for (const auto& t : tensors) require_same_device("concat", {&tensors[0], &t});
  const std::int64_t dim = first.dim();
  const std::int64_t ax = normalize_axis(axis, dim, "concat", first.shape());
  Shape shape = first.shape();
  shape[static_cast<std::size_t>(ax)] = 0;
  for (const auto& t : tensors) {
    if (t.dtype() != first.dtype()) {
      throw std::invalid_argument(fmt::format("concat: dtypes differ: {} {} and {} {}",
                                              dtype_name(first.dtype()), to_string(first.shape()),
                                              dtype_name(t.dtype()), to_string(t.shape())));
    }
    bool ok = t.dim() == dim;
    for (std::int64_t d = 0; ok && d < dim; ++d) ok = d == ax || t.size(d) == first.size(d);
    if (!ok) {
      throw std::invalid_argument(
          fmt::format("concat: {}: shapes differ outside axis {}", shapes_of(tensors), axis));
    }
    shape[static_cast<std::size_t>(ax)] += t.size(ax);
  }
  Tensor out = empty_on(first, shape, first.dtype());
  const auto elem = static_cast<std::int64_t>(dtype_size(first.dtype()));
  const std::int64_t rows = product(shape, 0, static_cast<std::size_t>(ax));
  const std::int64_t inner = product(shape, static_cast<std::size_t>(ax) + 1, shape.size()) * elem;
  // Inline for a few inputs (a decode step appends to a cache: two).
  SmallVector<Tensor, 4> contiguous;
  SmallVector<backend::RowPiece, 4> pieces;
  SmallVector<std::int64_t, 4> sizes;
  contiguous.reserve(tensors.size());
  pieces.reserve(tensors.size());
  sizes.reserve(tensors.size());
  std::int64_t offset = 0;
  for (const auto& t : tensors) {
    contiguous.push_back(t.detach().contiguous());
    sizes.push_back(t.size(ax));
    pieces.push_back({contiguous.back().raw_data(), t.size(ax) * inner, offset * inner});
    offset += t.size(ax);
  }
  backend_of(out).concat_rows(pieces.data(), static_cast<std::int64_t>(pieces.size()),
                              out.raw_data(), shape[static_cast<std::size_t>(ax)] * inner, rows);
  SmallVector<bool, 4> need;
  for (const auto& t : tensors) need.push_back(t.requires_grad());
  return autograd::record(std::move(out), "concat", tensors,
                          [ax, sizes = std::move(sizes), need = std::move(need)](const Tensor& g) {
                            const Tensor gc = g.contiguous();
                            autograd::TensorList grads(sizes.size());
                            std::int64_t start = 0;
                            for (std::size_t i = 0; i < sizes.size(); ++i) {
                              if (need[i]) grads[i] = read_slice(gc, ax, start, sizes[i]);
                              start += sizes[i];
                            }
                            return grads;
                          });
}

// Whether `tensors` lie one after another in one storage, each contiguous,
// with one dtype and the same trailing shape: the rows of one view.
bool one_after_another(const TensorList& tensors) {
  const Tensor& first = tensors.front();
  if (first.dim() < 1) return false;
  std::int64_t next = first.impl()->offset;
  for (const auto& t : tensors) {
    if (!t.defined() || t.impl()->storage != first.impl()->storage || !t.is_contiguous() ||
        t.dtype() != first.dtype() || t.dim() != first.dim() || t.impl()->offset != next) {
      return false;
    }
    for (std::int64_t d = 1; d < first.dim(); ++d) {
      if (t.size(d) != first.size(d)) return false;
    }
    next += t.numel();
  }
  return true;
}

// Where the parts are leaves whose .grad tensors lie one after another like
// the parts themselves: those .grad as one tensor of the joined shape, into
// which the op reading the joined rows may add its gradient in place (a
// product's beta = 1); else undefined.
Tensor joined_grads(const TensorList& parts, const Shape& shape) {
  TensorList grads;
  for (const auto& t : parts) {
    const Tensor g = t.grad();
    if (t.impl()->grad_fn || !t.requires_grad() || !g.defined() || g.shape() != t.shape()) {
      return {};
    }
    grads.push_back(g);
  }
  if (!one_after_another(grads)) return {};
  const Tensor& first = grads.front();
  return Tensor::view_of(first.impl()->storage, first.impl()->offset, shape, first.dtype());
}

Tensor joined_rows(const TensorList& parts) {
  if (parts.empty()) throw std::invalid_argument("joined_rows: no tensors");
  for (const auto& t : parts) require_defined("joined_rows", t, "every part");
  const Tensor& first = parts.front();
  const bool adjacent = one_after_another(parts);
  if (!adjacent) return concat(parts, 0);
  SmallVector<std::int64_t, 4> sizes;
  std::int64_t rows = 0;
  for (const auto& t : parts) {
    sizes.push_back(t.size(0));
    rows += t.size(0);
  }
  Shape shape = first.shape();
  shape[0] = rows;
  const Tensor home = grad_mode_enabled() ? joined_grads(parts, shape) : Tensor();
  const std::int64_t row_bytes = (rows > 0 ? shape_numel(shape) / rows : 0) *
                                 static_cast<std::int64_t>(dtype_size(first.dtype()));
  Tensor out = autograd::record(
      Tensor::view_of(first.impl()->storage, first.impl()->offset, shape, first.dtype()),
      "joined_rows", parts,
      [sizes, row_bytes, home_data = home.defined() ? home.raw_data() : nullptr](const Tensor& g) {
        autograd::TensorList grads(sizes.size());
        if (home_data != nullptr && g.raw_data() == home_data) {
          // The op that read the rows added its gradient into the parts' .grad
          // (the home): each part's is there already. (Where another gradient
          // is pending for a part, backward() adds that one into .grad after.)
          const std::byte* at = home_data;
          for (std::size_t i = 0; i < sizes.size(); ++i) {
            Tensor target = autograd::accumulation_target(i);
            if (target.defined() && target.raw_data() == at) grads[i] = std::move(target);
            at += sizes[i] * row_bytes;
          }
          return grads;
        }
        // g is dense [rows, ...] (made contiguous): each part's rows are a view of it.
        const Tensor gc = g.contiguous();
        std::int64_t start = 0;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          grads[i] = gc.slice(0, start, start + sizes[i]);
          start += sizes[i];
        }
        return grads;
      });
  if (home.defined() && out.impl()->grad_fn) autograd::set_output_grad_home(out, home);
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::int64_t>& sizes,
                          std::int64_t axis) {
  require_defined("split", x, "x");
  require_same_device("split", {&x});
  const std::int64_t ax = normalize_axis(axis, x.dim(), "split", x.shape());
  std::int64_t total = 0;
  for (auto s : sizes) {
    if (s < 0) {
      throw std::invalid_argument(fmt::format("split: negative size {} for {} along axis {}", s,
                                              to_string(x.shape()), axis));
    }
    total += s;
  }
  if (total != x.size(ax)) {
    throw std::invalid_argument(fmt::format("split: sizes [{}] add up to {}, not {} ({} axis {})",
                                            fmt::join(sizes, ","), total, x.size(ax),
                                            to_string(x.shape()), axis));
  }
  // The outputs are views of x (no copy); their history goes through `join`.
  const Tensor base = x.detach();
  std::vector<Tensor> outs;
  outs.reserve(sizes.size());
  std::int64_t start = 0;
  for (auto s : sizes) {
    outs.push_back(base.slice(ax, start, start + s));
    start += s;
  }
  if (!grad_mode_enabled() || !x.requires_grad()) return outs;

  auto state = std::make_shared<SplitState>();
  state->written.assign(sizes.size(), false);
  Tensor join =
      autograd::record(x.detach(), "split", {x},
                       [state, ax, sizes = Axes(sizes)](const Tensor&) -> autograd::TensorList {
                         // The gradient given here is the shared buffer: zero the slices
                         // that no output wrote.
                         Tensor buffer = std::move(state->buffer);
                         state->buffer = Tensor();
                         std::int64_t offset = 0;
                         for (std::size_t i = 0; i < sizes.size(); ++i) {
                           if (!state->written[i]) zero_slice(buffer, ax, offset, sizes[i]);
                           state->written[i] = false;
                           offset += sizes[i];
                         }
                         return {buffer};
                       });
  start = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::int64_t offset = start;
    start += sizes[i];
    outs[i] = autograd::record(
        std::move(outs[i]), "split", {join},
        [state, i, ax, offset, shape = x.shape()](const Tensor& g) -> autograd::TensorList {
          const bool first = !state->buffer.defined();
          if (first) state->buffer = empty_on(g, shape, g.dtype());
          write_slice(g.dtype() == state->buffer.dtype() ? g.contiguous()
                                                         : g.to(state->buffer.dtype()).contiguous(),
                      state->buffer, ax, offset);
          state->written[i] = true;
          return {first ? state->buffer : Tensor()};
        });
  }
  return outs;
}

Tensor gather(const Tensor& x, std::int64_t axis, const Tensor& index) {
  require_defined("gather", x, "x");
  require_dtype("gather", index, "index", {DType::i64, DType::i32});
  require_same_device("gather", {&x, &index});
  const std::int64_t ax = normalize_axis(axis, x.dim(), "gather", x.shape());
  bool ok = index.dim() == x.dim();
  for (std::int64_t d = 0; ok && d < x.dim(); ++d) ok = d == ax || index.size(d) <= x.size(d);
  if (!ok) {
    throw std::invalid_argument(fmt::format(
        "gather: index {} does not fit x {} along axis {} (same rank, no larger off the axis)",
        to_string(index.shape()), to_string(x.shape()), axis));
  }
  const Tensor idx = index.detach().contiguous();
  detail::check_index_range(
      idx, x.size(ax),
      [](std::int64_t position, std::int64_t value, std::int64_t size, const Shape& shape,
         std::int64_t along) {
        return fmt::format(
            "gather: index {} at position {} is out of range for size {} of x {} along axis {}",
            value, position, size, to_string(shape), along);
      },
      x.size(ax), x.shape(), axis);
  const Tensor xc = x.detach().contiguous();
  const backend::ConstBuffer index_buffer{idx.raw_data(), idx.dtype(), idx.shape()};
  Tensor out = empty_on(xc, index.shape(), x.dtype());
  backend_of(xc).gather({xc.raw_data(), xc.dtype(), xc.shape()}, ax, index_buffer, out.raw_data());
  return autograd::record(
      std::move(out), "gather", {x, index},
      [idx, index_buffer, ax, shape = x.shape()](const Tensor& g) -> autograd::TensorList {
        const Tensor gc = f32_contiguous(g);
        Tensor dx = detail::zeros_on(gc, shape);
        backend_of(gc).gather_backward(gc.data<float>(), ax, index_buffer, dx.data<float>(), shape);
        return {g.dtype() == DType::f32 ? dx : dx.to(g.dtype()), Tensor()};
      });
}

Tensor index_select(const Tensor& x, std::int64_t axis, const Tensor& index) {
  require_defined("index_select", x, "x");
  require_dtype("index_select", index, "index", {DType::i64, DType::i32});
  require_same_device("index_select", {&x, &index});
  const std::int64_t ax = normalize_axis(axis, x.dim(), "index_select", x.shape());
  if (index.dim() > 1) {
    throw std::invalid_argument(fmt::format("index_select: index {} must be 1-D (x {})",
                                            to_string(index.shape()), to_string(x.shape())));
  }
  const Tensor idx = index.detach().contiguous();
  const std::int64_t n = x.size(ax);
  detail::check_index_range(
      idx, n,
      [](std::int64_t position, std::int64_t value, std::int64_t size, const Shape& shape,
         std::int64_t along) {
        return fmt::format(
            "index_select: index {} at position {} is out of range for size {} of x {} along "
            "axis {}",
            value, position, size, to_string(shape), along);
      },
      n, x.shape(), axis);
  const auto a = static_cast<std::size_t>(ax);
  const std::int64_t outer = product(x.shape(), 0, a);
  const std::int64_t inner = product(x.shape(), a + 1, x.shape().size());
  Shape shape = x.shape();
  shape[a] = idx.numel();
  const Tensor xc = x.detach().contiguous();
  const backend::ConstBuffer index_buffer{idx.raw_data(), idx.dtype(), idx.shape()};
  Tensor out = empty_on(xc, shape, x.dtype());
  backend_of(xc).index_select(xc.raw_data(), dtype_size(xc.dtype()), outer, n, inner, index_buffer,
                              out.raw_data());
  return autograd::record(std::move(out), "index_select", {x, index},
                          [idx, index_buffer, outer, n, inner,
                           shape = x.shape()](const Tensor& g) -> autograd::TensorList {
                            const Tensor gc = f32_contiguous(g);
                            Tensor dx = detail::zeros_on(gc, shape);
                            backend_of(gc).index_add(gc.data<float>(), outer, n, inner,
                                                     index_buffer, dx.data<float>());
                            return {g.dtype() == DType::f32 ? dx : dx.to(g.dtype()), Tensor()};
                          });
}

}  // namespace rig::ops
