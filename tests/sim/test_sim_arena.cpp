// The sim device's memory (core/sim/sim_arena.hpp): the allocator, the two views
// and the guard that makes a host dereference fault.
#include "sim/sim_arena.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fault_death.hpp"

namespace rig::sim {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20U;
constexpr std::size_t kGiB = std::size_t{1} << 30U;

// Sets (or unsets, for nullopt) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_, value->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

TEST(SimArena, AllocateReleaseAndReuse) {
  SimArena arena(kMiB);
  EXPECT_EQ(arena.capacity(), kMiB);
  std::byte* a = arena.allocate(100);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(arena.contains(a));
  EXPECT_EQ(arena.allocation_size(a), 128U);  // rounded up to kAlignment
  std::byte* b = arena.allocate(1000);
  EXPECT_EQ(b, a + 128);  // first fit, in address order
  SimArenaStats stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 128U + 1024U);
  EXPECT_EQ(stats.allocations, 2U);

  arena.release(a);
  EXPECT_EQ(arena.allocate(64), a);  // the freed range is reused first
  EXPECT_EQ(arena.allocate(64), a + 64);
  EXPECT_EQ(arena.stats().peak_bytes_in_use, 128U + 1024U);
  arena.release(a);
  arena.release(a + 64);
  arena.release(b);
  arena.release(nullptr);  // ignored, as free(nullptr)
  stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 0U);
  EXPECT_EQ(stats.allocations, 0U);
  EXPECT_EQ(stats.free_ranges, 1U);
  EXPECT_EQ(stats.largest_free_bytes, kMiB);
  EXPECT_EQ(stats.peak_bytes_in_use, 128U + 1024U);
  arena.reset_peak();
  EXPECT_EQ(arena.stats().peak_bytes_in_use, 0U);
}

TEST(SimArena, ZeroBytesGiveUniqueAddresses) {
  SimArena arena(kMiB);
  std::byte* a = arena.allocate(0);
  std::byte* b = arena.allocate(0);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(arena.allocation_size(a), kAlignment);
  arena.release(a);
  arena.release(b);
  EXPECT_EQ(arena.stats().bytes_in_use, 0U);
}

TEST(SimArena, CoalescesFreedNeighbours) {
  SimArena arena(kMiB);
  const std::size_t quarter = kMiB / 4;
  std::byte* a = arena.allocate(quarter);
  std::byte* b = arena.allocate(quarter);
  std::byte* c = arena.allocate(quarter);
  std::byte* d = arena.allocate(quarter);
  EXPECT_EQ(arena.stats().free_ranges, 0U);
  EXPECT_THROW(arena.allocate(1), std::bad_alloc);

  arena.release(a);
  arena.release(c);
  EXPECT_EQ(arena.stats().free_ranges, 2U);
  // Half the arena is free, but in two pieces.
  EXPECT_THROW(arena.allocate(2 * quarter), std::bad_alloc);
  arena.release(b);  // joins a (before) and c (after)
  SimArenaStats stats = arena.stats();
  EXPECT_EQ(stats.free_ranges, 1U);
  EXPECT_EQ(stats.largest_free_bytes, 3 * quarter);
  arena.release(d);  // joins the range before it
  stats = arena.stats();
  EXPECT_EQ(stats.free_ranges, 1U);
  EXPECT_EQ(stats.largest_free_bytes, kMiB);
  std::byte* all = arena.allocate(kMiB);
  EXPECT_EQ(all, a);
  arena.release(all);

  // Freed in the other order: the block after first, then the one before.
  a = arena.allocate(quarter);
  b = arena.allocate(quarter);
  c = arena.allocate(quarter);
  arena.release(c);  // joins the free tail
  arena.release(a);
  EXPECT_EQ(arena.stats().free_ranges, 2U);
  arena.release(b);
  EXPECT_EQ(arena.stats().free_ranges, 1U);
  EXPECT_EQ(arena.stats().largest_free_bytes, kMiB);
}

TEST(SimArena, AlignsEveryAllocation) {
  SimArena arena(16 * kMiB);
  std::vector<std::byte*> blocks;
  for (std::size_t bytes : {1, 3, 63, 64, 65, 100, 127, 129, 1000, 4095, 4097, 12345}) {
    std::byte* p = arena.allocate(bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kAlignment, 0U) << bytes;
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(arena.open(p)) % kAlignment, 0U) << bytes;
    EXPECT_GE(arena.allocation_size(p), bytes);
    blocks.push_back(p);
  }
  for (std::byte* p : blocks) arena.release(p);
}

TEST(SimArena, ReadWriteViewHoldsWhatWasWritten) {
  SimArena arena(4 * kMiB);
  const std::size_t n = 100000;
  auto* a = reinterpret_cast<float*>(arena.allocate(n * sizeof(float)));
  auto* b = reinterpret_cast<float*>(arena.allocate(n * sizeof(float)));
  float* rw_a = arena.open(a);
  float* rw_b = arena.open(b);
  EXPECT_NE(static_cast<void*>(rw_a), static_cast<void*>(a));
  EXPECT_FALSE(arena.contains(rw_a));
  EXPECT_EQ(rw_b - rw_a, b - a);  // one constant offset: the layout is the same
  EXPECT_EQ(arena.open(a + 123), rw_a + 123);
  for (std::size_t i = 0; i < n; ++i) {
    rw_a[i] = static_cast<float>(i) * 0.5F;
    rw_b[i] = -static_cast<float>(i);
  }
  const float* const_a = arena.open(static_cast<const float*>(a));  // const stays const
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(const_a[i], static_cast<float>(i) * 0.5F) << i;
    ASSERT_EQ(arena.open(b)[i], -static_cast<float>(i)) << i;
  }
  arena.release(reinterpret_cast<std::byte*>(a));
  arena.release(reinterpret_cast<std::byte*>(b));
}

TEST(SimArena, NeverWrittenMemoryReadsZero) {
  SimArena arena(4 * kMiB);
  std::byte* p = arena.allocate(kMiB);
  const std::byte* rw = arena.open(p);
  for (std::size_t i = 0; i < kMiB; i += 4096) ASSERT_EQ(rw[i], std::byte{0}) << i;
  arena.release(p);
}

TEST(SimArena, OpenChecksItsArgument) {
  SimArena arena(kMiB);
  std::byte* p = arena.allocate(256);
  EXPECT_EQ(arena.open(static_cast<int*>(nullptr)), nullptr);
  // The end of the guard view is an end pointer: allowed, as p + size is.
  const auto* last = arena.allocate(kMiB - 256);
  EXPECT_EQ(arena.open(last + (kMiB - 256)), arena.open(last) + (kMiB - 256));
  EXPECT_FALSE(arena.contains(last + (kMiB - 256)));
  arena.release(const_cast<std::byte*>(last));

  // A read-write address opened again.
  try {
    arena.open(arena.open(p));
    ADD_FAILURE() << "open() took a read-write address";
  } catch (const std::logic_error& error) {
    EXPECT_NE(std::string(error.what()).find("opened twice"), std::string::npos) << error.what();
  }
  // A host address: the message names it.
  int local = 0;
  EXPECT_FALSE(arena.contains(&local));
  try {
    arena.open(&local);
    ADD_FAILURE() << "open() took a host address";
  } catch (const std::logic_error& error) {
    char text[32];
    std::snprintf(text, sizeof text, "%p", static_cast<void*>(&local));
    EXPECT_NE(std::string(error.what()).find(text), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("not sim device memory"), std::string::npos);
  }
  EXPECT_THROW(arena.allocation_size(p + 64), std::logic_error);  // not the start
  EXPECT_THROW(arena.allocation_size(&local), std::logic_error);
  arena.release(p);
}

TEST(SimArena, ExhaustionThrowsBadAlloc) {
  SimArena arena(kMiB);
  EXPECT_THROW(arena.allocate(kMiB + 1), std::bad_alloc);
  EXPECT_THROW(arena.allocate(std::numeric_limits<std::size_t>::max()), std::bad_alloc);
  std::byte* all = arena.allocate(kMiB);
  try {
    arena.allocate(64);
    ADD_FAILURE() << "allocate() succeeded in a full arena";
  } catch (const std::bad_alloc& error) {
    // What to change is in the message.
    EXPECT_NE(std::string(error.what()).find(kMemoryEnv), std::string::npos) << error.what();
  }
  arena.release(all);
  EXPECT_NO_THROW(arena.release(arena.allocate(kMiB)));
  EXPECT_EQ(arena.stats().bytes_in_use, 0U);
}

TEST(SimArena, GivesFreedPagesBack) {
  SimArena arena(256 * kMiB);
  EXPECT_EQ(arena.stats().resident_bytes, 0U);  // a sparse file: nothing written yet
  std::byte* big = arena.allocate(64 * kMiB);
  std::memset(arena.open(big), 1, 64 * kMiB);
  EXPECT_GE(arena.stats().resident_bytes, 64 * kMiB);
  arena.release(big);
  EXPECT_EQ(arena.stats().resident_bytes, 0U);

  // Two small blocks share a page: it goes back once both are free.
  std::byte* a = arena.allocate(2048);
  std::byte* b = arena.allocate(2048);
  std::memset(arena.open(a), 1, 2048);
  std::memset(arena.open(b), 1, 2048);
  const std::size_t resident = arena.stats().resident_bytes;
  EXPECT_GT(resident, 0U);
  arena.release(a);
  EXPECT_EQ(arena.stats().resident_bytes, resident);  // b still uses the page
  arena.release(b);
  EXPECT_EQ(arena.stats().resident_bytes, 0U);

  // Memory given back reads zero when allocated again.
  big = arena.allocate(64 * kMiB);
  EXPECT_EQ(arena.open(big)[12345], std::byte{0});
  arena.release(big);
}

TEST(SimArena, ThreadsAllocateAndReleaseConcurrently) {
  SimArena arena(256 * kMiB);
  constexpr int kThreads = 8;
  constexpr int kRounds = 1500;
  std::vector<std::thread> threads;
  std::vector<std::string> failures(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&arena, &failures, t] {
      std::mt19937 random(static_cast<unsigned>(t));
      std::uniform_int_distribution<std::size_t> size(0, 20000);
      struct Block {
        std::byte* data;
        std::size_t bytes;
        unsigned char mark;
      };
      std::vector<Block> held;
      for (int round = 0; round < kRounds; ++round) {
        if (held.size() < 16 && (held.empty() || random() % 2 == 0)) {
          const std::size_t bytes = size(random);
          const auto mark = static_cast<unsigned char>(t * 31 + round);
          std::byte* p = arena.allocate(bytes);
          std::memset(arena.open(p), mark, bytes);
          held.push_back({p, bytes, mark});
        } else {
          const std::size_t i = random() % held.size();
          const Block block = held[i];
          const unsigned char* rw = arena.open(reinterpret_cast<unsigned char*>(block.data));
          // Another thread's block overlapping this one would have overwritten it.
          for (std::size_t k = 0; k < block.bytes; ++k) {
            if (rw[k] != block.mark) {
              failures[t] = "thread " + std::to_string(t) + ": block overwritten";
              return;
            }
          }
          arena.release(block.data);
          held[i] = held.back();
          held.pop_back();
        }
      }
      for (const Block& block : held) arena.release(block.data);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::string& failure : failures) EXPECT_EQ(failure, "");
  const SimArenaStats stats = arena.stats();
  EXPECT_EQ(stats.bytes_in_use, 0U);
  EXPECT_EQ(stats.allocations, 0U);
  EXPECT_EQ(stats.free_ranges, 1U);
  EXPECT_EQ(stats.largest_free_bytes, arena.capacity());
  EXPECT_EQ(stats.resident_bytes, 0U);
}

TEST(SimArena, RejectsBadCapacities) {
  EXPECT_THROW(SimArena(0), std::invalid_argument);
  EXPECT_THROW(SimArena((SimArena::kMaxCapacityGb + 1) * kGiB), std::invalid_argument);
  SimArena arena(1000);  // rounded up to a page
  EXPECT_GE(arena.capacity(), 1000U);
  EXPECT_EQ(arena.capacity() % 4096, 0U);
}

TEST(SimArena, ReadsItsSizeFromTheEnvironment) {
  {
    ScopedEnv env(kMemoryEnv, std::nullopt);
    EXPECT_EQ(SimArena::configured_capacity(), std::nullopt);
  }
  {
    ScopedEnv env(kMemoryEnv, "");
    EXPECT_EQ(SimArena::configured_capacity(), std::nullopt);
  }
  {
    ScopedEnv env(kMemoryEnv, "2");
    EXPECT_EQ(SimArena::configured_capacity(), 2 * kGiB);
  }
  for (const char* bad :
       {"0", "-1", "1.5", "4 ", " 4", "4GB", "abc", "40000", "99999999999999999999999"}) {
    ScopedEnv env(kMemoryEnv, bad);
    try {
      SimArena::configured_capacity();
      ADD_FAILURE() << "accepted " << kMemoryEnv << "='" << bad << "'";
    } catch (const std::invalid_argument& error) {
      const std::string expected = std::string(kMemoryEnv) + "='" + bad + "': expected a whole";
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
  }
}

TEST(SimArena, InstanceIsOneArenaForTheProcess) {
  SimArena* seen[4] = {};
  std::vector<std::thread> threads;
  for (auto& slot : seen) threads.emplace_back([&slot] { slot = &SimArena::instance(); });
  for (std::thread& thread : threads) thread.join();
  for (SimArena* arena : seen) EXPECT_EQ(arena, &SimArena::instance());

  SimArena& arena = SimArena::instance();
  if (const auto configured = SimArena::configured_capacity()) {
    EXPECT_EQ(arena.capacity(), *configured);
  } else {
    EXPECT_GE(arena.capacity(), kGiB);
    EXPECT_LE(arena.capacity(), kDefaultCapacity);
  }
  std::byte* p = arena.allocate(4096);
  arena.open(p)[4095] = std::byte{7};
  EXPECT_EQ(arena.open(p)[4095], std::byte{7});
  arena.release(p);
}

// Death tests: the child process reads or writes a guard address.

// Touches `guarded` from host code, as a bug in rig would.
void touch_from_host(std::byte* guarded, bool write) {
  sim_test::let_the_fault_kill();
  volatile std::byte* p = guarded;  // volatile: the access is not optimised away
  if (write) {
    *p = std::byte{1};
  } else {
    static_cast<void>(*p);
  }
}

using sim_test::died_of_the_fault;

class SimArenaDeathTest : public testing::Test {
 protected:
  // "threadsafe": the child re-executes this binary and runs only this test, so
  // it is safe with the threads the other tests started.
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(SimArenaDeathTest, HostReadOfDeviceMemoryFaults) {
  SimArena arena(kMiB);
  std::byte* p = arena.allocate(256);
  arena.open(p)[0] = std::byte{42};  // the memory is there and holds data
  EXPECT_EXIT(touch_from_host(p, false), died_of_the_fault, "");
  EXPECT_EXIT(touch_from_host(p + 200, false), died_of_the_fault, "");
  EXPECT_EQ(arena.open(p)[0], std::byte{42});
  arena.release(p);
}

TEST_F(SimArenaDeathTest, HostWriteToDeviceMemoryFaults) {
  SimArena& arena = SimArena::instance();
  std::byte* p = arena.allocate(256);
  EXPECT_EXIT(touch_from_host(p, true), died_of_the_fault, "");
  arena.release(p);
}

TEST_F(SimArenaDeathTest, KernelRunningOffTheReadWriteViewFaults) {
  SimArena arena(kMiB);
  std::byte* p = arena.allocate(kMiB);
  std::byte* rw = arena.open(p);
  EXPECT_EXIT(touch_from_host(rw + kMiB, false), died_of_the_fault, "");
  EXPECT_EXIT(touch_from_host(rw - 1, false), died_of_the_fault, "");
  arena.release(p);
}

TEST_F(SimArenaDeathTest, BadReleaseAborts) {
  SimArena arena(kMiB);
  std::byte* p = arena.allocate(256);
  EXPECT_DEATH(arena.release(p + 64), "not the start of a live allocation");
  EXPECT_DEATH(arena.release(arena.open(p)), "a read-write address from open\\(\\)");
  int local = 0;
  EXPECT_DEATH(arena.release(reinterpret_cast<std::byte*>(&local)), "not an address of this");
  arena.release(p);
  EXPECT_DEATH(arena.release(p), "released twice");
}

}  // namespace
}  // namespace rig::sim
