// ops::begin_uploads / end_uploads / use_uploads: copies to a device that
// overlap its kernels (Backend::begin_uploads).
#include "backend/backend.hpp"
#include "rig/ops.hpp"

namespace rig::ops {

void begin_uploads(Device device) {
  backend::backend_for(device).begin_uploads();
}

std::uint64_t end_uploads(Device device) {
  return backend::backend_for(device).end_uploads();
}

void use_uploads(Device device, std::uint64_t ticket) {
  backend::backend_for(device).use_uploads(ticket);
}

}  // namespace rig::ops
