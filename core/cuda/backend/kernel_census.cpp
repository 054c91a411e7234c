#include "cuda/backend/kernel_census.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace rig::cuda {

namespace {

// What one queued piece of work adds to its census line.
struct Work {
  std::string detail;  // operand types, after the kernel's name
  std::int64_t elements = 0;
  double bytes = 0;
  double flops = 0;
};

const char* type_name(kernels::ElementType type) {
  switch (type) {
    case kernels::ElementType::f16:
      return "f16";
    case kernels::ElementType::bf16:
      return "bf16";
    default:
      return "f32";
  }
}
double type_bytes(kernels::ElementType type) {
  return type == kernels::ElementType::f32 ? 4.0 : 2.0;
}
double type_bytes(DType type) {
  return kernels::dtype_bytes(type);
}

// Kernels without an estimate count launches only.
template <class Kernel>
Work work_of(const Kernel&) {
  return {};
}

Work work_of(const kernels::CopyStrided& k) {
  const std::int64_t n = kernels::shape_elements(k.ndim, k.shape);
  return {fmt::format("{} -> {}", dtype_name(k.src_type), dtype_name(k.dst_type)), n,
          static_cast<double>(n) * (type_bytes(k.src_type) + type_bytes(k.dst_type))};
}
Work work_of(const kernels::CopyContiguous& k) {
  return {"bytes", k.bytes, 2.0 * static_cast<double>(k.bytes)};
}
Work work_of(const kernels::FillStrided& k) {
  const std::int64_t n = kernels::shape_elements(k.ndim, k.shape);
  return {std::string(dtype_name(k.dst_type)), n, static_cast<double>(n) * type_bytes(k.dst_type)};
}
Work work_of(const kernels::AddStrided& k) {
  const std::int64_t n = kernels::shape_elements(k.ndim, k.shape);
  const std::int64_t r = k.row_sum ? kernels::shape_elements(k.rdim, k.rshape) : 1;
  const bool reduces = kernels::shape_elements(k.rdim, k.rshape) > 1;  // broadcast axes summed
  return {fmt::format("{} += {}{}", dtype_name(k.dst_type), dtype_name(k.src_type),
                      reduces ? ", summed over broadcast axes" : ""),
          n * r,
          static_cast<double>(n) * 2.0 * type_bytes(k.dst_type) +
              static_cast<double>(n * r) * type_bytes(k.src_type)};
}
Work work_of(const kernels::BinaryKernel& k) {
  const std::int64_t n = kernels::shape_elements(k.ndim, k.shape);
  return {type_name(k.type), n, 3.0 * static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::UnaryForward& k) {
  return {type_name(k.type), k.n, 2.0 * static_cast<double>(k.n) * type_bytes(k.type)};
}
Work work_of(const kernels::UnaryBackward& k) {
  const double operands = 2.0 + (k.x != nullptr ? 1.0 : 0.0) + (k.y != nullptr ? 1.0 : 0.0);
  return {type_name(k.type), k.n, operands * static_cast<double>(k.n) * type_bytes(k.type)};
}
// A row scale's values: one per row_length elements.
double row_scale_bytes(const kernels::DropoutRows& rows, std::int64_t n,
                       kernels::ElementType type) {
  if (rows.data == nullptr) return 0.0;
  return static_cast<double>((n + rows.row_length - 1) / rows.row_length) * type_bytes(type);
}
const char* row_scale_name(const kernels::DropoutRows& rows) {
  return rows.data != nullptr ? ", rows scaled" : "";
}
Work work_of(const kernels::DropoutForward& k) {
  const bool added = k.residual != nullptr;    // reads the residual too
  const bool masked = k.relu_mask != nullptr;  // writes a bit per element
  // src read, dst written (if any), the residual read.
  const double passes = 1.0 + (k.dst != nullptr ? 1.0 : 0.0) + (added ? 1.0 : 0.0);
  return {fmt::format("{}{}{}{}", type_name(k.type), added ? ", + residual" : "",
                      row_scale_name(k.rows),
                      masked ? (k.dst != nullptr ? ", relu mask" : ", relu mask only") : ""),
          k.n,
          passes * static_cast<double>(k.n) * type_bytes(k.type) +
              row_scale_bytes(k.rows, k.n, k.type) +
              (masked ? static_cast<double>(k.n) / 8.0 : 0.0)};
}
Work work_of(const kernels::DropoutBackward& k) {
  return {
      fmt::format("{}{}", type_name(k.type), row_scale_name(k.rows)), k.n,
      2.0 * static_cast<double>(k.n) * type_bytes(k.type) + row_scale_bytes(k.rows, k.n, k.type)};
}
// Attention's softmax: the mask's distinct bytes (a key-padding mask
// broadcast over heads and queries is a row per batch element).
double attention_mask_bytes(const kernels::AttentionSoftmaxForward& k) {
  if (k.mask == nullptr) return 0.0;
  const std::int64_t batches = k.heads > 0 ? k.planes / k.heads : 0;
  return static_cast<double>((k.mask_b != 0 ? batches : 1) * (k.mask_h != 0 ? k.heads : 1) *
                             (k.mask_q != 0 ? k.tq : 1) * (k.mask_k != 0 ? k.tk : 1));
}
Work work_of(const kernels::AttentionSoftmaxForward& k) {
  const std::int64_t n = k.planes * k.tq * k.tk;
  const double per_element = 4.0 + (k.keep != nullptr ? 1.0 : 0.0) +
                             (k.probs != nullptr ? 4.0 : 0.0) +
                             (k.weights != nullptr ? type_bytes(k.type) : 0.0);
  return {fmt::format("{}{}{}{}{}", k.probs != nullptr ? "probs f32" : "no probs",
                      k.weights != nullptr ? fmt::format(", weights {}", type_name(k.type)) : "",
                      k.mask != nullptr ? ", masked" : "", k.causal ? ", causal" : "",
                      k.keep != nullptr ? ", dropout" : ""),
          n, static_cast<double>(n) * per_element + attention_mask_bytes(k)};
}
Work work_of(const kernels::AttentionSoftmaxBackward& k) {
  const std::int64_t n = k.rows * k.cols;
  const double per_element = 4.0 + (k.keep != nullptr ? 1.0 : 0.0) +
                             (k.dscores != nullptr ? 4.0 + type_bytes(k.type) : 0.0) +
                             (k.weights != nullptr ? type_bytes(k.type) : 0.0);
  std::vector<std::string> parts;
  if (k.dscores != nullptr) parts.push_back(fmt::format("dscores {}", type_name(k.type)));
  if (k.weights != nullptr) parts.push_back(fmt::format("weights {}", type_name(k.type)));
  if (k.keep != nullptr) parts.push_back("dropout");
  return {fmt::format("{}", fmt::join(parts, ", ")), n, static_cast<double>(n) * per_element};
}
Work work_of(const kernels::BatchNormStatsPartial& k) {
  const std::int64_t n = k.n * k.c * k.inner;
  return {type_name(k.type), n, static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::BatchNormApply& k) {
  const std::int64_t n = k.n * k.c * k.inner;
  const double operands = k.residual != nullptr ? 3.0 : 2.0;
  const bool bits = k.relu_bits != nullptr;  // a bit per element written
  const char* added = k.residual == nullptr         ? ""
                      : k.residual_scale != nullptr ? ", + batch norm"  // of the residual
                                                    : ", + residual";
  return {fmt::format("{}{}{}", type_name(k.type), added, bits ? ", relu bits" : ""), n,
          operands * static_cast<double>(n) * type_bytes(k.type) +
              (bits ? static_cast<double>(n) / 8.0 : 0.0)};
}
// Where a relu followed, batch norm's backward reads the relu's output too,
// or its mask's bits, or finds its mask from x (nothing more read); its
// first pass may store relu's backward of dy (masked_dy).
std::string relu_mask_name(const kernels::batch_norm_detail::ReluMask& relu) {
  if (relu.y != nullptr) return ", relu";
  if (relu.bits != nullptr) return ", relu bits";
  return relu.scale != nullptr ? ", relu from x" : "";
}
// The bytes of the relu's output or its bits that batch norm's backward reads.
double relu_mask_bytes(const kernels::batch_norm_detail::ReluMask& relu, std::int64_t n,
                       kernels::ElementType type) {
  if (relu.y != nullptr) return static_cast<double>(n) * type_bytes(type);
  return relu.bits != nullptr ? static_cast<double>(n) / 8.0 : 0.0;
}
Work work_of(const kernels::BatchNormGradPartial& k) {
  const std::int64_t n = k.n * k.c * k.inner;
  const bool masked = k.masked_dy != nullptr;
  const double operands = 2.0 + (masked ? 1.0 : 0.0);
  return {
      fmt::format("{}{}{}", type_name(k.type), relu_mask_name(k.relu),
                  masked ? ", masked dy stored" : ""),
      n,
      operands * static_cast<double>(n) * type_bytes(k.type) + relu_mask_bytes(k.relu, n, k.type)};
}
Work work_of(const kernels::BatchNormStatsPartialPacked& k) {
  return work_of(static_cast<const kernels::BatchNormStatsPartial&>(k));
}
Work work_of(const kernels::BatchNormGradPartialPacked& k) {
  return work_of(static_cast<const kernels::BatchNormGradPartial&>(k));
}
Work work_of(const kernels::BatchNormBackwardDx& k) {
  const std::int64_t n = k.n * k.c * k.inner;
  return {fmt::format("{}{}", type_name(k.type), relu_mask_name(k.relu)), n,
          3.0 * static_cast<double>(n) * type_bytes(k.type) + relu_mask_bytes(k.relu, n, k.type)};
}
Work work_of(const kernels::LayerNormForward& k) {
  const std::int64_t n = k.rows * k.d;
  return {type_name(k.type), n, 2.0 * static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::LayerNormBackwardDx& k) {
  const std::int64_t n = k.rows * k.d;
  const double passes = k.accumulate ? 4.0 : 3.0;  // dx read too when added into
  return {fmt::format("{}{}", type_name(k.type), k.accumulate ? ", added into dx" : ""), n,
          passes * static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::LayerNormBackwardParams& k) {
  const std::int64_t n = k.rows * k.d;
  return {type_name(k.type), n, 2.0 * static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::SoftmaxForward& k) {
  const std::int64_t n = k.rows * k.cols;
  const double mask = k.mask != nullptr ? 1.0 : 0.0;
  return {type_name(k.type), n, static_cast<double>(n) * (2.0 * type_bytes(k.type) + mask)};
}
Work work_of(const kernels::SoftmaxBackward& k) {
  const std::int64_t n = k.rows * k.cols;
  return {type_name(k.type), n, 3.0 * static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::CrossEntropyForward& k) {
  const std::int64_t n = k.rows * k.c;
  return {type_name(k.type), n, static_cast<double>(n) * type_bytes(k.type)};
}
Work work_of(const kernels::CrossEntropyBackward& k) {
  const std::int64_t n = k.rows * k.c;
  return {type_name(k.type), n, 2.0 * static_cast<double>(n) * type_bytes(k.type)};
}
// y read and written in place (f32, or `type` for 16-bit storage); pre written for gelu.
Work work_of(const kernels::BiasActivation& k) {
  const std::int64_t n = k.rows * k.cols;
  const double streams = k.pre != nullptr && k.activation == Activation::gelu ? 3.0 : 2.0;
  return {type_name(k.type), n, streams * static_cast<double>(n) * type_bytes(k.type)};
}
// The f32 product read, `type` written.
Work work_of(const kernels::BiasReluDropoutStore& k) {
  const std::int64_t n = k.rows * k.cols;
  return {fmt::format("f32 -> {}", type_name(k.type)), n,
          static_cast<double>(n) * (4.0 + type_bytes(k.type))};
}
// g and saved read, dz written (each f32 or 16-bit).
Work work_of(const kernels::ActivationBackward& k) {
  const std::int64_t n = k.rows * k.cols;
  const char* half = type_name(k.half);
  const auto name = [&](const void* sixteen, const void* f32) {
    return sixteen != nullptr ? half : f32 != nullptr ? "f32" : "none";
  };
  const double g = k.g16 != nullptr ? 2.0 : k.g != nullptr ? 4.0 : 0.0;
  const double saved = k.saved16 != nullptr ? 2.0 : k.saved != nullptr ? 4.0 : 0.0;
  const double dz = (k.dz != nullptr ? 4.0 : 0.0) + (k.dz16 != nullptr ? 2.0 : 0.0);
  return {fmt::format("g {} saved {} dz {}", name(k.g16, k.g), name(k.saved16, k.saved),
                      name(k.dz16, k.dz)),
          n, static_cast<double>(n) * (g + saved + dz)};
}
Work work_of(const kernels::MaxPool2dForward& k) {
  const std::int64_t in = k.s.planes * k.s.in_size(), out = k.s.planes * k.s.out_size();
  const double index = k.index != nullptr ? 4.0 : 0.0;
  return {type_name(k.type), in,
          static_cast<double>(in) * type_bytes(k.type) +
              static_cast<double>(out) * (type_bytes(k.type) + index)};
}
Work work_of(const kernels::MaxPool2dBackward& k) {
  const std::int64_t in = k.s.planes * k.s.in_size(), out = k.s.planes * k.s.out_size();
  return {type_name(k.type), in,
          static_cast<double>(in) * type_bytes(k.type) +
              static_cast<double>(out) * (type_bytes(k.type) + 4.0)};
}
Work work_of(const kernels::GlobalAvgPoolForward& k) {
  const std::int64_t n = k.planes * k.size;
  return {type_name(k.type), n, type_bytes(k.type) * static_cast<double>(n + k.planes)};
}
Work work_of(const kernels::GlobalAvgPoolBackward& k) {
  const std::int64_t n = k.planes * k.size;
  return {type_name(k.type), n, type_bytes(k.type) * static_cast<double>(n + k.planes)};
}
Work work_of(const kernels::IndexAddSegments& k) {
  // Every gradient row read; at most one read and write of dx per row.
  const std::int64_t n = k.outer * k.k * k.inner;
  return {fmt::format("{} -> {}", type_name(k.grad_type), type_name(k.dx_type)), n,
          static_cast<double>(n) * (type_bytes(k.grad_type) + 2.0 * type_bytes(k.dx_type))};
}
Work work_of(const kernels::UnscalePartials& k) {  // src read, the f32 master written
  const double master = k.master != nullptr ? 4.0 : 0.0;
  return {k.master != nullptr ? fmt::format("{} -> f32", type_name(k.src_type))
                              : std::string(type_name(k.src_type)),
          k.n, static_cast<double>(k.n) * (type_bytes(k.src_type) + master)};
}
Work work_of(const kernels::GradStatsPartials& k) {
  return {std::string(type_name(k.type)), k.n, type_bytes(k.type) * static_cast<double>(k.n)};
}
Work work_of(const kernels::ColumnTotals& k) {  // f32 partial rows read, a row written (each set)
  const auto row = [&](bool accumulate) {
    const double out = type_bytes(k.out_type) * (accumulate ? 2.0 : 1.0);
    return static_cast<double>(k.cols) * (4.0 * static_cast<double>(k.blocks) + out);
  };
  const bool two = k.out2 != nullptr;
  return {fmt::format("{}{}", type_name(k.out_type), two ? ", two rows" : ""), k.sets() * k.cols,
          row(k.accumulate) + (two ? row(k.accumulate2) : 0.0)};
}
// An update's gradients read and values published: its line names the
// gradients' type, "-> f32" where they are widened, and the published type
// ("bf16 -> f32 -> bf16"; "f32 -> bf16" from the f32 masters; plain "f32").
Work update_work(const kernels::UpdateOperands& io, std::int64_t n, double f32_streams) {
  const bool published = io.publish != nullptr;
  std::string name = type_name(io.grad_type);
  if (io.grad_type != kernels::ElementType::f32) name += " -> f32";
  if (published) name += fmt::format(" -> {}", type_name(io.publish_type));
  const double bytes = f32_streams * 4.0 + type_bytes(io.grad_type) +
                       (published ? type_bytes(io.publish_type) : 0.0);
  return {name, n, bytes * static_cast<double>(n)};
}
Work work_of(const kernels::SgdUpdateKernel& k) {
  // p and buffer read and written
  return update_work(k.io, k.n, k.buffer != nullptr ? 4.0 : 2.0);
}
Work work_of(const kernels::AdamUpdateKernel& k) {
  // p, m, v (and vmax) read and written
  return update_work(k.io, k.n, k.vmax != nullptr ? 8.0 : 6.0);
}

// A kernel's work, its line marked ", packed" where it moves its elements in
// packs (kernels/packed.hpp) and its name does not say so already: whether
// the tensors of a run are aligned for them is a property of the run, not of
// the kernel.
template <class Kernel>
Work counted(std::string_view name, const Kernel& kernel) {
  Work work = work_of(kernel);
  if constexpr (requires { kernel.packed(); }) {
    if (kernel.packed() && !name.ends_with("Packed")) {
      work.detail += work.detail.empty() ? "packed" : ", packed";
    }
  }
  return work;
}

// A convolution's operand type, and " nhwc" for the channels-last layout.
std::string conv_label(std::string_view type, const backend::Conv2dShape& s) {
  // TF32 allowed matters only to f32 data (16-bit values are exact in TF32).
  const char* tf32 = s.allow_tf32 && type == "f32" ? " (tf32)" : "";
  return fmt::format("{}{}{}", type, s.channels_last ? " nhwc" : "", tf32);
}

// A convolution's shape as RIG_CUDA_CENSUS_SHAPES names it: x, the output
// channels, the kernel and its stride.
std::string conv_shape(const backend::Conv2dShape& s) {
  return fmt::format(" [{}x{}x{}x{} -> {} {}x{}/{}{}]", s.n, s.c_in, s.h, s.w, s.c_out, s.kernel_h,
                     s.kernel_w, s.stride_h,
                     s.groups != 1 ? fmt::format(" groups {}", s.groups) : "");
}

// 2 per multiply-add: each output sums (c_in / groups) kh kw products.
double conv_flops(const backend::Conv2dShape& s) {
  return 2.0 * static_cast<double>(s.y_elements()) * static_cast<double>(s.w_elements() / s.c_out);
}

// The FLOPs of one [B, H] batch of [Tq, D] x [D, Tk]-sized products.
double attention_products(const backend::FusedAttention& a) {
  const double full = 2.0 * static_cast<double>(a.b * a.h) * static_cast<double>(a.tq) *
                      static_cast<double>(a.tk) * static_cast<double>(a.d);
  return a.causal ? full / 2.0 : full;
}

// The census's lines, by name and detail, and the file they are written to.
class Census {
 public:
  struct Line {
    std::int64_t launches = 0, elements = 0;
    double bytes = 0, flops = 0;
    double ms = 0;       // device time of the timed launches
    bool timed = false;  // whether any launch of the line was timed
  };

  explicit Census(std::string file) : file_(std::move(file)) {}

  Line* add(const std::string& name, const Work& work) {
    const std::lock_guard lock(mutex_);
    Line& line = lines_[work.detail.empty() ? name : name + " " + work.detail];
    ++line.launches;
    line.elements += work.elements;
    line.bytes += work.bytes;
    line.flops += work.flops;
    return &line;  // std::map's elements stay where they are
  }

  // `line`'s launch ran between `start` and `stop`; its time is read at the
  // next write, once the device has waited for the work queued before it.
  void time(Line* line, std::unique_ptr<QueueMark> start, std::unique_ptr<QueueMark> stop) {
    const std::lock_guard lock(mutex_);
    pending_.push_back({line, std::move(start), std::move(stop)});
  }

  // Rewrites the file whole (through a temporary, so a reader never sees
  // half), after the device has waited for everything queued so far.
  void write() {
    const std::lock_guard lock(mutex_);
    resolve_times();
    std::vector<std::pair<std::string, Line>> sorted(lines_.begin(), lines_.end());
    std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
      if (a.second.bytes != b.second.bytes) return a.second.bytes > b.second.bytes;
      return a.second.launches > b.second.launches;
    });
    const std::string temporary = file_ + ".partial";
    {
      std::ofstream out(temporary, std::ios::trunc);
      out << "# rig kernel census (RIG_CUDA_CENSUS): "
             "launches\telements\tbytes\tflops\tms\twhat (ms: device time, - where not timed)\n";
      for (const auto& [what, line] : sorted) {
        out << fmt::format("{}\t{}\t{:.0f}\t{:.0f}\t{}\t{}\n", line.launches, line.elements,
                           line.bytes, line.flops,
                           line.timed ? fmt::format("{:.4f}", line.ms) : std::string("-"), what);
      }
      if (!out) return;  // a diagnostic: never fail the run over it
    }
    std::error_code ignored;
    std::filesystem::rename(temporary, file_, ignored);
  }

 private:
  struct Timed {
    Line* line;
    std::unique_ptr<QueueMark> start, stop;
  };

  void resolve_times() {
    try {
      for (const Timed& t : pending_) {
        t.line->ms += t.stop->milliseconds_since(*t.start);
        t.line->timed = true;
      }
    } catch (const std::exception&) {
      // A device that cannot time its events has failed its work too, which
      // the run reports; the census only loses these times.
    }
    pending_.clear();
  }

  std::string file_;
  std::mutex mutex_;
  std::map<std::string, Line> lines_;
  std::vector<Timed> pending_;
};

class CensusDevice final : public KernelDevice {
 public:
  CensusDevice(std::unique_ptr<KernelDevice> device, std::string file, bool shapes)
      : device_(std::move(device)), census_(std::move(file)), shapes_(shapes) {}

  backend::MemoryPool& memory() override { return device_->memory(); }
  const simt::DeviceProperties& properties() const override { return device_->properties(); }
  std::optional<double> utilisation() override { return device_->utilisation(); }
  bool set_convolution_autotuning(bool on) override {
    return device_->set_convolution_autotuning(on);
  }
  bool has_tf32() const override { return device_->has_tf32(); }
  bool computes() const override { return device_->computes(); }
  std::unique_ptr<QueueMark> mark() override { return device_->mark(); }

// An empty grid queues nothing, so it is not counted.
#define RIG_CENSUS_RUN(K)                                          \
  void run(const kernels::K& kernel) override {                    \
    if (kernel.plan(device_->properties()).grid.count() == 0) {    \
      device_->run(kernel);                                        \
      return;                                                      \
    }                                                              \
    queue(#K, counted(#K, kernel), [&] { device_->run(kernel); }); \
  }
  RIG_CUDA_KERNELS(RIG_CENSUS_RUN)
#undef RIG_CENSUS_RUN

  void gemm(const LtPlan& plan, const void* a, const void* b, const void* c, void* d, void* bias,
            void* aux) override {
    const double products = static_cast<double>(plan.m * plan.n * plan.k) *
                            static_cast<double>(std::max<std::int64_t>(plan.batch_count(), 0));
    // "+=": added into what D holds (beta 1, C being D: a gradient accumulated);
    // then the epilogue where there is one (a bias, relu: ", RELU_BIAS").
    queue("cuBLASLt matmul",
          {fmt::format("{} x {} {} {}{}{}", name_of(plan.a.type), name_of(plan.b.type),
                       plan.beta != 0.0F ? "+=" : "->", name_of(plan.d.type),
                       plan.compute == GemmCompute::tf32 ? " (tf32)" : "",
                       plan.epilogue == LtEpilogue::default_
                           ? std::string()
                           : fmt::format(", {}", name_of(plan.epilogue))) +
               (shapes_ ? product_shape(plan) : std::string()),
           0, 0, 2.0 * products},
          [&] { device_->gemm(plan, a, b, c, d, bias, aux); });
  }

  void conv2d_forward(const backend::Conv2dShape& s, const float* x, const float* w,
                      float* y) override {
    queue("convolution forward", {conv_label("f32", s) + shape_of(s), 0, 0, conv_flops(s)},
          [&] { device_->conv2d_forward(s, x, w, y); });
  }
  void conv2d_backward_data(const backend::Conv2dShape& s, const float* w, const float* dy,
                            float* dx) override {
    queue("convolution data gradient", {conv_label("f32", s) + shape_of(s), 0, 0, conv_flops(s)},
          [&] { device_->conv2d_backward_data(s, w, dy, dx); });
  }
  void conv2d_backward_filter(const backend::Conv2dShape& s, const float* x, const float* dy,
                              float* dw) override {
    queue("convolution filter gradient", {conv_label("f32", s) + shape_of(s), 0, 0, conv_flops(s)},
          [&] { device_->conv2d_backward_filter(s, x, dy, dw); });
  }
  bool conv2d_16(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16(s, type);
  }
  void conv2d_forward_16(const backend::Conv2dShape& s, DType type, const void* x, const void* w,
                         void* y) override {
    queue("convolution forward",
          {conv_label(dtype_name(type), s) + shape_of(s), 0, 0, conv_flops(s)},
          [&] { device_->conv2d_forward_16(s, type, x, w, y); });
  }
  void conv2d_backward_data_16(const backend::Conv2dShape& s, DType type, const void* w,
                               const void* dy, void* dx, bool accumulate) override {
    queue("convolution data gradient",
          {conv_label(dtype_name(type), s) + (accumulate ? ", added into dx" : "") + shape_of(s), 0,
           0, conv_flops(s)},
          [&] { device_->conv2d_backward_data_16(s, type, w, dy, dx, accumulate); });
  }
  bool conv2d_16_adds_dx(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16_adds_dx(s, type);
  }
  void conv2d_backward_filter_16(const backend::Conv2dShape& s, DType type, const void* x,
                                 const void* dy, void* dw, bool accumulate) override {
    queue("convolution filter gradient",
          {conv_label(dtype_name(type), s) + (accumulate ? ", added into dw" : "") + shape_of(s), 0,
           0, conv_flops(s)},
          [&] { device_->conv2d_backward_filter_16(s, type, x, dy, dw, accumulate); });
  }
  bool conv2d_16_adds_dw(const backend::Conv2dShape& s, DType type) override {
    return device_->conv2d_16_adds_dw(s, type);
  }
  bool fused_attention_supported(const backend::FusedAttention& a) override {
    return device_->fused_attention_supported(a);
  }
  // FLOPs: the forward's two products (q k^T, weights v), the backward's
  // five (q k^T again, dv, d weights, dq, dk); half of them under a causal mask.
  void fused_attention_forward(const backend::FusedAttention& a) override {
    queue("fused attention forward",
          {std::string(dtype_name(a.type)), 0, 0, 2.0 * attention_products(a)},
          [&] { device_->fused_attention_forward(a); });
  }
  void fused_attention_backward(const backend::FusedAttention& a) override {
    queue("fused attention backward",
          {std::string(dtype_name(a.type)), 0, 0, 5.0 * attention_products(a)},
          [&] { device_->fused_attention_backward(a); });
  }

  void to_host(void* host, const void* src, std::size_t bytes) override {
    census_.add("copy to host", bytes_work(bytes));
    device_->to_host(host, src, bytes);
    census_.write();
  }
  void begin_uploads() override {
    device_->begin_uploads();
  }
  std::uint64_t end_uploads() override {
    return device_->end_uploads();
  }
  void use_uploads(std::uint64_t ticket) override {
    device_->use_uploads(ticket);
  }
  std::unique_ptr<backend::PendingRead> to_host_later(const void* src, std::size_t bytes) override {
    census_.add("copy to host, collected later", bytes_work(bytes));
    return device_->to_host_later(src, bytes);
  }
  void from_host(void* dst, const void* host, std::size_t bytes) override {
    census_.add("copy from host", bytes_work(bytes));
    device_->from_host(dst, host, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    queue("copy on the device", bytes_work(2 * bytes), [&] { device_->copy(dst, src, bytes); });
  }
  void zero(void* dst, std::size_t bytes) override {
    queue("zero", bytes_work(bytes), [&] { device_->zero(dst, bytes); });
  }
  void synchronize() override {
    device_->synchronize();
    census_.write();
  }

 private:
  // The shape's part of a line, where RIG_CUDA_CENSUS_SHAPES asks for it.
  std::string shape_of(const backend::Conv2dShape& s) const {
    return shapes_ ? conv_shape(s) : std::string();
  }
  // A product's m, n and k in cuBLASLt's (column-major) terms, and its batch.
  static std::string product_shape(const LtPlan& plan) {
    const std::int64_t batch = plan.batch_count();
    return fmt::format(" [m {} n {} k {}{}]", plan.m, plan.n, plan.k,
                       batch != 1 ? fmt::format(" batch {}", batch) : "");
  }

  // Counts `work` under `name` and queues it with `call`, between two marks
  // where the device's time is measured.
  template <class Call>
  void queue(const std::string& name, const Work& work, Call&& call) {
    Census::Line* line = census_.add(name, work);
    std::unique_ptr<QueueMark> start = device_->mark();
    call();
    if (start) census_.time(line, std::move(start), device_->mark());
  }

  static Work bytes_work(std::size_t bytes) {
    return {"", 0, static_cast<double>(bytes), 0};
  }

  std::unique_ptr<KernelDevice> device_;
  Census census_;
  bool shapes_;
};

}  // namespace

std::string census_file_requested() {
  const char* file = std::getenv("RIG_CUDA_CENSUS");
  return file == nullptr ? std::string() : std::string(file);
}

std::unique_ptr<KernelDevice> with_census(std::unique_ptr<KernelDevice> device, std::string file,
                                          bool shapes) {
  return std::make_unique<CensusDevice>(std::move(device), std::move(file), shapes);
}

}  // namespace rig::cuda
