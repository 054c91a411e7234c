// The launch planner's view (simt/launch_config.hpp) of a real device.
#pragma once

#include "simt/launch_config.hpp"

namespace rig::cuda {

// cudaGetDeviceProperties of `device` as simt::DeviceProperties, read once
// per device and cached. Throws CudaError.
const simt::DeviceProperties& device_properties(int device);

// Of the calling thread's current device.
const simt::DeviceProperties& current_device_properties();

}  // namespace rig::cuda
