// A UTF-8 text file read whole into memory, as lines: the source and target
// files and the vocab files of parallel_text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace parallel_text {

class TextFile {
 public:
  // Reads the file named by parameter `key` (for messages: "source_file
  // PATH"). A missing or empty file, or bytes that are not UTF-8, are a
  // UserError naming the file (and the line). "\r\n" line ends count as "\n".
  TextFile(const std::string& plugin, const std::string& key, const std::string& path);

  std::int64_t size() const { return static_cast<std::int64_t>(starts_.size()); }
  std::string_view line(std::int64_t i) const {
    const auto k = static_cast<std::size_t>(i);
    return std::string_view(text_).substr(starts_[k], lengths_[k]);
  }
  const std::string& key() const { return key_; }
  const std::string& path() const { return path_; }
  std::string name() const { return key_ + " " + path_; }  // "source_file PATH"

 private:
  std::string key_;
  std::string path_;
  std::string text_;
  std::vector<std::size_t> starts_;
  std::vector<std::uint32_t> lengths_;
};

}  // namespace parallel_text
