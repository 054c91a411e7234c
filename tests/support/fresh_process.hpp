// Runs a test's body in a process of its own: gtest's "threadsafe" death
// test style re-executes the test binary for this one test, and the body
// runs there. For tests that need process-wide state made once from the
// environment (the CUDA back end reads RIG_CUDA_EMULATOR_* and
// RIG_CUDA_CENSUS when it is first used), so that they pass whichever tests
// ran before them in the same binary, not only under ctest's one test per
// process. The child prints its failures to stderr, which the parent's
// report of the failed child shows.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>

namespace rig_test {

// The current test's failures so far, each with its file and line, on stderr.
inline void print_failures_to_stderr() {
  const ::testing::TestResult* result =
      ::testing::UnitTest::GetInstance()->current_test_info()->result();
  for (int i = 0; i < result->total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result->GetTestPartResult(i);
    if (!part.failed()) continue;
    std::fprintf(stderr, "%s:%d: %s\n", part.file_name() ? part.file_name() : "?",
                 part.line_number(), part.message());
  }
}

inline void in_fresh_process(const std::function<void()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        body();
        print_failures_to_stderr();
        std::fflush(nullptr);
        std::_Exit(::testing::Test::HasFailure() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "")
      << "the test's body failed in its own process (its failures are under \"Actual msg\")";
}

}  // namespace rig_test
