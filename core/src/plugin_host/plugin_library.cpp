#include "plugin_host/plugin_library.hpp"

#include <dlfcn.h>

#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <system_error>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::plugin_host {
namespace {

constexpr const char* kDescriptorAlias = "rig_plugin";

bool looks_like_elf(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' &&
         magic[3] == 'F';
}

// The dynamic loader's reason for refusing `file` (e.g. "libmpi.so.40: cannot
// open shared object file"): Boost.DLL reports only errno ("Bad file
// descriptor"), so ask dlopen once more and read dlerror().
std::string loader_reason(const std::filesystem::path& file, const std::string& fallback) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle != nullptr) {
    dlclose(handle);
    return fallback;
  }
  const char* reason = dlerror();
  return reason != nullptr ? reason : fallback;
}

}  // namespace

std::shared_ptr<const PluginLibrary> PluginLibrary::open(const std::filesystem::path& file) {
  // Libraries stay loaded until the process exits: an exception thrown by
  // plugin code may still be in flight (its type and message live in the
  // library) while the objects that held the library are destroyed.
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::shared_ptr<const PluginLibrary>> loaded;
  std::error_code ec;
  const std::filesystem::path key = std::filesystem::weakly_canonical(file, ec);
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = loaded.find(key); !ec && it != loaded.end()) return it->second;
  auto library = load(file);
  if (!ec) loaded.emplace(key, library);
  return library;
}

std::shared_ptr<const PluginLibrary> PluginLibrary::load(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw UserError(fmt::format("plugin file {} does not exist or is not a file", file.string()));
  }
  if (!looks_like_elf(file)) {
    throw UserError(fmt::format(
        "plugin file {} is not a shared object (no ELF header); rebuild it with rig_add_plugin",
        file.string()));
  }
  auto lib = std::shared_ptr<PluginLibrary>(new PluginLibrary());
  lib->file_ = std::filesystem::absolute(file);
  boost::dll::fs::error_code load_error;
  lib->library_.load(lib->file_, boost::dll::load_mode::default_mode, load_error);
  if (load_error) {
    throw UserError(fmt::format("cannot load plugin {}: {}", file.string(),
                                loader_reason(lib->file_, load_error.message())));
  }
  if (!lib->library_.has(kDescriptorAlias)) {
    throw UserError(
        fmt::format("{} is a shared object but not a rig plugin: it exports no '{}' descriptor "
                    "(add RIG_PLUGIN(...) to one of its sources)",
                    file.string(), kDescriptorAlias));
  }
  lib->descriptor_ = &lib->library_.get_alias<const PluginDescriptor>(kDescriptorAlias);
  // The ABI version is the first member so that it can be read whatever the
  // rest of the layout is.
  if (lib->descriptor_->abi_version != kPluginAbiVersion) {
    throw UserError(fmt::format(
        "plugin {} was built for rig plugin ABI version {}, but this rig uses ABI version {}; "
        "rebuild the plugin against this rig's SDK",
        file.string(), lib->descriptor_->abi_version, kPluginAbiVersion));
  }
  lib->self_ = lib;
  return lib;
}

std::string PluginLibrary::describe() const {
  return fmt::format("{} '{}' ({})", to_string(kind()), name(), file_.string());
}

template <class T, class Factory, class Context>
std::shared_ptr<T> PluginLibrary::make(PluginKind expected, Factory factory,
                                       const YAML::Node& params, const Context& ctx) const {
  if (kind() != expected || factory == nullptr) {
    throw UserError(fmt::format("{} is a {} plugin, not a {} plugin", describe(), to_string(kind()),
                                to_string(expected)));
  }
  std::unique_ptr<T> object;
  try {
    object = factory(params, ctx);
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw OutOfMemoryError("the host", fmt::format("{} '{}' could not allocate what it needs.",
                                                   to_string(kind()), name()));
  } catch (const std::exception& e) {
    // A factory throws when its params or inputs are unusable: the user's to fix.
    throw UserError(
        fmt::format("{} '{}' failed to start: {}", to_string(kind()), name(), e.what()));
  }
  if (!object) {
    throw RunError(fmt::format("{} '{}' returned no object", to_string(kind()), name()));
  }
  // The deleter holds the library, so the code behind the object's vtable
  // stays mapped until the object is gone.
  std::shared_ptr<const PluginLibrary> keep_loaded = self_.lock();
  return std::shared_ptr<T>(object.release(), [keep_loaded](T* p) { delete p; });
}

std::shared_ptr<Model> PluginLibrary::make_model(const YAML::Node& params,
                                                 const ModelContext& ctx) const {
  return make<Model>(PluginKind::model, descriptor_->make_model, params, ctx);
}
std::shared_ptr<DataLayer> PluginLibrary::make_data_layer(const YAML::Node& params,
                                                          const DataLayerContext& ctx) const {
  return make<DataLayer>(PluginKind::data_layer, descriptor_->make_data_layer, params, ctx);
}
std::shared_ptr<Optimizer> PluginLibrary::make_optimizer(const YAML::Node& params,
                                                         const OptimizerContext& ctx) const {
  return make<Optimizer>(PluginKind::optimizer, descriptor_->make_optimizer, params, ctx);
}
std::shared_ptr<LrPolicy> PluginLibrary::make_lr_policy(const YAML::Node& params,
                                                        const LrPolicyContext& ctx) const {
  return make<LrPolicy>(PluginKind::lr_policy, descriptor_->make_lr_policy, params, ctx);
}
std::shared_ptr<Communicator> PluginLibrary::make_communicator(
    const YAML::Node& params, const CommunicatorContext& ctx) const {
  return make<Communicator>(PluginKind::communicator, descriptor_->make_communicator, params, ctx);
}

}  // namespace rig::plugin_host
