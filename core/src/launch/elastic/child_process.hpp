// Child processes of the elastic supervisor: a short command whose output
// is captured (host discovery), and the job (mpirun) in a session of its own,
// whose output is relayed to ours and scanned line by line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rig::launch::elastic {

struct CommandOutput {
  int exit_code = 0;  // 128 + signal when a signal ended it
  bool timed_out = false;
  std::string text;  // stdout and stderr
};
CommandOutput run_command(const std::vector<std::string>& argv, double timeout_s);

class SupervisedJob {
 public:
  using LineSink = std::function<void(std::string_view line)>;
  // Starts argv (argv[0] looked up on PATH) with `env` added to ours, in a
  // new session; its stdout and stderr go to ours, and every complete line
  // of either to `on_line`.
  SupervisedJob(const std::vector<std::string>& argv,
                const std::vector<std::pair<std::string, std::string>>& env, LineSink on_line);
  SupervisedJob(const SupervisedJob&) = delete;
  SupervisedJob& operator=(const SupervisedJob&) = delete;
  ~SupervisedJob();  // kills what is left of the session

  // Relays output for up to `wait`; the exit code (128 + signal) once it ended.
  std::optional<int> poll(std::chrono::milliseconds wait);
  void signal(int sig);  // to the job's first process (mpirun)
  // SIGKILL to every process left in the job's session on this machine
  // (mpirun puts each rank in a process group of its own, but not a session).
  void kill_session();
  pid_t pid() const { return pid_; }

 private:
  void relay(int fd, int to, std::string& partial);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_partial_;
  std::string err_partial_;
  std::optional<int> exit_code_;
  LineSink on_line_;
};

}  // namespace rig::launch::elastic
