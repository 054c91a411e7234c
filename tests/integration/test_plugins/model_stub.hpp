// A model that is never meant to train: the broken test plugins share it.
#pragma once

#include <stdexcept>

#include "rig/model.hpp"

class UntrainableModel : public rig::Model {
 public:
  UntrainableModel(const YAML::Node&, const rig::ModelContext&) {}
  rig::ModelOutput forward(const rig::Batch&, rig::Mode) override {
    throw std::logic_error("UntrainableModel cannot train");
  }
  rig::Tensor infer(const rig::Batch&) override {
    throw std::logic_error("UntrainableModel cannot infer");
  }
};
