// The GPU-less support check: every graph rig builds (core/cuda/dnn) for a
// representative set of shapes -- ResNet-20 on CIFAR's convolutions and batch
// norms, a Transformer base's attention forward and backward -- is built by
// cuDNN and planned for each committed device description
// (tests/gpu/devices/*.json): the operation graph finalizes, the heuristics
// return at least one engine (without TF32 for f32 convolutions, and without
// the NONDETERMINISTIC numerical note unless the graph allows it) and an
// execution plan finalizes for it. Each line printed names the engine chosen
// and whether it is deterministic; a graph with no deterministic engine says
// "NO DETERMINISTIC ENGINE". No GPU is needed; cuDNN (libcudnn.so.9) is, and
// every test skips with the reason where it cannot be loaded.
//
// What cuDNN 9.19 needs to plan without a GPU (found here, on a machine
// without a driver): precompiled engines (convolutions) need nothing but the
// description. Runtime-compiled engines (batch norm, attention) need a
// libcuda.so.1 even to be listed by the heuristics ("this->libcuda ==
// nullptr", CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING), so this
// test loads the CUDA install's driver stub (stubs/libcuda.so, soname
// libcuda.so.1) itself where no driver is installed; their plans then compile
// (NVRTC) but cannot finalize, because finalizing loads the kernel into the
// driver, which the stub refuses (cuLibraryLoadData: error 34,
// CUDA_ERROR_STUB_LIBRARY). For those graphs the check is therefore: the
// operation graph finalizes, the heuristics name an engine, and its plan
// compiles and fails only at the driver's load. With a real driver (a GPU
// machine) every plan must finalize.
#include <dlfcn.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/dnn/cudnn_graphs.hpp"

namespace dnn = rig::cuda::dnn;

namespace {

bool& driver_is_stub() {
  static bool stub = false;
  return stub;
}

struct Device {
  std::string name;  // the file's name
  std::unique_ptr<dnn::DeviceDescription> description;
};

// The committed descriptions, loaded once; empty with `why` set when cuDNN
// cannot be loaded.
const std::vector<Device>& devices(std::string& why) {
  static std::string reason;
  static const std::vector<Device> loaded = [] {
    std::vector<Device> out;
    // The driver, else the CUDA install's stub under the driver's soname,
    // loaded globally before cuDNN looks for libcuda.so.1.
    if (dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      if (dlopen(RIG_CUDA_DRIVER_STUB, RTLD_NOW | RTLD_GLOBAL) != nullptr) {
        std::printf("no CUDA driver: planning with the stub %s\n", RIG_CUDA_DRIVER_STUB);
        driver_is_stub() = true;
      }
    }
    if (!dnn::cudnn_load_error().empty()) {
      reason = dnn::cudnn_load_error();
      return out;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(RIG_CUDNN_DEVICES_DIR)) {
      if (entry.path().extension() == ".json") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      std::ifstream in(file);
      std::stringstream text;
      text << in.rdbuf();
      out.push_back({file.filename().string(), dnn::DeviceDescription::from_json(text.str())});
    }
    if (out.empty()) reason = std::string("no device descriptions in ") + RIG_CUDNN_DEVICES_DIR;
    return out;
  }();
  why = reason;
  return loaded;
}

struct Case {
  std::string name;
  dnn::Graph graph;
};

dnn::Graph allowing_nondeterminism(dnn::Graph g) {
  g.allow_nondeterministic = true;
  return g;
}

rig::backend::Conv2dShape conv(std::int64_t n, std::int64_t c_in, std::int64_t c_out,
                               std::int64_t k, std::int64_t stride, std::int64_t size,
                               bool bias = false) {
  rig::backend::Conv2dShape s;
  s.n = n;
  s.c_in = c_in;
  s.h = s.w = size;
  s.c_out = c_out;
  s.kernel_h = s.kernel_w = k;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = k / 2;
  s.out_h = s.out_w = (size + 2 * (k / 2) - k) / stride + 1;
  s.bias = bias;
  return s;
}

const char* type_name(dnn::ConvType t) {
  return t == dnn::ConvType::f32 ? "f32" : t == dnn::ConvType::f16 ? "f16" : "bf16";
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // ResNet-20 on CIFAR-10 (batch 128): the stem, the 3x3 convolutions of the
  // three stages (stride 1, and stride 2 into stages 2 and 3), the 1x1
  // stride-2 downsamples.
  struct Conv {
    const char* name;
    rig::backend::Conv2dShape shape;
  };
  const std::vector<Conv> convs = {
      {"stem_3x16_3x3_32", conv(128, 3, 16, 3, 1, 32)},
      {"s1_16x16_3x3_32", conv(128, 16, 16, 3, 1, 32)},
      {"s2_16x32_3x3s2_32", conv(128, 16, 32, 3, 2, 32)},
      {"s2_32x32_3x3_16", conv(128, 32, 32, 3, 1, 16)},
      {"s3_32x64_3x3s2_16", conv(128, 32, 64, 3, 2, 16)},
      {"s3_64x64_3x3_8", conv(128, 64, 64, 3, 1, 8)},
      {"down_16x32_1x1s2_32", conv(128, 16, 32, 1, 2, 32)},
      {"down_32x64_1x1s2_16", conv(128, 32, 64, 1, 2, 16)},
  };
  // Each in both layouts: channels last (the resnet model's data_format) in
  // f32 too, where a float32 run with channels_last needs NHWC f32 engines.
  for (const bool channels_last : {false, true}) {
    for (dnn::ConvType type : {dnn::ConvType::f32, dnn::ConvType::f16, dnn::ConvType::bf16}) {
      for (const Conv& c : convs) {
        rig::backend::Conv2dShape shape = c.shape;
        shape.channels_last = channels_last;
        const std::string base =
            std::string(type_name(type)) + (channels_last ? "_nhwc_" : "_") + c.name;
        out.push_back({"conv_fwd_" + base, dnn::conv2d_forward_graph(shape, type)});
        if (c.shape.c_in != 3) {
          out.push_back({"conv_dgrad_" + base, dnn::conv2d_backward_data_graph(shape, type)});
        }
        out.push_back({"conv_wgrad_" + base, dnn::conv2d_backward_filter_graph(shape, type)});
      }
    }
  }
  // ResNet-50 at batch 256 in bf16, as mixed-precision training runs its
  // convolutions (all three graphs of each: the back end's conv2d_16).
  for (const Conv& c : std::vector<Conv>{{"r50_stem_3x64_7x7s2_224", conv(256, 3, 64, 7, 2, 224)},
                                         {"r50_64x256_1x1_56", conv(256, 64, 256, 1, 1, 56)},
                                         {"r50_128x128_3x3_28", conv(256, 128, 128, 3, 1, 28)},
                                         {"r50_512x2048_1x1_7", conv(256, 512, 2048, 1, 1, 7)}}) {
    const std::string base = std::string("bf16_") + c.name;
    out.push_back({"conv_fwd_" + base, dnn::conv2d_forward_graph(c.shape, dnn::ConvType::bf16)});
    out.push_back(
        {"conv_dgrad_" + base, dnn::conv2d_backward_data_graph(c.shape, dnn::ConvType::bf16)});
    out.push_back(
        {"conv_wgrad_" + base, dnn::conv2d_backward_filter_graph(c.shape, dnn::ConvType::bf16)});
  }
  // The same network channels last (NHWC activations, KRSC filters: the
  // resnet model's data_format channels_last), where cuDNN's bf16 tensor-core
  // kernels need no transposes: every convolution shape of ResNet-50.
  for (const Conv& c : std::vector<Conv>{{"r50_stem_3x64_7x7s2_224", conv(256, 3, 64, 7, 2, 224)},
                                         {"r50_64x64_1x1_56", conv(256, 64, 64, 1, 1, 56)},
                                         {"r50_64x64_3x3_56", conv(256, 64, 64, 3, 1, 56)},
                                         {"r50_64x256_1x1_56", conv(256, 64, 256, 1, 1, 56)},
                                         {"r50_256x128_1x1_56", conv(256, 256, 128, 1, 1, 56)},
                                         {"r50_128x128_3x3s2_56", conv(256, 128, 128, 3, 2, 56)},
                                         {"r50_256x512_1x1s2_56", conv(256, 256, 512, 1, 2, 56)},
                                         {"r50_128x128_3x3_28", conv(256, 128, 128, 3, 1, 28)},
                                         {"r50_512x2048_1x1_7", conv(256, 512, 2048, 1, 1, 7)}}) {
    rig::backend::Conv2dShape shape = c.shape;
    shape.channels_last = true;
    const std::string base = std::string("bf16_nhwc_") + c.name;
    out.push_back({"conv_fwd_" + base, dnn::conv2d_forward_graph(shape, dnn::ConvType::bf16)});
    out.push_back(
        {"conv_dgrad_" + base, dnn::conv2d_backward_data_graph(shape, dnn::ConvType::bf16)});
    out.push_back(
        {"conv_wgrad_" + base, dnn::conv2d_backward_filter_graph(shape, dnn::ConvType::bf16)});
    // The data gradient added into the one the block's input already has
    // (beta 1: its shortcut's), as a residual block's first convolution runs.
    if (c.shape.c_in != 3) {
      out.push_back({"conv_dgrad_accumulating_" + base,
                     dnn::conv2d_backward_data_graph(shape, dnn::ConvType::bf16, true)});
    }
    // The filter gradient added into the weight's .grad (beta 1), as every
    // 1 x 1 convolution's runs (a larger kernel's NHWC weight is a permuted
    // copy, whose gradient is added afterwards).
    if (c.shape.kernel_h == 1) {
      out.push_back({"conv_wgrad_accumulating_" + base,
                     dnn::conv2d_backward_filter_graph(shape, dnn::ConvType::bf16, true)});
    }
  }
  // ResNet-20's, channels last in f16 (the T4 AMP users' setting), bf16 and
  // f32 (whose convolutions add their gradients too).
  for (const dnn::ConvType type : {dnn::ConvType::f16, dnn::ConvType::bf16, dnn::ConvType::f32}) {
    for (const Conv& c : convs) {
      if (c.shape.c_in == 3) continue;
      rig::backend::Conv2dShape shape = c.shape;
      shape.channels_last = true;
      out.push_back({std::string("conv_dgrad_accumulating_") + type_name(type) + "_nhwc_" + c.name,
                     dnn::conv2d_backward_data_graph(shape, type, true)});
    }
  }
  // An f32 ResNet's data gradients added in NCHW (its default layout).
  for (const Conv& c : convs) {
    if (c.shape.c_in == 3) continue;
    out.push_back({std::string("conv_dgrad_accumulating_f32_") + c.name,
                   dnn::conv2d_backward_data_graph(c.shape, dnn::ConvType::f32, true)});
  }
  // Their filter gradients added into the weights' .grad: every one in NCHW
  // (the weight is the parameter itself), the 1 x 1 ones in NHWC.
  for (const dnn::ConvType type : {dnn::ConvType::f16, dnn::ConvType::bf16, dnn::ConvType::f32}) {
    for (const bool channels_last : {false, true}) {
      for (const Conv& c : convs) {
        if (channels_last && c.shape.kernel_h != 1) continue;
        rig::backend::Conv2dShape shape = c.shape;
        shape.channels_last = channels_last;
        out.push_back({std::string("conv_wgrad_accumulating_") + type_name(type) +
                           (channels_last ? "_nhwc_" : "_") + c.name,
                       dnn::conv2d_backward_filter_graph(shape, type, true)});
      }
    }
  }
  // ResNet-20's f32 convolutions at matmul_precision tensorfloat32 (TF32
  // allowed: tensor-core engines on f32 data), NCHW and NHWC, each way.
  for (const bool channels_last : {false, true}) {
    for (const Conv& c : convs) {
      rig::backend::Conv2dShape shape = c.shape;
      shape.channels_last = channels_last;
      shape.allow_tf32 = true;
      const std::string base = std::string("f32_tf32") + (channels_last ? "_nhwc_" : "_") + c.name;
      out.push_back({"conv_fwd_" + base, dnn::conv2d_forward_graph(shape)});
      if (c.shape.c_in != 3) {
        out.push_back({"conv_dgrad_" + base, dnn::conv2d_backward_data_graph(shape)});
      }
      out.push_back({"conv_wgrad_" + base, dnn::conv2d_backward_filter_graph(shape)});
    }
  }
  // What the deterministic filter costs wgrad: the same graphs allowing
  // nondeterministic engines (as cuDNN's heuristics would pick them).
  for (const Conv& c : convs) {
    out.push_back({std::string("conv_wgrad_nondeterministic_f32_") + c.name,
                   allowing_nondeterminism(dnn::conv2d_backward_filter_graph(c.shape))});
  }
  // A biased convolution, a grouped one and a dilated one (f32).
  out.push_back({"conv_fwd_f32_bias", dnn::conv2d_forward_graph(conv(32, 16, 16, 3, 1, 32, true))});
  rig::backend::Conv2dShape grouped = conv(32, 32, 32, 3, 1, 16);
  grouped.groups = 4;
  out.push_back({"conv_fwd_f32_groups4", dnn::conv2d_forward_graph(grouped)});
  out.push_back({"conv_dgrad_f32_groups4", dnn::conv2d_backward_data_graph(grouped)});
  out.push_back({"conv_wgrad_f32_groups4", dnn::conv2d_backward_filter_graph(grouped)});
  rig::backend::Conv2dShape dilated = conv(32, 16, 16, 3, 1, 16);
  dilated.dilation_h = dilated.dilation_w = 2;
  dilated.pad_h = dilated.pad_w = 2;
  out.push_back({"conv_fwd_f32_dilation2", dnn::conv2d_forward_graph(dilated)});
  // ResNet-20's batch norms.
  for (const rig::backend::BatchNormShape& s : std::vector<rig::backend::BatchNormShape>{
           {128, 16, 32 * 32}, {128, 32, 16 * 16}, {128, 64, 8 * 8}}) {
    const std::string base = std::to_string(s.c) + "x" + std::to_string(s.inner);
    out.push_back({"bn_fwd_running_" + base, dnn::batch_norm_forward_training_graph(s, true)});
    out.push_back({"bn_fwd_" + base, dnn::batch_norm_forward_training_graph(s, false)});
    out.push_back({"bn_bwd_" + base, dnn::batch_norm_backward_graph(s)});
  }
  // A Transformer base's attention, forward and backward: H = 8, D = 64.
  for (std::int64_t b : {8, 32}) {
    for (std::int64_t t : {32, 64, 128, 256}) {
      for (dnn::ConvType type : {dnn::ConvType::bf16, dnn::ConvType::f16}) {
        for (int variant = 0; variant < 4; ++variant) {
          dnn::AttentionGraphShape s = dnn::AttentionGraphShape::packed(b, 8, t, t, 64);
          s.type = type;
          s.causal = variant == 1 || variant == 3;
          s.padding = variant == 2 || variant == 3;
          const std::string base = std::string(type_name(type)) + "_b" + std::to_string(b) + "_t" +
                                   std::to_string(t) + (s.causal ? "_causal" : "") +
                                   (s.padding ? "_padding" : "");
          out.push_back({"attn_fwd_" + base, dnn::attention_forward_graph(s)});
          out.push_back({"attn_bwd_" + base, dnn::attention_backward_graph(s)});
          if ((b == 8 && t == 128) || (b == 32 && t == 256)) {
            for (dnn::AttentionDropout dropout :
                 {dnn::AttentionDropout::philox, dnn::AttentionDropout::mask}) {
              s.dropout = dropout;
              s.dropout_probability = 0.1F;
              const std::string d =
                  dropout == dnn::AttentionDropout::philox ? "_dropout_philox" : "_dropout_mask";
              out.push_back({"attn_fwd_" + base + d, dnn::attention_forward_graph(s)});
              // The backward takes cuDNN's Philox only (it rejects rig's mask).
              if (dropout == dnn::AttentionDropout::philox) {
                out.push_back({"attn_bwd_" + base + d, dnn::attention_backward_graph(s)});
              }
            }
            s.dropout = dnn::AttentionDropout::none;
            // cuDNN's default backward: dq by atomics, nondeterministic engines allowed.
            s.allow_nondeterministic = true;
            out.push_back({"attn_bwd_nondeterministic_" + base, dnn::attention_backward_graph(s)});
            s.allow_nondeterministic = false;
          }
        }
      }
    }
  }
  // What training sends (fused_attention_shape of a back end's call): the
  // split-heads layout ([B, T, H, D] memory), the encoder's and the cross
  // attention's key padding, the decoder's causal mask, cuDNN's dropout;
  // transformer-base-synthetic's batch and tools/gpu-check's tiny Transformer.
  struct Training {
    std::int64_t b, h, t, d;
  };
  for (const Training& m : {Training{125, 8, 64, 64}, Training{16, 4, 12, 16}}) {
    for (int variant = 0; variant < 2; ++variant) {
      rig::backend::FusedAttention a;
      a.b = m.b;
      a.h = m.h;
      a.tq = a.tk = m.t;
      a.d = m.d;
      a.type = rig::DType::bf16;
      a.causal = variant == 1;
      static const std::int32_t lengths_on_device = 0;  // only its presence counts here
      a.key_lengths = variant == 0 ? &lengths_on_device : nullptr;
      a.dropout_p = 0.1F;
      static float stats = 0.0F;
      a.stats = &stats;
      a.qs = a.ks = a.vs = a.os = {m.t * m.h * m.d, m.d, m.h * m.d};
      const dnn::AttentionGraphShape s = dnn::fused_attention_shape(a);
      const std::string base = "fused_b" + std::to_string(m.b) + "_h" + std::to_string(m.h) + "_t" +
                               std::to_string(m.t) + "_d" + std::to_string(m.d) +
                               (a.causal ? "_causal" : "_padding") + "_dropout_philox";
      out.push_back({"attn_fwd_" + base, dnn::attention_forward_graph(s)});
      out.push_back({"attn_bwd_" + base, dnn::attention_backward_graph(s)});
    }
  }
  return out;
}

const std::vector<Case>& all_cases() {
  static const std::vector<Case> list = cases();
  return list;
}

class CudnnPlan : public ::testing::TestWithParam<std::size_t> {};

TEST_P(CudnnPlan, FinalizesOnEveryDescribedDevice) {
  std::string why;
  const std::vector<Device>& list = devices(why);
  if (list.empty()) GTEST_SKIP() << why;
  const Case& c = all_cases()[GetParam()];
  for (const Device& device : list) {
    const dnn::SupportReport r = dnn::check_support(c.graph, *device.description);
    const bool ok = driver_is_stub() ? r.supported_without_driver() : r.supported();
    EXPECT_TRUE(ok) << c.name << " on " << device.name << ": " << r.error
                    << " (graph finalized: " << r.graph_finalized
                    << ", engine configs: " << r.engine_configs << ", usable: " << r.usable_configs
                    << ")\n  " << c.graph.key();
    if (r.no_deterministic_engine) {
      std::printf("%s on %s: NO DETERMINISTIC ENGINE (%lld engine configs, all nondeterministic)\n",
                  c.name.c_str(), device.name.c_str(), static_cast<long long>(r.engine_configs));
    }
    if (ok) {
      std::printf("%s on %s: %s, %lld engine configs (%lld nondeterministic), %s\n", c.name.c_str(),
                  device.name.c_str(), r.engine.empty() ? "" : r.engine.c_str(),
                  static_cast<long long>(r.engine_configs),
                  static_cast<long long>(r.nondeterministic_configs),
                  r.supported() ? ("plan finalized, workspace " +
                                   std::to_string(r.workspace_bytes) + " bytes")
                                      .c_str()
                                : "plan compiled; its load needs the driver (stub)");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Graphs, CudnnPlan, ::testing::Range<std::size_t>(0, all_cases().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return all_cases()[info.param].name;
                         });

TEST(CudnnPlanSetup, LoadsCudnnAndTheDescriptions) {
  std::string why;
  const std::vector<Device>& list = devices(why);
  if (list.empty()) GTEST_SKIP() << why;
  std::printf("cuDNN %zu, %zu device description(s)\n", dnn::cudnn_version(), list.size());
  EXPECT_GE(dnn::cudnn_version(), 90800U);
}

}  // namespace
