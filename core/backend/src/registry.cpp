// backend_for: the backend of a device. The CPU's is always there; sim's is
// built with rig; CUDA's comes with librig_cuda once it has op kernels.
#include <stdexcept>

#include <fmt/format.h>

#include "backend/backend.hpp"

namespace rig::backend {

Backend& backend_for(Device device) {
  switch (device.type) {
    case Device::Type::cpu:
      return cpu_backend();
    case Device::Type::sim:
      return sim_backend();
    case Device::Type::cuda:
      break;
  }
  throw std::invalid_argument(fmt::format(
      "device {}: this rig's CUDA back end has only its device runtime, no tensor-op kernels yet",
      to_string(device)));
}

}  // namespace rig::backend
