// Device selection without a GPU: which device a run gets for device: auto |
// cpu | cuda from a (fake) CUDA probe and the local rank, the messages, the
// architecture check, the launcher's local rank, and loading the CUDA back end
// (a missing file, a library that is not the back end, the real one).
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "cuda/host/cuda_backend.hpp"
#include "engine/device_choice.hpp"
#include "fresh_process.hpp"
#include "launch/launcher_env.hpp"
#include "rig/version.hpp"
#include "user_error_of.hpp"

namespace {

using rig::Device;
using rig::cuda::CudaProbe;
using rig::cuda::GpuInfo;
using rig::engine::choose_device;
using rig::engine::has_code_for;
using rig_test::user_error_of;

constexpr const char* kWhere = "exp.yaml:4:11: base_params.device";

CudaProbe no_driver() {
  CudaProbe p;
  p.status = CudaProbe::Status::no_driver;
  p.reason = "no CUDA driver is installed (libcuda.so.1 not found)";
  return p;
}

CudaProbe gpus(int count, int major = 9, int minor = 0, bool runs_ops = true) {
  CudaProbe p;
  p.status = CudaProbe::Status::ok;
  p.runs_ops = runs_ops;
  p.architectures = "80-real;90";
  for (int i = 0; i < count; ++i) {
    p.devices.push_back({i, "NVIDIA H100 80GB HBM3", major, minor, std::size_t{80} << 30U});
  }
  return p;
}

// Sets an environment variable for one scope and restores it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DeviceSelection, CpuNeverLooksAtTheProbe) {
  const auto choice = choose_device("cpu", gpus(2), 0, kWhere);
  EXPECT_EQ(choice.device, Device::cpu());
  EXPECT_EQ(choice.note, "");
}

TEST(DeviceSelection, AutoWithoutAGpuRunsOnTheCpuAndSaysWhy) {
  const auto choice = choose_device("auto", no_driver(), 0, kWhere);
  EXPECT_EQ(choice.device, Device::cpu());
  EXPECT_EQ(choice.note,
            "Device: cpu (auto: no CUDA driver is installed (libcuda.so.1 not found))");
}

TEST(DeviceSelection, CudaWithoutAGpuIsAUserErrorNamingTheKey) {
  EXPECT_EQ(user_error_of([] { choose_device("cuda", no_driver(), 0, kWhere); }),
            "exp.yaml:4:11: base_params.device: cuda requested, but no GPU can be used: no CUDA "
            "driver is installed (libcuda.so.1 not found); set device: cpu or auto to run on the "
            "CPU");
}

TEST(DeviceSelection, TheLocalRankPicksTheGpu) {
  for (const char* request : {"auto", "cuda"}) {
    const auto first = choose_device(request, gpus(2), 0, kWhere);
    EXPECT_EQ(first.device, Device::cuda(0));
    EXPECT_EQ(first.note, "Device: cuda:0 (NVIDIA H100 80GB HBM3, compute capability 9.0, 80 GiB)");
    EXPECT_EQ(choose_device(request, gpus(2), 1, kWhere).device, Device::cuda(1));
  }
}

TEST(DeviceSelection, MoreLocalRanksThanGpus) {
  ScopedEnv visible("CUDA_VISIBLE_DEVICES", "2,3");
  const std::string problem =
      "this process has local rank 2 but only 2 GPU(s) are visible (CUDA_VISIBLE_DEVICES='2,3'): "
      "one process per GPU";
  const auto choice = choose_device("auto", gpus(2), 2, kWhere);
  EXPECT_EQ(choice.device, Device::cpu());
  EXPECT_EQ(choice.note, "Device: cpu (auto: " + problem + ")");
  EXPECT_EQ(user_error_of([] { choose_device("cuda", gpus(2), 2, kWhere); }),
            std::string(kWhere) + ": cuda requested, but no GPU can be used: " + problem +
                "; set device: cpu or auto to run on the CPU");
}

TEST(DeviceSelection, AGpuThisBuildHasNoCodeFor) {
  const auto choice = choose_device("auto", gpus(1, 7, 5), 0, kWhere);
  EXPECT_EQ(choice.device, Device::cpu());
  EXPECT_EQ(choice.note,
            "Device: cpu (auto: found cuda:0 (NVIDIA H100 80GB HBM3, compute capability 7.5, 80 "
            "GiB), but this rig has GPU code only for CUDA architectures 80-real;90 (rebuild "
            "with -DCMAKE_CUDA_ARCHITECTURES=75))");
  EXPECT_NE(user_error_of([] {
              choose_device("cuda", gpus(1, 7, 5), 0, kWhere);
            }).find("rebuild with -DCMAKE_CUDA_ARCHITECTURES=75"),
            std::string::npos);
}

TEST(DeviceSelection, ABackEndWithoutKernelsKeepsRunsOnTheCpu) {
  const auto choice = choose_device("auto", gpus(1, 9, 0, false), 0, kWhere);
  EXPECT_EQ(choice.device, Device::cpu());
  EXPECT_EQ(choice.note,
            "Device: cpu (auto: found cuda:0 (NVIDIA H100 80GB HBM3, compute capability 9.0, 80 "
            "GiB), but this rig's CUDA back end has only its device runtime, no tensor-op kernels "
            "yet)");
  EXPECT_NE(user_error_of([] {
              choose_device("cuda", gpus(1, 9, 0, false), 0, kWhere);
            }).find("cuda requested, but no GPU can be used: found cuda:0"),
            std::string::npos);
}

TEST(DeviceSelection, ArchitectureLists) {
  // Machine code runs on its own major version, same or newer minor.
  EXPECT_TRUE(has_code_for("80-real", 8, 0));
  EXPECT_TRUE(has_code_for("80-real", 8, 6));
  EXPECT_FALSE(has_code_for("86-real", 8, 0));
  EXPECT_FALSE(has_code_for("80-real", 9, 0));
  EXPECT_FALSE(has_code_for("80-real", 7, 5));
  // PTX is compiled by the driver for any newer GPU.
  EXPECT_TRUE(has_code_for("80-real;90", 9, 0));
  EXPECT_TRUE(has_code_for("80-real;90", 12, 0));
  EXPECT_TRUE(has_code_for("80-real;90", 10, 0));
  EXPECT_FALSE(has_code_for("80-real;90-real", 10, 0));
  EXPECT_TRUE(has_code_for("80-virtual", 8, 9));
  EXPECT_FALSE(has_code_for("80-real;90", 7, 5));
  // Architecture-specific features run on that GPU only.
  EXPECT_TRUE(has_code_for("90a", 9, 0));
  EXPECT_FALSE(has_code_for("90a", 10, 0));
  EXPECT_TRUE(has_code_for("100f-real", 10, 3));
  // CMake's special values, other separators, junk.
  EXPECT_TRUE(has_code_for("all-major", 7, 5));
  EXPECT_TRUE(has_code_for("native", 9, 0));
  EXPECT_TRUE(has_code_for("75,80", 8, 9));
  EXPECT_FALSE(has_code_for("", 9, 0));
  EXPECT_FALSE(has_code_for("sm_90;x", 9, 0));
}

TEST(DeviceSelection, LauncherLocalRank) {
  ScopedEnv ompi("OMPI_COMM_WORLD_LOCAL_RANK", nullptr);
  ScopedEnv hydra("MPI_LOCALRANKID", nullptr);
  ScopedEnv slurm("SLURM_LOCALID", nullptr);
  EXPECT_EQ(rig::launch::launcher_local_rank(), 0);
  {
    ScopedEnv set("SLURM_LOCALID", "3");
    EXPECT_EQ(rig::launch::launcher_local_rank(), 3);
    ScopedEnv first("OMPI_COMM_WORLD_LOCAL_RANK", "1");  // Open MPI's wins
    EXPECT_EQ(rig::launch::launcher_local_rank(), 1);
  }
  ScopedEnv junk("MPI_LOCALRANKID", "x1");
  EXPECT_EQ(rig::launch::launcher_local_rank(), 0);
}

TEST(DeviceSelection, BackEndFileMissing) {
  const CudaProbe probe = rig::cuda::probe_cuda_library("/nonexistent/librig_cuda.so");
  EXPECT_EQ(probe.status, CudaProbe::Status::backend_unavailable);
  EXPECT_NE(probe.reason.find("the CUDA back end could not be loaded: /nonexistent/librig_cuda.so"),
            std::string::npos)
      << probe.reason;
  // auto runs on the CPU, saying so.
  EXPECT_EQ(choose_device("auto", probe, 0, kWhere).note,
            "Device: cpu (auto: " + probe.reason + ")");
}

TEST(DeviceSelection, ALibraryThatIsNotTheBackEnd) {
  const std::string plugin = std::string(RIG_BUILD_DIR) + "/plugins/rig-model-mlp.so";
  const CudaProbe probe = rig::cuda::probe_cuda_library(plugin);
  EXPECT_EQ(probe.status, CudaProbe::Status::backend_unavailable);
  EXPECT_EQ(probe.reason,
            plugin + " is not rig's CUDA back end (it has no rig_cuda_backend function)");
}

void the_built_back_end_loads() {
  const CudaProbe& probe = rig::cuda::probe_cuda();
  if (!RIG_WITH_CUDA) {
    EXPECT_EQ(probe.status, CudaProbe::Status::built_without_cuda);
    EXPECT_EQ(probe.reason, "this rig was built without CUDA (RIG_WITH_CUDA=OFF)");
    return;
  }
  // librig_cuda sits next to librig and answers, whatever this machine has.
  EXPECT_EQ(rig::cuda::cuda_backend_path().parent_path().filename(), "core");
  EXPECT_NE(probe.status, CudaProbe::Status::backend_unavailable) << probe.reason;
  EXPECT_NE(probe.status, CudaProbe::Status::built_without_cuda);
  EXPECT_FALSE(probe.architectures.empty());
  EXPECT_TRUE(probe.runs_ops);  // rig_cuda_make_backend: the op back end
  if (probe.status == CudaProbe::Status::ok) {
    EXPECT_FALSE(probe.devices.empty());
    EXPECT_TRUE(probe.reason.empty());
  } else {
    EXPECT_TRUE(probe.devices.empty());
    EXPECT_FALSE(probe.reason.empty());
  }
}

// The probe loads librig_cuda into the process for good: in a process of its
// own, so that the tests after it in the same binary still see a process
// without it (TensorViews.ContiguousCloneCopyFromAndFill checks that).
TEST(DeviceSelection, TheBuiltBackEndLoads) {
  rig_test::in_fresh_process(the_built_back_end_loads);
}

}  // namespace
