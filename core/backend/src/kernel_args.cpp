#include "backend/kernel_args.hpp"

namespace rig::backend {

Unary unary_of(Activation activation) {
  switch (activation) {
    case Activation::relu:
      return Unary::relu;
    case Activation::gelu:
      return Unary::gelu;
    case Activation::tanh:
      return Unary::tanh;
    case Activation::sigmoid:
      return Unary::sigmoid;
    case Activation::none:
      break;
  }
  return Unary::mul_scalar;
}

}  // namespace rig::backend
