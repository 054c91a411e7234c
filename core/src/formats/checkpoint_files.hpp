// Durable files for checkpoints: an owning POSIX file descriptor, writes that
// reach the disk (fsync of the file, then of the folder that names it), and
// the size + CRC-32C digests state.yaml records for each checkpoint file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rig::formats::files {

// Owns one open file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept;
  ~FileDescriptor();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Closes now and reports whether close() succeeded (a deferred write error
  // can surface here).
  bool close();

 private:
  int fd_ = -1;
};

struct FileDigest {
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
  bool operator==(const FileDigest&) const = default;
};

// Creates (or truncates) a file and writes it sequentially, keeping its digest;
// finish() fsyncs and closes it. Throws RunError naming the file on failure.
class SyncedFileWriter {
 public:
  explicit SyncedFileWriter(std::filesystem::path file);
  void write(const void* data, std::size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  FileDigest finish();

 private:
  std::filesystem::path file_;
  FileDescriptor fd_;
  FileDigest digest_;
};

// Writes `text` to `file` and fsyncs it.
FileDigest write_synced(const std::filesystem::path& file, std::string_view text);

// Replaces `file` atomically: writes a sibling temp file, fsyncs it, renames
// it over `file`, fsyncs the folder.
void replace_file_atomically(const std::filesystem::path& file, std::string_view text);

// fsyncs a folder, so that the names created or renamed in it are durable.
void sync_directory(const std::filesystem::path& dir);

// The size and CRC-32C of a file's bytes as they are on disk now; nullopt if
// it cannot be opened.
std::optional<FileDigest> digest_file(const std::filesystem::path& file);

// `value` as the shortest YAML scalar that reads back exactly ("0.3", not
// "0.29999999999999999"; .inf / .nan for the non-finite).
std::string yaml_number(double value);

// The step of a folder named ckpt-<step>; nullopt for any other name
// (.tmp-ckpt-<step> included).
std::optional<std::int64_t> checkpoint_step(const std::filesystem::path& dir);

// Every complete ckpt-<step> folder directly under `root` (one that holds a
// state.yaml; state.yaml is written last), oldest first. Empty if root does
// not exist.
std::vector<std::pair<std::int64_t, std::filesystem::path>> complete_checkpoints(
    const std::filesystem::path& root);

}  // namespace rig::formats::files
