#include "cpu/compare.hpp"

#include <algorithm>
#include <stdexcept>

#include "cpu/parallel.hpp"

namespace rig::cpu {

namespace {

// out[i] = pred(a[i], b[i]) over a plan with operands 0: out (u8), 1: a, 2: b.
template <class T, class Pred>
void compare_typed(const StridedPlan<3>& plan, const T* a, const T* b, std::uint8_t* out,
                   Pred pred) {
  const std::int64_t inner = plan.inner();
  const std::int64_t so = plan.inner_stride(0);
  const std::int64_t sa = plan.inner_stride(1);
  const std::int64_t sb = plan.inner_stride(2);
  const std::int64_t grain = std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(1, inner));
  parallel_for(plan.outer(), grain, [&](std::int64_t begin, std::int64_t end) {
    for_each_row(plan, begin, end, [&](const std::array<std::int64_t, 3>& off) {
      const T* pa = a + off[1];
      const T* pb = b + off[2];
      std::uint8_t* po = out + off[0];
      for (std::int64_t i = 0; i < inner; ++i) po[i * so] = pred(pa[i * sa], pb[i * sb]) ? 1 : 0;
    });
  });
}

template <class Pred>
void compare_dtype(DType dtype, const StridedPlan<3>& plan, const void* a, const void* b,
                   std::uint8_t* out, Pred pred) {
  switch (dtype) {
    case DType::f32:
      return compare_typed(plan, static_cast<const float*>(a), static_cast<const float*>(b), out,
                           pred);
    case DType::i32:
      return compare_typed(plan, static_cast<const std::int32_t*>(a),
                           static_cast<const std::int32_t*>(b), out, pred);
    case DType::i64:
      return compare_typed(plan, static_cast<const std::int64_t*>(a),
                           static_cast<const std::int64_t*>(b), out, pred);
    case DType::u8:
      return compare_typed(plan, static_cast<const std::uint8_t*>(a),
                           static_cast<const std::uint8_t*>(b), out, pred);
    case DType::f16:
    case DType::bf16:
      break;
  }
  throw std::logic_error("compare: unexpected dtype");
}

}  // namespace

void compare(backend::Compare op, const StridedPlan<3>& plan, DType dtype, const void* a,
             const void* b, double scalar, std::uint8_t* out) {
  if (op == backend::Compare::equal) {
    compare_dtype(dtype, plan, a, b, out, [](auto x, auto y) { return x == y; });
  } else if (op == backend::Compare::less) {
    compare_dtype(dtype, plan, a, b, out, [](auto x, auto y) { return x < y; });
  } else {
    // b is not read: the plan's operand 2 has stride 0 over a itself.
    compare_dtype(dtype, plan, a, a, out,
                  [scalar](auto x, auto) { return static_cast<double>(x) != scalar; });
  }
}

}  // namespace rig::cpu
