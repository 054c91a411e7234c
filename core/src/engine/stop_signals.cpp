#include "engine/stop_signals.hpp"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace rig::engine {
namespace {

volatile std::sig_atomic_t g_received = 0;
struct sigaction g_previous_int {};
struct sigaction g_previous_term {};
struct sigaction g_previous_usr1 {};

void write_stderr(const char* text) {
  // write(2) is async-signal-safe; fprintf is not.
  const ssize_t ignored = write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_stop_signal(int signal) {
  if (g_received != 0) {
    write_stderr("\nrig: second signal, exiting now without a checkpoint\n");
    _exit(128 + signal);
  }
  g_received = signal;
  if (signal == SIGINT) {
    write_stderr(
        "\nrig: interrupted: finishing this step and writing a checkpoint (press Ctrl-C again "
        "to exit at once)\n");
  } else if (signal == SIGUSR1) {
    write_stderr(
        "\nrig: asked to stop (SIGUSR1, forwarded by mpirun): finishing this step and writing a "
        "checkpoint\n");
  } else {
    write_stderr(
        "\nrig: terminated: finishing this step and writing a checkpoint (a second signal exits "
        "at once)\n");
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking read returns EINTR
  sigaction(SIGINT, &action, &g_previous_int);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
}

int StopSignals::received() {
  return g_received;
}

}  // namespace rig::engine
