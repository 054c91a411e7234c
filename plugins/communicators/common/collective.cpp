#include "collective.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "half_math.hpp"

namespace rig_mpi {
namespace {

// MPI counts are ints: larger buffers go in pieces of at most this many elements.
constexpr std::int64_t kMaxChunk = std::int64_t{1} << 30;

MPI_Datatype mpi_datatype(rig::DType dtype) {
  switch (dtype) {
    case rig::DType::f32:
      return MPI_FLOAT;
    case rig::DType::f16:
    case rig::DType::bf16:
      return MPI_UINT16_T;  // the bits; sums go through half_sum_op
    case rig::DType::i32:
      return MPI_INT32_T;
    case rig::DType::i64:
      return MPI_INT64_T;
    case rig::DType::u8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op sum_op(rig::DType dtype, const MpiResources& mpi) {
  if (dtype == rig::DType::f16) return mpi.f16_sum;
  if (dtype == rig::DType::bf16) return mpi.bf16_sum;
  return MPI_SUM;
}

template <class T>
void divide(std::byte* data, std::int64_t count, int n) {
  auto* values = reinterpret_cast<T*>(data);
  for (std::int64_t i = 0; i < count; ++i) values[i] = static_cast<T>(values[i] / n);
}

// The sum becomes the mean; integers truncate toward zero.
void divide_by(std::byte* data, std::int64_t count, rig::DType dtype, int n) {
  switch (dtype) {
    case rig::DType::f32:
      return divide<float>(data, count, n);
    case rig::DType::f16:
      return divide_f16(reinterpret_cast<std::uint16_t*>(data), count, static_cast<float>(n));
    case rig::DType::bf16:
      return divide_bf16(reinterpret_cast<std::uint16_t*>(data), count, static_cast<float>(n));
    case rig::DType::i32:
      return divide<std::int32_t>(data, count, n);
    case rig::DType::i64:
      return divide<std::int64_t>(data, count, n);
    case rig::DType::u8:
      return divide<std::uint8_t>(data, count, n);
  }
}

int run_allreduce(const Collective& op, const MpiResources& mpi) {
  const auto element = rig::dtype_size(op.dtype);
  for (std::int64_t done = 0; done < op.count; done += kMaxChunk) {
    const auto n = static_cast<int>(std::min(kMaxChunk, op.count - done));
    const int rc = MPI_Allreduce(MPI_IN_PLACE, op.buffer + done * element, n,
                                 mpi_datatype(op.dtype), sum_op(op.dtype, mpi), mpi.comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  if (op.reduce == rig::ReduceOp::average && mpi.size > 1) {
    divide_by(op.buffer, op.count, op.dtype, mpi.size);
  }
  return MPI_SUCCESS;
}

int run_broadcast(const Collective& op, const MpiResources& mpi) {
  const auto element = rig::dtype_size(op.dtype);
  for (std::int64_t done = 0; done < op.count; done += kMaxChunk) {
    const auto n = static_cast<int>(std::min(kMaxChunk, op.count - done));
    const int rc =
        MPI_Bcast(op.buffer + done * element, n, mpi_datatype(op.dtype), op.root, mpi.comm);
    if (rc != MPI_SUCCESS) return rc;
  }
  return MPI_SUCCESS;
}

// The issuing side has checked that count fits an int.
int run_allgather(const Collective& op, const MpiResources& mpi) {
  const auto type = mpi_datatype(op.dtype);
  const auto n = static_cast<int>(op.count);
  const void* send = op.input != nullptr ? static_cast<const void*>(op.input) : MPI_IN_PLACE;
  return MPI_Allgather(send, n, type, op.buffer, n, type, mpi.comm);
}

}  // namespace

int run_blocking(const Collective& op, const MpiResources& mpi) {
  switch (op.kind) {
    case CollectiveKind::allreduce:
      return run_allreduce(op, mpi);
    case CollectiveKind::broadcast:
      return run_broadcast(op, mpi);
    case CollectiveKind::allgather:
      return run_allgather(op, mpi);
    case CollectiveKind::barrier:
      return MPI_SUCCESS;
  }
  return MPI_SUCCESS;
}

std::string Collective::describe() const {
  const double bytes = static_cast<double>(count) * static_cast<double>(rig::dtype_size(dtype));
  const auto dtype_text = rig::dtype_name(dtype);
  switch (kind) {
    case CollectiveKind::allreduce:
      return fmt::format("allreduce #{} ({}) of {} {}", seq,
                         reduce == rig::ReduceOp::sum ? "sum" : "average", human_bytes(bytes),
                         dtype_text);
    case CollectiveKind::broadcast:
      return fmt::format("broadcast #{} from rank {} of {} {}", seq, root, human_bytes(bytes),
                         dtype_text);
    case CollectiveKind::allgather:
      return fmt::format("allgather #{} of {} {} per rank", seq, human_bytes(bytes), dtype_text);
    case CollectiveKind::barrier:
      return fmt::format("barrier #{}", seq);
  }
  return fmt::format("collective #{}", seq);
}

std::string human_bytes(double bytes) {
  if (bytes < 1000) return fmt::format("{:.0f} B", bytes);
  if (bytes < 1e6) return fmt::format("{:.1f} KB", bytes / 1e3);
  if (bytes < 1e9) return fmt::format("{:.1f} MB", bytes / 1e6);
  return fmt::format("{:.1f} GB", bytes / 1e9);
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    return fmt::format("MPI error {}", code);
  return std::string(text, static_cast<std::size_t>(length));
}

}  // namespace rig_mpi
