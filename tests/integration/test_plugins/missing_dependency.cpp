// A plugin whose own shared-library dependency is missing at run time: rig
// must name that library (the dynamic loader's reason), not just fail.
#include "model_stub.hpp"
#include "rig/plugin.hpp"

extern "C" int rig_test_unreachable_value();

class NeedsUnreachableLibrary : public UntrainableModel {
 public:
  NeedsUnreachableLibrary(const YAML::Node& params, const rig::ModelContext& ctx)
      : UntrainableModel(params, ctx), value_(rig_test_unreachable_value()) {}

 private:
  int value_;
};

RIG_PLUGIN(model, "missing_dependency", "0.0.1", "a model whose library dependency is missing",
           NeedsUnreachableLibrary)
