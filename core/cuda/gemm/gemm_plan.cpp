#include "cuda/gemm/gemm_plan.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace rig::cuda {

std::size_t size_of(GemmType type) {
  return type == GemmType::f32 ? 4 : 2;
}

const char* name_of(GemmType type) {
  switch (type) {
    case GemmType::f32:
      return "f32";
    case GemmType::f16:
      return "f16";
    case GemmType::bf16:
      return "bf16";
  }
  return "?";
}

const char* name_of(LtEpilogue epilogue) {
  switch (epilogue) {
    case LtEpilogue::default_:
      return "DEFAULT";
    case LtEpilogue::relu:
      return "RELU";
    case LtEpilogue::relu_aux:
      return "RELU_AUX";
    case LtEpilogue::bias:
      return "BIAS";
    case LtEpilogue::relu_bias:
      return "RELU_BIAS";
    case LtEpilogue::relu_aux_bias:
      return "RELU_AUX_BIAS";
    case LtEpilogue::drelu:
      return "DRELU";
    case LtEpilogue::drelu_bgrad:
      return "DRELU_BGRAD";
    case LtEpilogue::gelu:
      return "GELU";
    case LtEpilogue::gelu_aux:
      return "GELU_AUX";
    case LtEpilogue::gelu_bias:
      return "GELU_BIAS";
    case LtEpilogue::gelu_aux_bias:
      return "GELU_AUX_BIAS";
    case LtEpilogue::dgelu:
      return "DGELU";
    case LtEpilogue::dgelu_bgrad:
      return "DGELU_BGRAD";
    case LtEpilogue::bgrada:
      return "BGRADA";
    case LtEpilogue::bgradb:
      return "BGRADB";
  }
  return "?";
}

std::int64_t LtPlan::aux_bytes() const {
  if (aux_role == AuxRole::none) return 0;
  if (n == 0) return 0;
  if (aux_role == AuxRole::write_relu_mask || aux_role == AuxRole::read_relu_mask) {
    return (aux_ld * n + 7) / 8;
  }
  return aux_ld * n * static_cast<std::int64_t>(size_of(aux_type));
}

std::string LtPlan::describe() const {
  std::ostringstream out;
  out << "cublasLtMatmul(A=rig " << (a_is == RigOperand::a ? 'A' : 'B') << " " << name_of(a.type)
      << (transa ? " T" : " N") << " " << a.rows << "x" << a.cols << " ld " << a.ld << ", B=rig "
      << (b_is == RigOperand::a ? 'A' : 'B') << " " << name_of(b.type) << (transb ? " T" : " N")
      << " " << b.rows << "x" << b.cols << " ld " << b.ld << ", D " << name_of(d.type) << " " << m
      << "x" << n << " ld " << d.ld << ", k " << k << ", compute "
      << (compute == GemmCompute::tf32 ? "32F_FAST_TF32" : "32F") << ", epilogue "
      << name_of(epilogue) << ", bias " << static_cast<int>(bias_role) << " " << name_of(bias_type)
      << " x" << bias_length << ", aux " << static_cast<int>(aux_role) << " " << name_of(aux_type)
      << " ld " << aux_ld << ", alpha " << alpha << ", beta " << beta << ", own "
      << static_cast<int>(own_work) << (own_writes_aux ? " aux" : "")
      << (own_bias_grad ? " bgrad" : "");
  // Only a batch adds to the line: single products keep their strings (and cache keys).
  if (a.batched() || b.batched() || c.batched() || d.batched()) {
    out << ", batch " << d.batch_count << " offsets A " << a.batch_offset << " B " << b.batch_offset
        << " C " << c.batch_offset << " D " << d.batch_offset;
  }
  out << ")";
  return out.str();
}

namespace {

[[noreturn]] void fail(const std::string& what) {
  throw std::invalid_argument("plan_gemm: " + what);
}

void check_ld(const char* name, std::int64_t ld, std::int64_t cols, const char* shape) {
  const std::int64_t needed = std::max<std::int64_t>(1, cols);
  if (ld < needed) {
    fail(std::string(name) + " = " + std::to_string(ld) + " is below " + std::to_string(needed) +
         ", the row length of the stored " + shape);
  }
}

void check_request(const GemmRequest& r) {
  if (r.m < 0 || r.n < 0 || r.k < 0) {
    fail("m, n, k = " + std::to_string(r.m) + ", " + std::to_string(r.n) + ", " +
         std::to_string(r.k) + ": expected sizes >= 0");
  }
  check_ld("lda", r.lda, r.trans_a ? r.m : r.k, r.trans_a ? "A [k, m]" : "A [m, k]");
  check_ld("ldb", r.ldb, r.trans_b ? r.k : r.n, r.trans_b ? "B [n, k]" : "B [k, n]");
  check_ld("ldc", r.ldc, r.n, "C [m, n]");
  if (r.a_type != r.b_type) {
    fail(std::string("a_type ") + name_of(r.a_type) + " differs from b_type " + name_of(r.b_type) +
         ": cuBLASLt multiplies operands of one type");
  }
  if (r.c_type != r.a_type && r.c_type != GemmType::f32) {
    fail(std::string("c_type ") + name_of(r.c_type) + " with " + name_of(r.a_type) +
         " operands: expected " + name_of(r.a_type) + " or f32");
  }
  const Epilogue& e = r.epilogue;
  const bool relu = e.activation == GemmActivation::relu;
  switch (e.kind) {
    case EpilogueKind::forward:
      if (e.aux && e.activation == GemmActivation::none) {
        fail("epilogue.aux without an activation: there is no pre-activation to save");
      }
      break;
    case EpilogueKind::backward:
      if (e.activation == GemmActivation::none) {
        fail("backward epilogue with activation none: expected relu, gelu_erf or gelu_tanh");
      }
      if (r.beta != 0.0F) {
        fail("backward epilogue with beta = " + std::to_string(r.beta) +
             ": expected 0 (the activation's derivative would scale the accumulated C)");
      }
      break;
    case EpilogueKind::bias_grad_a:
    case EpilogueKind::bias_grad_b:
      if (e.activation != GemmActivation::none || e.bias || e.aux) {
        fail("bias-gradient epilogue with an activation, bias or aux: expected none of them");
      }
      break;
  }
  const bool writes_bias_grad = e.kind == EpilogueKind::bias_grad_a ||
                                e.kind == EpilogueKind::bias_grad_b ||
                                (e.kind == EpilogueKind::backward && e.bias);
  if (writes_bias_grad && r.alpha != 1.0F) {
    fail("alpha = " + std::to_string(r.alpha) +
         " with a bias gradient: expected 1 (cuBLASLt does not document how alpha scales it)");
  }
  const bool uses_aux = e.aux || e.kind == EpilogueKind::backward;
  if (uses_aux) {
    const std::int64_t multiple = relu ? 128 : 8;
    if (e.aux_ld < std::max<std::int64_t>(1, r.n) || e.aux_ld % multiple != 0) {
      fail("epilogue.aux_ld = " + std::to_string(e.aux_ld) + ": expected a multiple of " +
           std::to_string(multiple) + (relu ? " bits" : " elements") +
           " and >= n = " + std::to_string(r.n));
    }
  }
}

// The batch of a request: counts and strides, C's batches apart, and the
// epilogues a batch can take.
void check_batch(const GemmRequest& r) {
  if (r.batch_count < 0 || r.batch_count > std::numeric_limits<std::int32_t>::max()) {
    fail("batch_count = " + std::to_string(r.batch_count) +
         ": expected 0 to 2147483647 (cuBLASLt's int32_t batch count)");
  }
  if (r.stride_a < 0 || r.stride_b < 0 || r.stride_c < 0) {
    fail("stride_a, stride_b, stride_c = " + std::to_string(r.stride_a) + ", " +
         std::to_string(r.stride_b) + ", " + std::to_string(r.stride_c) +
         ": expected strides >= 0 (0 repeats the matrix for every product)");
  }
  if (r.batch_count == 1) return;
  const Epilogue& e = r.epilogue;
  const bool plain = e.kind == EpilogueKind::forward && !e.bias && !e.aux &&
                     e.activation != GemmActivation::gelu_erf;
  if (!plain) {
    fail("batch_count = " + std::to_string(r.batch_count) +
         " with a bias, aux, bias-gradient or erf GELU epilogue: a batch takes none of them "
         "(expected a forward epilogue without bias or aux, activation none, relu or gelu_tanh)");
  }
  if (!strided_batches_apart(r.m, r.n, r.ldc, r.batch_count, r.stride_c)) {
    const std::int64_t s = r.stride_c;
    fail("stride_c = " + std::to_string(s) + " makes the " + std::to_string(r.batch_count) +
         " batches of C [" + std::to_string(r.m) + ", " + std::to_string(r.n) + "] with ldc " +
         std::to_string(r.ldc) +
         " overlap: expected >= (m - 1) * ldc + n = " + std::to_string((r.m - 1) * r.ldc + r.n) +
         " (one after another), or >= n with (batch_count - 1) * stride_c + n <= ldc (side by "
         "side in each row)");
  }
}

LtEpilogue forward_epilogue(const Epilogue& e, bool lt_gelu) {
  const bool relu = e.activation == GemmActivation::relu;
  if (relu) {
    if (e.aux) return e.bias ? LtEpilogue::relu_aux_bias : LtEpilogue::relu_aux;
    return e.bias ? LtEpilogue::relu_bias : LtEpilogue::relu;
  }
  if (lt_gelu) {
    if (e.aux) return e.bias ? LtEpilogue::gelu_aux_bias : LtEpilogue::gelu_aux;
    return e.bias ? LtEpilogue::gelu_bias : LtEpilogue::gelu;
  }
  return e.bias ? LtEpilogue::bias : LtEpilogue::default_;  // none, or the erf GELU done by rig
}

}  // namespace

bool strided_batches_apart(std::int64_t rows, std::int64_t cols, std::int64_t ld,
                           std::int64_t count, std::int64_t stride) {
  if (count < 2 || rows == 0 || cols == 0) return true;
  if (stride < cols || ld < cols) return false;
  // Batch b holds [b * stride + i * ld + j], i < rows, j < cols.
  const bool after = (stride - cols) / ld >= rows - 1;
  const bool side_by_side = count - 1 <= (ld - cols) / stride;
  return after || side_by_side;
}

LtPlan plan_gemm(const GemmRequest& r) {
  check_request(r);
  check_batch(r);
  LtPlan p;
  // C^T = op(B)^T op(A)^T: cuBLASLt's A is rig's B, its B is rig's A.
  p.a_is = RigOperand::b;
  p.b_is = RigOperand::a;
  p.transa = r.trans_b;
  p.transb = r.trans_a;
  p.m = r.n;
  p.n = r.m;
  p.k = r.k;
  p.a = {r.b_type, p.transa ? p.k : p.m, p.transa ? p.m : p.k, r.ldb};
  p.b = {r.a_type, p.transb ? p.n : p.k, p.transb ? p.k : p.n, r.lda};
  p.c = {r.c_type, p.m, p.n, r.ldc};
  p.d = p.c;
  if (r.batch_count != 1) {
    const auto count = static_cast<std::int32_t>(r.batch_count);
    p.a.batch_count = p.b.batch_count = p.c.batch_count = p.d.batch_count = count;
    p.a.batch_offset = r.stride_b;  // cuBLASLt's A is rig's B
    p.b.batch_offset = r.stride_a;
    p.c.batch_offset = p.d.batch_offset = r.stride_c;
  }
  p.compute = r.allow_tf32 && r.a_type == GemmType::f32 ? GemmCompute::tf32 : GemmCompute::f32;
  p.scale_type = GemmType::f32;
  p.alpha = r.alpha;
  p.beta = r.beta;
  p.bias_type = r.c_type;
  p.aux_type = r.c_type;

  const Epilogue& e = r.epilogue;
  const bool relu = e.activation == GemmActivation::relu;
  const bool erf = e.activation == GemmActivation::gelu_erf;
  const bool lt_gelu = e.activation == GemmActivation::gelu_tanh;
  switch (e.kind) {
    case EpilogueKind::forward:
      p.epilogue = forward_epilogue(e, lt_gelu);
      if (e.bias) {
        p.bias_role = BiasRole::bias;
        p.bias_length = p.m;
      }
      if (e.aux) {
        p.aux_ld = e.aux_ld;
        p.aux_role = relu ? AuxRole::write_relu_mask : AuxRole::write_gelu_input;
      }
      if (erf) {
        p.own_work = OwnWork::gelu_erf_forward;
        p.own_writes_aux = e.aux;
      }
      break;
    case EpilogueKind::backward:
      p.aux_ld = e.aux_ld;
      p.aux_role = relu ? AuxRole::read_relu_mask : AuxRole::read_gelu_input;
      if (e.bias) {
        p.bias_role = BiasRole::bias_grad;
        p.bias_length = p.m;
      }
      if (relu) {
        p.epilogue = e.bias ? LtEpilogue::drelu_bgrad : LtEpilogue::drelu;
      } else if (lt_gelu) {
        p.epilogue = e.bias ? LtEpilogue::dgelu_bgrad : LtEpilogue::dgelu;
      } else {
        // cuBLASLt's DGELU is the tanh form's derivative: the product only, then rig's kernel.
        p.epilogue = LtEpilogue::default_;
        p.own_work = OwnWork::gelu_erf_backward;
        p.own_bias_grad = e.bias;
      }
      break;
    case EpilogueKind::bias_grad_a:
      // rig's op(A) is cuBLASLt's B; its row sums over k are per column of D.
      p.epilogue = LtEpilogue::bgradb;
      p.bias_role = BiasRole::bias_grad;
      p.bias_length = p.n;
      break;
    case EpilogueKind::bias_grad_b:
      p.epilogue = LtEpilogue::bgrada;
      p.bias_role = BiasRole::bias_grad;
      p.bias_length = p.m;
      break;
  }
  return p;
}

}  // namespace rig::cuda
