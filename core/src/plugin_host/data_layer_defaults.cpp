// The optional DataLayer methods' defaults.
#include "rig/data_layer.hpp"
#include "rig/error.hpp"

namespace rig {

std::vector<std::string> DataLayer::decode_targets(const Batch& /*batch*/) const {
  return {};
}

Batch DataLayer::encode_lines(const std::vector<std::string>& /*lines*/) const {
  throw UserError(
      "this data layer does not support interactive_infer (it does not override "
      "DataLayer::encode_lines); use --mode infer with a data file instead");
}

}  // namespace rig
