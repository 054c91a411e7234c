// KvCache: decode-time keys and values in buffers sized once (see nn.hpp).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "rig/nn.hpp"
#include "rig/ops.hpp"

namespace rig::nn {

namespace {

std::string shape_of(const Tensor& t) {
  return t.defined() ? fmt::format("{} {}", dtype_name(t.dtype()), to_string(t.shape()))
                     : "(undefined)";
}

// dst[j] = src[rows[j]] over the first `length` positions, one copy per run
// of consecutive source rows (beam search keeps most rows in runs).
void gather_rows(const std::vector<std::int64_t>& rows, const Tensor& src, Tensor& dst,
                 std::int64_t length) {
  const auto n = static_cast<std::int64_t>(rows.size());
  for (std::int64_t j = 0; j < n;) {
    const std::int64_t first = rows[static_cast<std::size_t>(j)];
    std::int64_t run = 1;
    while (j + run < n && rows[static_cast<std::size_t>(j + run)] == first + run) ++run;
    dst.slice(0, j, j + run)
        .slice(2, 0, length)
        .copy_from(src.slice(0, first, first + run).slice(2, 0, length));
    j += run;
  }
}

}  // namespace

KvCache::KvCache(Tensor keys_in, Tensor values_in)
    : keys(std::move(keys_in)), values(std::move(values_in)) {}

std::int64_t KvCache::capacity() const {
  return buffered() ? key_buffer_.size(2) : length();
}

bool KvCache::buffered() const {
  return key_buffer_.defined() && keys.defined() && keys.shares_storage(key_buffer_) &&
         values.defined() && values.shares_storage(value_buffer_);
}

void KvCache::reserve(std::int64_t positions) {
  if (positions < 0) {
    throw std::invalid_argument(fmt::format("KvCache::reserve: {} positions", positions));
  }
  reserved_ = positions;
  if (keys.defined() && positions > capacity()) grow(positions, keys);
}

void KvCache::grow(std::int64_t positions, const Tensor& like) {
  const Shape shape{like.size(0), like.size(1), positions, like.size(3)};
  Tensor key_buffer = Tensor::empty(shape, like.dtype(), like.device());
  Tensor value_buffer = Tensor::empty(shape, like.dtype(), like.device());
  const std::int64_t filled = length();
  if (filled > 0) {
    key_buffer.slice(2, 0, filled).copy_from(keys);
    value_buffer.slice(2, 0, filled).copy_from(values);
  }
  key_buffer_ = std::move(key_buffer);
  value_buffer_ = std::move(value_buffer);
  keys = key_buffer_.slice(2, 0, filled);
  values = value_buffer_.slice(2, 0, filled);
}

void KvCache::append(const Tensor& k, const Tensor& v) {
  const bool fits_new = k.defined() && v.defined() && k.dim() == 4 && v.shape() == k.shape() &&
                        v.dtype() == k.dtype();
  const bool fits_old =
      !keys.defined() ||
      (keys.dim() == 4 && keys.size(0) == k.size(0) && keys.size(1) == k.size(1) &&
       keys.size(3) == k.size(3) && keys.dtype() == k.dtype() && values.shape() == keys.shape());
  if (!fits_new || !fits_old) {
    throw std::invalid_argument(
        fmt::format("KvCache::append: keys {} and values {} do not extend cached keys {} and "
                    "values {} ([B, H, T, D], one dtype)",
                    shape_of(k), shape_of(v), shape_of(keys), shape_of(values)));
  }
  if (grad_mode_enabled() && (k.requires_grad() || v.requires_grad())) {
    // Differentiable: new tensors (what training through a cache needs).
    keys = keys.defined() ? ops::concat({keys, k}, 2) : k;
    values = values.defined() ? ops::concat({values, v}, 2) : v;
    key_buffer_ = Tensor();
    value_buffer_ = Tensor();
    return;
  }
  const std::int64_t start = length();
  const std::int64_t end = start + k.size(2);
  if (!buffered() || end > capacity()) {
    grow(std::max({end, reserved_, 2 * capacity()}), k);
  }
  key_buffer_.slice(2, start, end).copy_from(k);
  value_buffer_.slice(2, start, end).copy_from(v);
  keys = key_buffer_.slice(2, 0, end);
  values = value_buffer_.slice(2, 0, end);
}

void KvCache::reorder(const Tensor& index, Tensor& spare) {
  const std::int64_t rows = keys.defined() ? keys.size(0) : 0;
  if (!index.defined() || index.dtype() != DType::i64 || index.dim() != 1 ||
      index.size(0) != rows) {
    throw std::invalid_argument(
        fmt::format("KvCache::reorder: index {} must be i64 [{}], one entry per cached row",
                    shape_of(index), rows));
  }
  const std::vector<std::int64_t> order = index.to_int_vector();
  bool identity = true;
  for (std::int64_t j = 0; j < rows; ++j) {
    const std::int64_t from = order[static_cast<std::size_t>(j)];
    if (from < 0 || from >= rows) {
      throw std::invalid_argument(
          fmt::format("KvCache::reorder: index entry {} is {}, outside [0, {})", j, from, rows));
    }
    identity = identity && from == j;
  }
  if (identity) return;
  if (!buffered()) {
    keys = ops::index_select(keys, 0, index);
    values = ops::index_select(values, 0, index);
    return;
  }
  const std::int64_t filled = length();
  for (Tensor* buffer : {&key_buffer_, &value_buffer_}) {
    if (!spare.defined() || spare.shape() != buffer->shape() || spare.dtype() != buffer->dtype() ||
        spare.device() != buffer->device() || spare.shares_storage(key_buffer_) ||
        spare.shares_storage(value_buffer_)) {
      spare = Tensor::empty(buffer->shape(), buffer->dtype(), buffer->device());
    }
    gather_rows(order, *buffer, spare, filled);
    std::swap(*buffer, spare);
  }
  keys = key_buffer_.slice(2, 0, filled);
  values = value_buffer_.slice(2, 0, filled);
}

}  // namespace rig::nn
