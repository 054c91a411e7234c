#include "text_file.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "rig/utf8.hpp"

namespace parallel_text {

namespace {

std::string read_all(const std::string& plugin, const std::string& name, const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw rig::UserError(fmt::format("{}: {}: file not found", plugin, name));
  }
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                             &std::fclose);
  if (!file) throw rig::UserError(fmt::format("{}: {}: cannot open", plugin, name));
  std::string text(static_cast<std::size_t>(std::filesystem::file_size(path, error)), '\0');
  const std::size_t got = std::fread(text.data(), 1, text.size(), file.get());
  if (got != text.size()) throw rig::UserError(fmt::format("{}: {}: cannot read", plugin, name));
  return text;
}

}  // namespace

TextFile::TextFile(const std::string& plugin, const std::string& key, const std::string& path)
    : key_(key), path_(path) {
  text_ = read_all(plugin, name(), path);
  if (text_.empty()) throw rig::UserError(fmt::format("{}: {}: the file is empty", plugin, name()));
  if (const auto bad = rig::first_invalid_utf8(text_)) {
    const auto line =
        std::count(text_.begin(), text_.begin() + static_cast<std::ptrdiff_t>(*bad), '\n') + 1;
    throw rig::UserError(fmt::format("{}: {}: line {}: byte 0x{:02X} is not UTF-8", plugin, name(),
                                     line, static_cast<unsigned char>(text_[*bad])));
  }
  starts_.reserve(static_cast<std::size_t>(std::count(text_.begin(), text_.end(), '\n')) + 1);
  lengths_.reserve(starts_.capacity());
  std::size_t start = 0;
  while (start < text_.size()) {
    std::size_t end = text_.find('\n', start);
    const std::size_t next = end == std::string::npos ? text_.size() : end + 1;
    if (end == std::string::npos) end = text_.size();
    if (end > start && text_[end - 1] == '\r') --end;
    if (end - start > std::numeric_limits<std::uint32_t>::max()) {
      throw rig::UserError(
          fmt::format("{}: {}: line {} is longer than 4 GiB", plugin, name(), starts_.size() + 1));
    }
    starts_.push_back(start);
    lengths_.push_back(static_cast<std::uint32_t>(end - start));
    start = next;
  }
}

}  // namespace parallel_text
