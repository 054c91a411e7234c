// Backend::check_index's immediate form: the CPU's and sim's (the CUDA back
// end defers it to its next read of the device).
#include <stdexcept>

#include "backend/backend.hpp"

namespace rig::backend {

void Backend::check_index(const void* index, DType dtype, std::int64_t n, std::int64_t limit,
                          const IndexMessage& message) {
  const std::int64_t bad = first_out_of_range(index, dtype, n, limit);
  if (bad < 0) return;
  std::int64_t value = 0;
  if (dtype == DType::i32) {
    std::int32_t v = 0;
    to_host(&v, static_cast<const std::int32_t*>(index) + bad, sizeof(v));
    value = v;
  } else {
    to_host(&value, static_cast<const std::int64_t*>(index) + bad, sizeof(value));
  }
  throw std::invalid_argument(message(bad, value));
}

}  // namespace rig::backend
