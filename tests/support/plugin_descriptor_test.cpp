// Part of every in-tree plugin's test: the plugin's descriptor and schema as
// rig expects them. Compiled once (the object library
// rig_plugin_descriptor_test); which plugin it checks is tested_plugin.hpp's.
#include <gtest/gtest.h>

#include <string>

#include "test_plugins_util.hpp"
#include "tested_plugin.hpp"

namespace {

TEST(PluginDescriptor, KindNameFactoryAndSchema) {
  const std::string kind = rig_test::kTestedPluginKind;
  const std::string name = rig_test::kTestedPluginName;
  const rig_test::LoadedPlugin plugin(kind, name);
  const rig::PluginDescriptor& d = *plugin.descriptor;
  EXPECT_EQ(d.abi_version, rig::kPluginAbiVersion);
  EXPECT_EQ(rig::to_string(d.kind), kind);
  EXPECT_EQ(std::string(d.name), name);
  EXPECT_FALSE(std::string(d.summary).empty());
  const int factories = (d.make_model != nullptr) + (d.make_data_layer != nullptr) +
                        (d.make_optimizer != nullptr) + (d.make_lr_policy != nullptr) +
                        (d.make_communicator != nullptr);
  EXPECT_EQ(factories, 1);
  // An object without other keys, every property typed and described.
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

}  // namespace
