// Built with RIG_PLUGIN_ABI_VERSION=999: the host must refuse it.
#include "model_stub.hpp"
#include "rig/plugin.hpp"

RIG_PLUGIN(model, "wrong_abi", "0.0.1", "a model built for another ABI", UntrainableModel)
