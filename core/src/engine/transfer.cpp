// load_model: copying the parameters whose names and shapes match from
// another run's checkpoint (transfer learning, fine-tuning).
#include <set>
#include <system_error>

#include <fmt/format.h>

#include "engine/checkpoint.hpp"
#include "rig/error.hpp"

namespace rig::engine {
namespace fs = std::filesystem;

namespace {

// The model.safetensors that `source` (a file, a ckpt folder or a logdir)
// names; a ckpt folder's files are checked against its state.yaml first.
fs::path model_file_of(const fs::path& source) {
  std::error_code ec;
  if (!fs::exists(source, ec)) {
    throw UserError(fmt::format("load_model: {} does not exist", source.string()));
  }
  if (!fs::is_directory(source, ec)) return source;
  if (fs::exists(source / "model.safetensors", ec)) {
    if (fs::exists(source / "state.yaml", ec)) load_checkpoint(source);  // verifies the digests
    return source / "model.safetensors";
  }
  if (auto latest = latest_checkpoint(source)) {
    load_checkpoint(*latest);
    return *latest / "model.safetensors";
  }
  throw UserError(
      fmt::format("load_model: {} has no model.safetensors and no checkpoints/ckpt-<step> folder; "
                  "give a checkpoint folder, a logdir or a .safetensors file",
                  source.string()));
}

}  // namespace

TransferReport load_matching_parameters(const fs::path& source, ParameterStore& params) {
  TransferReport report;
  report.source = model_file_of(source);
  const formats::NamedTensors saved = formats::read_safetensors(report.source);

  std::vector<ParameterInfo> all = params.parameters();
  all.insert(all.end(), params.buffer_infos().begin(), params.buffer_infos().end());
  std::set<std::string> known;
  for (const auto& p : all) {
    known.insert(p.name);
    auto it = saved.find(p.name);
    if (it == saved.end()) {
      report.missing.push_back(p.name);
      continue;
    }
    const Tensor& tensor = it->second;
    if (tensor.shape() != p.shape) {
      report.mismatched.push_back(fmt::format("{}: checkpoint {} vs model {}", p.name,
                                              to_string(tensor.shape()), to_string(p.shape)));
      continue;
    }
    if (!is_floating(tensor.dtype())) {
      report.mismatched.push_back(
          fmt::format("{}: checkpoint dtype {} vs model f32", p.name, dtype_name(tensor.dtype())));
      continue;
    }
    Tensor target = p.master.defined() ? p.master : p.value;
    target.copy_from(tensor);  // f16 / bf16 widen to the f32 master exactly
    report.loaded.push_back(p.name);
  }
  for (const auto& [name, tensor] : saved) {
    if (known.count(name) == 0) report.unused.push_back(name);
  }
  if (params.compute_dtype() != DType::f32) params.publish_values();
  return report;
}

}  // namespace rig::engine
