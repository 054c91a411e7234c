// ops::read_later: a device-to-host copy collected later (backend/pending_read.hpp).
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "ops/op_util.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

LaterRead::LaterRead() = default;
LaterRead::~LaterRead() = default;
LaterRead::LaterRead(LaterRead&& other) noexcept = default;
LaterRead& LaterRead::operator=(LaterRead&& other) noexcept = default;

std::vector<float> LaterRead::values() {
  if (read_ == nullptr) throw std::logic_error("LaterRead::values: nothing pending");
  std::vector<float> out(static_cast<std::size_t>(numel_));
  const std::unique_ptr<backend::PendingRead> read = std::move(read_);
  read->wait_into(out.data());
  return out;
}

LaterRead read_later(const Tensor& t) {
  constexpr std::string_view kOp = "read_later";
  detail::require_defined(kOp, t, "t");
  detail::require_dtype(kOp, t, "t", {DType::f32});
  if (!t.is_contiguous()) {
    throw std::invalid_argument(
        fmt::format("{}: t must be contiguous, got {} (strided)", kOp, detail::shape_str(t)));
  }
  LaterRead read;
  read.numel_ = t.numel();
  read.read_ = detail::backend_of(t).to_host_later(t.data<float>(), t.nbytes());
  return read;
}

}  // namespace rig::ops
