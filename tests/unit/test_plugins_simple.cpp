// The fixed_lr policy, the local communicator, and every plugin's descriptor and schema.
#include <gtest/gtest.h>

#include "rig/error.hpp"
#include "test_plugins_util.hpp"
#include "test_tensor_util.hpp"

namespace {

using rig::Tensor;

TEST(PluginDescriptors, KindNameAndSchemaOfEveryPlugin) {
  const std::vector<std::pair<rig::PluginKind, std::string>> plugins{
      {rig::PluginKind::model, "mlp"},
      {rig::PluginKind::data_layer, "synthetic"},
      {rig::PluginKind::optimizer, "sgd"},
      {rig::PluginKind::lr_policy, "fixed_lr"},
      {rig::PluginKind::communicator, "local"}};
  for (const auto& [kind, name] : plugins) {
    SCOPED_TRACE(name);
    rig_test::LoadedPlugin plugin(std::string(rig::to_string(kind)), name);
    const auto& d = *plugin.descriptor;
    EXPECT_EQ(d.abi_version, rig::kPluginAbiVersion);
    EXPECT_EQ(d.kind, kind);
    EXPECT_EQ(std::string(d.name), name);
    EXPECT_FALSE(std::string(d.summary).empty());
    const int factories = (d.make_model != nullptr) + (d.make_data_layer != nullptr) +
                          (d.make_optimizer != nullptr) + (d.make_lr_policy != nullptr) +
                          (d.make_communicator != nullptr);
    EXPECT_EQ(factories, 1);
    const YAML::Node schema = plugin.schema();
    EXPECT_EQ(schema["type"].as<std::string>(), "object");
    EXPECT_FALSE(schema["additionalProperties"].as<bool>());
    ASSERT_TRUE(schema["properties"].IsMap());
    for (const auto& property : schema["properties"]) {
      SCOPED_TRACE(property.first.as<std::string>());
      EXPECT_TRUE(property.second["type"]) << "no type";
      EXPECT_TRUE(property.second["description"]) << "no description";
    }
    for (const auto& key : schema["required"]) {
      EXPECT_TRUE(schema["properties"][key.as<std::string>()]) << key.as<std::string>();
    }
  }
}

TEST(PluginFixedLr, SameRateAtEveryStep) {
  rig_test::LoadedPlugin plugin("lr_policy", "fixed_lr");
  auto policy = plugin.descriptor->make_lr_policy(plugin.params("{learning_rate: 0.25}"),
                                                  {.max_steps = 100, .steps_per_epoch = 10});
  for (std::int64_t step : {0, 1, 99, 100000}) EXPECT_EQ(policy->learning_rate(step), 0.25);
}

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
