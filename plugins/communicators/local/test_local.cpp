// The local communicator plugin: one process, rank 0 of 1, whose collectives leave
// the buffers as they are.
#include <gtest/gtest.h>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

TEST(PluginLocal, OneRankCollectives) {
  rig_test::LoadedPlugin plugin("communicator", "local");
  auto comm = plugin.descriptor->make_communicator(plugin.params(), {"runs/x"});
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->local_rank(), 0);

  Tensor buffer = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  for (auto op : {rig::ReduceOp::sum, rig::ReduceOp::average}) {
    auto request = comm->allreduce(buffer, op);
    EXPECT_TRUE(request->done());
    request->wait();
    EXPECT_EQ(buffer.to_vector(), (std::vector<float>{1, 2, 3}));
  }
  comm->broadcast(buffer, 0)->wait();
  EXPECT_EQ(buffer.to_vector(), (std::vector<float>{1, 2, 3}));

  Tensor gathered = Tensor::zeros({1, 3});
  comm->allgather(buffer, gathered)->wait();
  EXPECT_EQ(gathered.to_vector(), (std::vector<float>{1, 2, 3}));
  comm->barrier();

  EXPECT_TRUE(rig_test::contains(rig_test::error_of([&] { comm->broadcast(buffer, 1); }),
                                 "root 1 is not a rank"));
  EXPECT_TRUE(rig_test::contains(rig_test::error_of([&] {
                                   comm->allgather(buffer, Tensor::zeros({2, 3}));
                                 }),
                                 "output f32 [2,3] must hold size() x input = 1 x 3 f32 elements"));
  EXPECT_THROW(comm->allgather(buffer, Tensor::zeros({3}, rig::DType::i32)), std::invalid_argument);
  EXPECT_THROW(comm->allreduce(Tensor(), rig::ReduceOp::sum), std::invalid_argument);
  EXPECT_EQ(rig_test::error_of<rig::RunError>([&] { comm->abort("rank 0 ran out of data", 2); }),
            "rank 0 ran out of data");
}

}  // namespace
