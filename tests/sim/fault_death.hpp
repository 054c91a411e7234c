// Death tests of the sim device: a child process touches guarded memory from
// host code and must die of the fault (SIGSEGV).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>

#include <csignal>

namespace rig::sim_test {

#if defined(__SANITIZE_ADDRESS__)  // GCC
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// ASan installs its own SIGSEGV handler, which prints a report and exits with a
// code of its choosing. The child restores the default action first, so that
// what kills it is the fault itself, SIGSEGV, in every build; no core file.
inline void let_the_fault_kill() {
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, nullptr);
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
}

// Killed by SIGSEGV. Only in sanitizer builds, where ASAN_OPTIONS makes ASan
// keep SIGSEGV to itself (handle_segv=2, allow_user_segv_handler=0: it ignores
// the sigaction above), the end its report chose is accepted too. Returning
// without a fault fails either way: gtest reports "failed to die" on its own.
inline bool died_of_the_fault(int status) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) return true;
  return kSanitized && !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace rig::sim_test
