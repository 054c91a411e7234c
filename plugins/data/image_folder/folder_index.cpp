#include "folder_index.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace image_folder {

namespace fs = std::filesystem;

namespace {

bool hidden(const std::string& name) {
  return !name.empty() && name[0] == '.';
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Names of the entries of `dir` for which `keep(entry)` holds, sorted.
template <class Keep>
std::vector<std::string> sorted_entries(const fs::path& dir, const std::string& what, Keep keep) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) {
    throw rig::UserError(
        fmt::format("image_folder: cannot read {} '{}': {}", what, dir.string(), ec.message()));
  }
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    if (!hidden(name) && keep(entry)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool is_jpeg_name(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string ext = lower(name.substr(dot));
  return ext == ".jpg" || ext == ".jpeg";
}

std::vector<std::string> list_classes(const std::string& root, const std::string& key) {
  std::error_code ec;
  if (root.empty()) {
    throw rig::UserError(fmt::format(
        "image_folder: {} is not set; give the folder that holds <class>/<image>.jpg", key));
  }
  if (!fs::is_directory(root, ec)) {
    throw rig::UserError(fmt::format("image_folder: {} '{}' {}", key, root,
                                     fs::exists(root, ec) ? "is not a folder" : "does not exist"));
  }
  auto classes = sorted_entries(root, key, [](const fs::directory_entry& e) {
    std::error_code error;
    return e.is_directory(error);
  });
  if (classes.empty()) {
    throw rig::UserError(
        fmt::format("image_folder: {} '{}' has no class folders; expected {}/<class>/<image>.jpg",
                    key, root, root));
  }
  return classes;
}

FolderIndex::FolderIndex(const std::string& root, const std::string& key,
                         const std::vector<std::string>& classes)
    : root_(root), classes_(classes) {
  offsets_.push_back(0);
  for (const auto& name : list_classes(root, key)) {
    const auto found = std::lower_bound(classes_.begin(), classes_.end(), name);
    const fs::path dir = fs::path(root) / name;
    if (found == classes_.end() || *found != name) {
      throw rig::UserError(fmt::format(
          "image_folder: class folder '{}' of {} is not a class of the training set (the "
          "class folders of train_dir); the folders of train_dir and eval_dir must agree",
          dir.string(), key));
    }
    const auto label = static_cast<std::int32_t>(found - classes_.begin());
    const auto files = sorted_entries(dir, "class folder", [](const fs::directory_entry& e) {
      std::error_code error;
      return !e.is_directory(error) && is_jpeg_name(e.path().filename().string());
    });
    if (files.empty()) {
      throw rig::UserError(fmt::format(
          "image_folder: class folder '{}' holds no JPEG images (*.jpg, *.jpeg); add images or "
          "remove the folder",
          dir.string()));
    }
    for (const auto& file : files) {
      names_ += file;
      offsets_.push_back(names_.size());
      labels_.push_back(label);
    }
  }
  names_.shrink_to_fit();
}

std::string FolderIndex::path(std::int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  const auto begin = offsets_[k];
  return fmt::format("{}/{}/{}", root_, classes_[static_cast<std::size_t>(labels_[k])],
                     std::string_view(names_).substr(begin, offsets_[k + 1] - begin));
}

}  // namespace image_folder
