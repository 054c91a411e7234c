#include "launch/elastic/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "rig/error.hpp"

namespace rig::launch::elastic {
namespace {

using Clock = std::chrono::steady_clock;

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw RunError(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  }
  return {fds[0], fds[1]};
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// fork + exec with stdout -> out, stderr -> err; the child leads a new session.
pid_t spawn(const std::vector<std::string>& argv,
            const std::vector<std::pair<std::string, std::string>>& env, int out, int err) {
  std::vector<char*> args;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw RunError(fmt::format("cannot start {}: {}", argv[0], std::strerror(errno)));
  if (pid == 0) {
    ::setsid();
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    for (const auto& [key, value] : env) ::setenv(key.c_str(), value.c_str(), 1);
    // The supervisor ignores nothing the job should not: restore defaults.
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    ::execvp(args[0], args.data());
    const std::string message =
        fmt::format("rig: cannot run {}: {}\n", argv[0], std::strerror(errno));
    const ssize_t ignored = ::write(STDERR_FILENO, message.data(), message.size());
    (void)ignored;
    ::_exit(127);
  }
  return pid;
}

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own output is gone: keep supervising
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

CommandOutput run_command(const std::vector<std::string>& argv, double timeout_s) {
  const Pipe pipe = make_pipe();
  const pid_t pid = spawn(argv, {}, pipe.write, pipe.write);
  ::close(pipe.write);
  CommandOutput out;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  char buffer[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      out.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    pollfd fd{pipe.read, POLLIN, 0};
    const int ready = ::poll(&fd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t n = ::read(pipe.read, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (out.text.size() < (1U << 20U)) out.text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(pipe.read);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  out.exit_code = exit_code_of(status);
  return out;
}

SupervisedJob::SupervisedJob(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& env,
                             LineSink on_line)
    : on_line_(std::move(on_line)) {
  const Pipe out = make_pipe();
  const Pipe err = make_pipe();
  pid_ = spawn(argv, env, out.write, err.write);
  ::close(out.write);
  ::close(err.write);
  out_fd_ = out.read;
  err_fd_ = err.read;
}

SupervisedJob::~SupervisedJob() {
  if (!exit_code_) {
    kill_session();
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
  if (err_fd_ >= 0) ::close(err_fd_);
}

void SupervisedJob::relay(int fd, int to, std::string& partial) {
  char buffer[8192];
  const ssize_t n = ::read(fd, buffer, sizeof(buffer));
  if (n <= 0) {
    if (n == 0 || errno != EINTR) {
      if (!partial.empty()) on_line_(partial);
      partial.clear();
      ::close(fd);
      (fd == out_fd_ ? out_fd_ : err_fd_) = -1;
    }
    return;
  }
  // Bytes go on at once (a progress bar's '\r' included); lines are scanned.
  write_all(to, buffer, static_cast<std::size_t>(n));
  partial.append(buffer, static_cast<std::size_t>(n));
  std::size_t start = 0;
  for (std::size_t nl = partial.find('\n'); nl != std::string::npos;
       nl = partial.find('\n', start)) {
    on_line_(std::string_view(partial).substr(start, nl - start));
    start = nl + 1;
  }
  partial.erase(0, start);
  if (partial.size() > 65536) partial.clear();  // a line that never ends is not a report
}

std::optional<int> SupervisedJob::poll(std::chrono::milliseconds wait) {
  if (exit_code_) return exit_code_;
  const auto deadline = Clock::now() + wait;
  while (out_fd_ >= 0 || err_fd_ >= 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) return std::nullopt;  // a signal for the supervisor
    if (ready <= 0) break;
    if (fds[0].revents != 0) relay(out_fd_, STDOUT_FILENO, out_partial_);
    if (fds[1].revents != 0) relay(err_fd_, STDERR_FILENO, err_partial_);
  }
  if (out_fd_ < 0 && err_fd_ < 0) {
    // Both pipes closed: only waiting remains (orphaned ranks may hold them
    // longer than mpirun lives, hence WNOHANG below as well).
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min<long>(wait.count(), 50)));
  }
  int status = 0;
  const pid_t done = ::waitpid(pid_, &status, WNOHANG);
  if (done == pid_) exit_code_ = exit_code_of(status);
  return exit_code_;
}

void SupervisedJob::signal(int sig) {
  if (!exit_code_) ::kill(pid_, sig);
}

void SupervisedJob::kill_session() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::atoi(name.c_str());
    if (pid == ::getpid()) continue;
    if (::getsid(pid) == pid_) ::kill(pid, SIGKILL);
  }
}

}  // namespace rig::launch::elastic
