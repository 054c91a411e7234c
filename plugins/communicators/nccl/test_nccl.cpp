// The nccl communicator's parts that need no other rank: the fake CUDA
// driver's stream and event semantics (which the multi-rank tests under
// mpirun rely on: CMakeLists.txt), and the refusals, exit 2 with one clear
// message, before MPI is touched.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "fake_nccl.hpp"
#include "rig/error.hpp"
#include "test_plugins_util.hpp"

namespace {

using namespace rig_nccl;

TEST(FakeDriver, EventsOnItsStreamCompleteInOrderAndSynchronousStreamsAtOnce) {
  const DriverApi& cu = fake_driver();
  CUstream stream = nullptr;
  ASSERT_EQ(cu.stream_create(&stream, kStreamNonBlocking), kCudaSuccess);
  CUevent gate = nullptr;
  CUevent first = nullptr;
  CUevent second = nullptr;
  cu.event_create(&gate, 0);
  cu.event_create(&first, 0);
  cu.event_create(&second, 0);
  // The stream waits for `gate`, recorded later on a second fake stream that
  // is itself held up: nothing after the wait may complete before it.
  CUstream other = nullptr;
  cu.stream_create(&other, kStreamNonBlocking);
  CUevent hold = nullptr;
  cu.event_create(&hold, 0);
  cu.event_record(hold, other);
  cu.event_record(gate, other);
  cu.stream_wait_event(stream, gate, 0);
  cu.event_record(first, stream);
  cu.event_record(second, stream);
  cu.event_synchronize(second);
  EXPECT_EQ(cu.event_query(first), kCudaSuccess);
  float ms = -1;
  EXPECT_EQ(cu.event_elapsed_time(&ms, first, second), kCudaSuccess);
  EXPECT_GE(ms, 0.0F);
  // A wait captures the records made so far: re-recording the event on the
  // waiting stream afterwards must not deadlock it.
  cu.stream_wait_event(stream, first, 0);
  cu.event_record(first, stream);
  EXPECT_EQ(cu.stream_synchronize(stream), kCudaSuccess);
  // Any other stream (the emulated back end's) is synchronous.
  CUevent now = nullptr;
  cu.event_create(&now, 0);
  cu.event_record(now, nullptr);
  EXPECT_EQ(cu.event_query(now), kCudaSuccess);
  for (CUevent e : {gate, first, second, hold, now}) cu.event_destroy(e);
  EXPECT_EQ(cu.stream_destroy(stream), kCudaSuccess);
  EXPECT_EQ(cu.stream_destroy(other), kCudaSuccess);
}

TEST(FakeNccl, UniqueIdsAreRandomAndErrorsHaveNcclsText) {
  const NcclApi& nccl = fake_nccl();
  ncclUniqueId a{};
  ncclUniqueId b{};
  nccl.get_unique_id(&a);
  nccl.get_unique_id(&b);
  EXPECT_NE(std::string(a.internal, kUniqueIdBytes), std::string(b.internal, kUniqueIdBytes));
  EXPECT_EQ(std::string(nccl.get_error_string(ncclRemoteError)),
            "remote process exited or there was a network error");
  int version = 0;
  nccl.get_version(&version);
  EXPECT_EQ(nccl_version_text(version), "NCCL 2.20.0");
}

std::string refusal(const char* fake, const char* emulator, const char* library) {
  auto set = [](const char* name, const char* value) {
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  };
  set("RIG_NCCL_FAKE", fake);
  set("RIG_CUDA_EMULATOR", emulator);
  set("RIG_NCCL_LIBRARY", library);
  const rig_test::LoadedPlugin plugin("communicator", "nccl");
  YAML::Node params;
  params["timeout_s"] = 1.0;
  params["startup_timeout_s"] = 1.0;
  try {
    plugin.descriptor->make_communicator(params, rig::CommunicatorContext{});
  } catch (const rig::UserError& e) {
    return e.what();
  }
  return "(no refusal)";
}

TEST(NcclCommunicator, RefusesTheFakeWithoutTheEmulatorAndAMissingLibrary) {
  EXPECT_NE(refusal("1", nullptr, nullptr).find("works only with RIG_CUDA_EMULATOR=1"),
            std::string::npos);
  EXPECT_NE(refusal("yes", "1", nullptr).find("RIG_NCCL_FAKE='yes': set it to 1"),
            std::string::npos);
  EXPECT_NE(refusal(nullptr, "1", nullptr).find("set RIG_NCCL_FAKE=1"), std::string::npos);
  EXPECT_NE(refusal(nullptr, nullptr, "/nonexistent/libnccl.so.2")
                .find("cannot load RIG_NCCL_LIBRARY=/nonexistent/libnccl.so.2"),
            std::string::npos);
  unsetenv("RIG_NCCL_LIBRARY");
}

}  // namespace
