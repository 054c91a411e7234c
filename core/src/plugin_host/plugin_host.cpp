#include "plugin_host/plugin_host.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "config/did_you_mean.hpp"
#include "rig/error.hpp"

namespace rig::plugin_host {
namespace fs = std::filesystem;

namespace {

void append_path_list(std::vector<fs::path>& out, const std::string& list) {
  std::stringstream stream(list);
  std::string item;
  while (std::getline(stream, item, ':')) {
    if (!item.empty()) out.emplace_back(item);
  }
}

std::string with_article(PluginKind kind) {
  const std::string name(to_string(kind));
  return (name.front() == 'o' ? "an " : "a ") + name;
}

// The folder librig was loaded from: the build tree's, an install's lib/, or a bundle's.
fs::path librig_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&librig_dir), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  std::error_code ec;
  fs::path file = fs::weakly_canonical(info.dli_fname, ec);
  return ec ? fs::path(info.dli_fname).parent_path() : file.parent_path();
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec) && !ec;
}

}  // namespace

std::optional<std::pair<PluginKind, std::string>> parse_plugin_file_name(const std::string& file) {
  constexpr std::string_view prefix = "rig-";
  constexpr std::string_view suffix = ".so";
  if (file.size() <= prefix.size() + suffix.size() || !file.starts_with(prefix) ||
      !file.ends_with(suffix)) {
    return std::nullopt;
  }
  std::string stem = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
  // Kind names contain '_' but never '-', so the first '-' ends the kind.
  auto dash = stem.find('-');
  if (dash == std::string::npos) return std::nullopt;
  auto kind = parse_plugin_kind(stem.substr(0, dash));
  std::string name = stem.substr(dash + 1);
  if (!kind || name.empty()) return std::nullopt;
  return std::make_pair(*kind, name);
}

PluginHost::PluginHost(std::vector<fs::path> search_path) : search_path_(std::move(search_path)) {}

std::vector<fs::path> PluginHost::default_search_path(
    const std::vector<std::string>& plugin_path_args) {
  std::vector<fs::path> path;
  for (const auto& arg : plugin_path_args) append_path_list(path, arg);
  if (const char* env = std::getenv("RIG_PLUGIN_PATH")) append_path_list(path, env);
  // The plugins that came with this librig: the build tree's when librig is
  // the build tree's own, else the install's (or bundle's) next to it. An
  // installed rig never searches the tree it was built from.
  const fs::path lib = librig_dir();
  if (same_folder(lib, RIG_BUILD_LIBRARY_DIR)) {
    path.emplace_back(RIG_BUILD_PLUGIN_DIR);
  } else if (!lib.empty()) {
    path.push_back(lib / RIG_PLUGIN_DIR_IN_LIBDIR);
  }
  // One entry per folder, first occurrence kept.
  std::vector<fs::path> unique;
  std::set<std::string> seen;
  for (auto& p : path) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(p, ec);
    std::string key = ec ? p.string() : canonical.string();
    if (seen.insert(key).second) unique.push_back(p);
  }
  return unique;
}

std::vector<PluginFile> PluginHost::discover() const {
  std::vector<PluginFile> found;
  std::set<std::pair<PluginKind, std::string>> seen;
  for (const auto& dir : search_path_) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      auto parsed = parse_plugin_file_name(file.filename().string());
      if (!parsed || !seen.insert(*parsed).second) continue;
      found.push_back({parsed->first, parsed->second, file});
    }
  }
  // Listed by kind in the order of the experiment file, then by name.
  std::stable_sort(found.begin(), found.end(), [](const PluginFile& a, const PluginFile& b) {
    return std::pair(static_cast<int>(a.kind), a.name) <
           std::pair(static_cast<int>(b.kind), b.name);
  });
  return found;
}

std::shared_ptr<const PluginLibrary> PluginHost::open(PluginKind kind,
                                                      const std::string& name_or_path) const {
  const bool is_path = name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".so");
  std::shared_ptr<const PluginLibrary> library;
  if (is_path) {
    library = PluginLibrary::open(name_or_path);
  } else {
    std::vector<PluginFile> all = discover();
    auto match = std::find_if(all.begin(), all.end(), [&](const PluginFile& f) {
      return f.kind == kind && f.name == name_or_path;
    });
    if (match == all.end()) {
      std::vector<std::string> same_kind;
      std::vector<std::string> other_kinds;
      for (const auto& f : all) {
        if (f.kind == kind) same_kind.push_back(f.name);
        if (f.kind != kind && f.name == name_or_path) other_kinds.emplace_back(to_string(f.kind));
      }
      if (!other_kinds.empty()) {
        throw UserError(fmt::format("'{}' is a {} plugin, not {} plugin (known {} plugins: {})",
                                    name_or_path, fmt::join(other_kinds, "/"), with_article(kind),
                                    to_string(kind), fmt::join(same_kind, ", ")));
      }
      std::string hint;
      if (auto best = config::did_you_mean(name_or_path, same_kind)) {
        hint = fmt::format("; did you mean '{}'?", *best);
      }
      std::vector<std::string> dirs;
      for (const auto& d : search_path_) dirs.push_back(d.string());
      throw UserError(
          fmt::format("unknown {} plugin '{}'{} (known {} plugins: {}; searched: {})",
                      to_string(kind), name_or_path, hint, to_string(kind),
                      same_kind.empty() ? "none" : fmt::format("{}", fmt::join(same_kind, ", ")),
                      fmt::join(dirs, ":")));
    }
    library = PluginLibrary::open(match->file);
    if (library->name() != name_or_path) {
      throw UserError(fmt::format("plugin file {} is named for '{}' but its descriptor says '{}'",
                                  match->file.string(), name_or_path, library->name()));
    }
  }
  if (library->kind() != kind) {
    throw UserError(fmt::format("{} is a {} plugin, not {} plugin", library->describe(),
                                to_string(library->kind()), with_article(kind)));
  }
  return library;
}

}  // namespace rig::plugin_host
