// One loaded plugin shared object and its checked descriptor.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <yaml-cpp/yaml.h>
#include <boost/dll/shared_library.hpp>

#include "rig/plugin.hpp"

namespace rig::plugin_host {

class PluginLibrary {
 public:
  // Loads `file` (once per process) and checks its descriptor: present and
  // built for this ABI version. Throws UserError naming the file.
  static std::shared_ptr<const PluginLibrary> open(const std::filesystem::path& file);

  const PluginDescriptor& descriptor() const { return *descriptor_; }
  PluginKind kind() const { return descriptor_->kind; }
  std::string name() const { return descriptor_->name; }
  const std::filesystem::path& file() const { return file_; }
  std::string schema_text() const { return descriptor_->schema_text(); }
  std::string describe() const;  // "model 'mlp' (path)"

  // Each object keeps this library loaded for as long as it lives.
  std::shared_ptr<Model> make_model(const YAML::Node& params, const ModelContext& ctx) const;
  std::shared_ptr<DataLayer> make_data_layer(const YAML::Node& params,
                                             const DataLayerContext& ctx) const;
  std::shared_ptr<Optimizer> make_optimizer(const YAML::Node& params,
                                            const OptimizerContext& ctx) const;
  std::shared_ptr<LrPolicy> make_lr_policy(const YAML::Node& params,
                                           const LrPolicyContext& ctx) const;
  std::shared_ptr<Communicator> make_communicator(const YAML::Node& params,
                                                  const CommunicatorContext& ctx) const;

 private:
  PluginLibrary() = default;
  static std::shared_ptr<const PluginLibrary> load(const std::filesystem::path& file);
  template <class T, class Factory, class Context>
  std::shared_ptr<T> make(PluginKind expected, Factory factory, const YAML::Node& params,
                          const Context& ctx) const;

  boost::dll::shared_library library_;
  const PluginDescriptor* descriptor_ = nullptr;  // points into library_
  std::filesystem::path file_;
  std::weak_ptr<const PluginLibrary> self_;
};

}  // namespace rig::plugin_host
