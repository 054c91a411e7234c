// The images of an ImageNet-style folder: root/<class>/<image>.jpg. Classes are
// the sorted names of the class folders and a label is a class's index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace image_folder {

// Sorted names of the class folders directly under `root` (hidden folders
// skipped). `key` names the parameter in errors. UserError when root is
// missing, not a folder, or has no class folder.
std::vector<std::string> list_classes(const std::string& root, const std::string& key);

// Every JPEG of `root`, class by class and by file name within a class. The
// file names live in one buffer: ImageNet's 1.28 M names cost ~40 MB, not ~150.
class FolderIndex {
 public:
  // Indexes the class folders of `root`; each must be one of `classes` (the
  // label is its position there) and hold at least one JPEG. `key` names the
  // parameter in errors.
  FolderIndex(const std::string& root, const std::string& key,
              const std::vector<std::string>& classes);

  std::int64_t size() const { return static_cast<std::int64_t>(labels_.size()); }
  std::int64_t label(std::int64_t i) const { return labels_[static_cast<std::size_t>(i)]; }
  // root/<class>/<file> of sample i.
  std::string path(std::int64_t i) const;

 private:
  std::string root_;
  std::vector<std::string> classes_;
  std::string names_;                   // every file name, back to back
  std::vector<std::uint64_t> offsets_;  // sample i's name is names_[offsets_[i], offsets_[i+1])
  std::vector<std::int32_t> labels_;
};

// True for a file name ending in .jpg or .jpeg, in any case.
bool is_jpeg_name(const std::string& name);

}  // namespace image_folder
