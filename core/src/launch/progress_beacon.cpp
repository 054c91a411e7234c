#include "launch/progress_beacon.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <fmt/format.h>

namespace rig::launch {

ProgressBeacon::ProgressBeacon(bool writer) {
  const char* path = std::getenv(kProgressEnv);
  if (!writer || path == nullptr || *path == '\0') return;
  // Not being able to report progress must not stop training: the
  // supervisor then only knows the checkpoints' steps.
  fd_ = ::open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
}

ProgressBeacon::~ProgressBeacon() {
  if (fd_ >= 0) ::close(fd_);
}

void ProgressBeacon::reached(std::int64_t step) {
  if (fd_ < 0) return;
  // Fixed width, so each write replaces the whole previous value.
  const std::string text = fmt::format("{:20d}\n", step);
  const ssize_t ignored = ::pwrite(fd_, text.data(), text.size(), 0);
  (void)ignored;
}

std::optional<std::int64_t> read_progress(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::int64_t step = 0;
  if (in >> step) return step;
  return std::nullopt;
}

}  // namespace rig::launch
