// What a GPU can compute, checked before a run builds on it: bfloat16 (as
// dtype, mixed_dtype or matmul_precision) on a GPU older than compute
// capability 8.0 is refused naming the key, the GPU and what to use; float16
// and float32 run there, and newer GPUs take everything.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "config/experiment_file.hpp"
#include "engine/device_choice.hpp"
#include "engine/gpu_dtype_check.hpp"
#include "engine/settings.hpp"
#include "user_error_of.hpp"

namespace rig::engine {
namespace {

using rig_test::user_error_of;

const char* kExperiment = R"(base_params:
  batch_size_per_gpu: 32
  max_steps: 10
  logdir: runs/t4
  device: cuda
  model: mlp
  data_layer: synthetic
  optimizer: sgd
  lr_policy: fixed
  lr_policy_params:
    learning_rate: 0.1
)";

// The command line's --path=value.
config::Override set(const std::string& path, const std::string& value) {
  return {path, value, "--" + path + "=" + value};
}

config::ResolvedConfig resolve(const std::vector<config::Override>& overrides) {
  return config::ExperimentFile::parse(kExperiment, "exp.yaml").resolve("train", overrides);
}

DeviceChoice gpu_choice(const std::string& name, int major, int minor) {
  cuda::CudaProbe probe;
  probe.status = cuda::CudaProbe::Status::ok;
  probe.runs_ops = true;
  probe.architectures = "75-real;80-real;90";
  probe.devices.push_back({0, name, major, minor, std::size_t{16} << 30U});
  return choose_device("cuda", probe, 0, "exp.yaml:5:11: base_params.device");
}

// The UserError of checking the run of `overrides` on `choice`, or "<no error>".
std::string check(const DeviceChoice& choice, const std::vector<config::Override>& overrides) {
  const config::ResolvedConfig cfg = resolve(overrides);
  const EngineSettings settings = read_settings(cfg);
  return user_error_of([&] { check_gpu_dtypes(choice, settings, cfg); });
}

TEST(GpuDtypeCheck, TheChosenGpuIsKept) {
  const DeviceChoice t4 = gpu_choice("Tesla T4", 7, 5);
  ASSERT_TRUE(t4.gpu.has_value());
  EXPECT_EQ(t4.gpu->name, "Tesla T4");
  EXPECT_EQ(t4.gpu->compute_major, 7);
  EXPECT_EQ(t4.device, Device::cuda(0));
}

TEST(GpuDtypeCheck, Bfloat16BeforeComputeCapability8IsRefusedNamingTheKey) {
  const DeviceChoice t4 = gpu_choice("Tesla T4", 7, 5);
  EXPECT_EQ(check(t4, {set("dtype", "mixed"), set("mixed_dtype", "bfloat16")}),
            "command line (--mixed_dtype=bfloat16): mixed_dtype: bfloat16 needs a GPU of compute "
            "capability 8.0 or newer (A100, L4, H100, ...), but cuda:0 is Tesla T4 (compute "
            "capability 7.5): use mixed_dtype: float16 (float16 mixed precision with loss "
            "scaling, as AMP), or device: cpu");
  EXPECT_NE(check(t4, {set("dtype", "bfloat16")}).find(": dtype: bfloat16 needs a GPU"),
            std::string::npos);
  EXPECT_NE(check(t4, {set("dtype", "bfloat16")}).find("use dtype: float16"), std::string::npos);
  EXPECT_NE(check(t4, {set("matmul_precision", "bfloat16")})
                .find(": matmul_precision: bfloat16 needs a GPU of compute capability 8.0"),
            std::string::npos);
}

TEST(GpuDtypeCheck, Float16AndFloat32RunOnOlderGpus) {
  const DeviceChoice t4 = gpu_choice("Tesla T4", 7, 5);
  EXPECT_EQ(check(t4, {}), "<no error>");
  EXPECT_EQ(check(t4, {set("dtype", "mixed")}), "<no error>");  // mixed_dtype float16
  EXPECT_EQ(check(t4, {set("dtype", "float16")}), "<no error>");
}

TEST(GpuDtypeCheck, NewerGpusAndNoGpuTakeBfloat16) {
  const std::vector<config::Override> bf16 = {set("dtype", "mixed"),
                                              set("mixed_dtype", "bfloat16")};
  EXPECT_EQ(check(gpu_choice("NVIDIA A100-SXM4-80GB", 8, 0), bf16), "<no error>");
  EXPECT_EQ(check(gpu_choice("NVIDIA H100 80GB HBM3", 9, 0), bf16), "<no error>");
  EXPECT_EQ(check(DeviceChoice{}, bf16), "<no error>");  // the CPU
}

}  // namespace
}  // namespace rig::engine
