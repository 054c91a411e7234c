// backend_for: the backend of a device. The CPU's is always there; sim's is
// built with rig; CUDA's comes from librig_cuda or the SIMT emulator.
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
      return cuda_backend(device.index);
  }
  throw std::invalid_argument(fmt::format("device {}: unknown device type", to_string(device)));
}

}  // namespace rig::backend
