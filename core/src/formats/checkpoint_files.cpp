#include "formats/checkpoint_files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <regex>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "rig/error.hpp"
#include "util/crc32c.hpp"

namespace rig::formats::files {
namespace fs = std::filesystem;

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

FileDescriptor open_or_throw(const fs::path& path, int flags, const char* what) {
  FileDescriptor fd(::open(path.c_str(), flags | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    throw RunError(fmt::format("cannot open {} to {}: {}", path.string(), what, errno_text()));
  }
  return fd;
}

}  // namespace

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  close();
}

bool FileDescriptor::close() {
  if (fd_ < 0) return true;
  const int rc = ::close(std::exchange(fd_, -1));
  return rc == 0;
}

SyncedFileWriter::SyncedFileWriter(fs::path file)
    : file_(std::move(file)), fd_(open_or_throw(file_, O_WRONLY | O_CREAT | O_TRUNC, "write it")) {}

void SyncedFileWriter::write(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  digest_.crc32c = util::crc32c(bytes, size, digest_.crc32c);
  digest_.bytes += size;
  while (size > 0) {
    const ssize_t n = ::write(fd_.get(), bytes, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw RunError(fmt::format("writing {} failed: {}", file_.string(), errno_text()));
    }
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
}

FileDigest SyncedFileWriter::finish() {
  if (::fsync(fd_.get()) != 0) {
    throw RunError(fmt::format("cannot sync {} to disk: {}", file_.string(), errno_text()));
  }
  if (!fd_.close()) {
    throw RunError(fmt::format("closing {} failed: {}", file_.string(), errno_text()));
  }
  return digest_;
}

FileDigest write_synced(const fs::path& file, std::string_view text) {
  SyncedFileWriter writer(file);
  writer.write(text);
  return writer.finish();
}

void replace_file_atomically(const fs::path& file, std::string_view text) {
  fs::path temp = file;
  temp += ".tmp";
  write_synced(temp, text);
  std::error_code ec;
  fs::rename(temp, file, ec);
  if (ec) {
    throw RunError(
        fmt::format("cannot move {} to {}: {}", temp.string(), file.string(), ec.message()));
  }
  sync_directory(file.has_parent_path() ? file.parent_path() : fs::path("."));
}

void sync_directory(const fs::path& dir) {
  FileDescriptor fd = open_or_throw(dir, O_RDONLY | O_DIRECTORY, "sync it");
  if (::fsync(fd.get()) != 0) {
    throw RunError(fmt::format("cannot sync folder {} to disk: {}", dir.string(), errno_text()));
  }
}

std::optional<FileDigest> digest_file(const fs::path& file) {
  FileDescriptor fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  FileDigest digest;
  std::vector<char> buffer(std::size_t{1} << 20);
  while (true) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    digest.crc32c = util::crc32c(buffer.data(), static_cast<std::size_t>(n), digest.crc32c);
    digest.bytes += static_cast<std::uint64_t>(n);
  }
  return digest;
}

std::string yaml_number(double value) {
  if (std::isnan(value)) return ".nan";
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  return fmt::format("{}", value);
}

std::optional<std::int64_t> checkpoint_step(const fs::path& dir) {
  static const std::regex pattern(R"(ckpt-(\d{1,18}))");
  std::smatch match;
  const std::string name = dir.filename().string();
  if (!std::regex_match(name, match, pattern)) return std::nullopt;
  return std::stoll(match[1].str());
}

std::vector<std::pair<std::int64_t, fs::path>> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return found;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const auto step = checkpoint_step(entry.path());
    if (!step || !entry.is_directory(ec)) continue;
    if (!fs::is_regular_file(entry.path() / "state.yaml", ec)) continue;
    found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace rig::formats::files
