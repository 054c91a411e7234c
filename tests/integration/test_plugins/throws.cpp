// A model whose constructor rejects its input.
#include <stdexcept>

#include "model_stub.hpp"
#include "rig/plugin.hpp"

class ThrowingModel : public UntrainableModel {
 public:
  ThrowingModel(const YAML::Node& params, const rig::ModelContext& ctx)
      : UntrainableModel(params, ctx) {
    throw std::runtime_error("vocabulary file /nonexistent/vocab.txt not found");
  }
};

RIG_PLUGIN(model, "throws", "0.0.1", "a model whose factory throws", ThrowingModel)
