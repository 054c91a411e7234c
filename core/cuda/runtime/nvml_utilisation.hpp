// NvmlUtilisation: how busy one GPU has been lately, from NVML (the driver's
// management library, libnvidia-ml.so.1, loaded with dlopen: it comes with
// the driver, not the CUDA toolkit): the percentage of NVML's last sample
// period (1/6 s to 1 s, by GPU) during which one or more kernels ran, as
// nvidia-smi's GPU-Util. The GPU is found by its PCI bus id, so NVML's
// numbering (which ignores CUDA_VISIBLE_DEVICES) does not matter.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace rig::cuda {

class NvmlUtilisation {
 public:
  explicit NvmlUtilisation(int cuda_device);
  ~NvmlUtilisation();
  NvmlUtilisation(const NvmlUtilisation&) = delete;
  NvmlUtilisation& operator=(const NvmlUtilisation&) = delete;

  // The percentage, or nothing where NVML is missing or refuses (why()).
  std::optional<double> sample();
  const std::string& why() const { return why_; }

 private:
  struct Library;
  std::unique_ptr<Library> library_;
  std::string why_;
};

}  // namespace rig::cuda
