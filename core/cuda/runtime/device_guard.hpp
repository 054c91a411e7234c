// Makes a device current for a scope and restores the previous one after.
#pragma once

namespace rig::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// The number of visible devices; 0 when there is no driver or no device.
int device_count() noexcept;

}  // namespace rig::cuda
