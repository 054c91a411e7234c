#include "half_sum_op.hpp"

#include <cstdint>

#include "half_math.hpp"

namespace rig_mpi {
namespace {

void sum_f16(void* in, void* inout, int* length, MPI_Datatype* /*type*/) {
  add_f16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), *length);
}

void sum_bf16(void* in, void* inout, int* length, MPI_Datatype* /*type*/) {
  add_bf16(static_cast<const std::uint16_t*>(in), static_cast<std::uint16_t*>(inout), *length);
}

MPI_Op make_op(MPI_User_function* function) {
  MPI_Op op = MPI_OP_NULL;
  MPI_Op_create(function, /*commute=*/1, &op);
  return op;
}

}  // namespace

MPI_Op make_f16_sum_op() {
  return make_op(&sum_f16);
}
MPI_Op make_bf16_sum_op() {
  return make_op(&sum_bf16);
}

}  // namespace rig_mpi
