// MPI reduction ops for f16 and bf16 (which MPI has no types for): each pair of
// elements is summed in f32 and rounded back to nearest even, the way rig's
// CPU ops compute on these storage types. The engine sends gradient buckets in
// f16 ("fp16 compression").
#pragma once

#include <mpi.h>

namespace rig_mpi {

// Both commutative; free them with MPI_Op_free before MPI_Finalize.
MPI_Op make_f16_sum_op();
MPI_Op make_bf16_sum_op();

}  // namespace rig_mpi
