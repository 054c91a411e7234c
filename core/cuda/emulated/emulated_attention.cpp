#include "cuda/emulated/emulated_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "backend/backend.hpp"
#include "rig/math/philox.hpp"

namespace rig::cuda {

namespace {

using backend::FusedAttention;
using backend::HeadStrides;

std::size_t count(const FusedAttention& a, std::int64_t time) {
  return static_cast<std::size_t>(a.b * a.h * time * a.d);
}

// A [B, H, time, D] operand packed densely.
HeadStrides dense(const FusedAttention& a, std::int64_t time) {
  return {a.h * time * a.d, time * a.d, a.d};
}

Strides strides_of(const HeadStrides& s) {
  return {s.batch, s.head, s.time, 1};
}

// The 16-bit operand at src (strided as `s`) as dense f32 values.
std::vector<float> widened(const FusedAttention& a, const void* src, const HeadStrides& s,
                           std::int64_t time) {
  std::vector<float> out(count(a, time));
  backend::cpu_backend().copy_strided({a.b, a.h, time, a.d}, out.data(), strides_of(dense(a, time)),
                                      DType::f32, src, strides_of(s), a.type);
  return out;
}

// Dense f32 values rounded once into the 16-bit operand at dst (strided as `s`).
void narrowed(const FusedAttention& a, const std::vector<float>& values, void* dst,
              const HeadStrides& s, std::int64_t time) {
  backend::cpu_backend().copy_strided({a.b, a.h, time, a.d}, dst, strides_of(s), a.type,
                                      values.data(), strides_of(dense(a, time)), DType::f32);
}

// The CPU attention's description of the call: the key lengths as a
// [B, 1, 1, Tk] keep-mask, and the dropout's keep-mask drawn from the seed.
struct Composed {
  backend::AttentionShape shape;
  std::vector<std::uint8_t> seen;  // [B, Tk]
  std::vector<std::uint8_t> kept;  // [B, H, Tq, Tk]
};

Composed composed(const FusedAttention& a) {
  Composed c;
  c.shape.b = a.b;
  c.shape.h = a.h;
  c.shape.tq = a.tq;
  c.shape.tk = a.tk;
  c.shape.d = a.d;
  c.shape.scale = a.scale;
  c.shape.causal = a.causal;
  if (a.key_lengths != nullptr) {
    c.seen.resize(static_cast<std::size_t>(a.b * a.tk));
    for (std::int64_t b = 0; b < a.b; ++b) {
      for (std::int64_t j = 0; j < a.tk; ++j) {
        c.seen[static_cast<std::size_t>(b * a.tk + j)] = j < a.key_lengths[b] ? 1 : 0;
      }
    }
    c.shape.mask = c.seen.data();
    c.shape.mask_strides = {a.tk, 0, 0, 1};
  }
  if (a.dropout_p > 0.0F) {
    const auto stream = math::PhiloxStream::of(a.dropout_seed, 0, 0, 0);
    const std::uint32_t threshold = math::dropout_threshold(a.dropout_p);
    c.kept.resize(static_cast<std::size_t>(a.b * a.h * a.tq * a.tk));
    for (std::size_t i = 0; i < c.kept.size(); i += 4) {
      const math::PhiloxBlock r = stream.block(i / 4);
      for (std::size_t k = 0; k < 4 && i + k < c.kept.size(); ++k) {
        c.kept[i + k] = math::dropout_keeps(r.v[k], threshold) ? 1 : 0;
      }
    }
    c.shape.keep = c.kept.data();
    c.shape.keep_scale = 1.0F / (1.0F - a.dropout_p);
  }
  return c;
}

// stats [B, H, Tq]: each row's max + log of its sum of exponentials over the
// keys it sees (-inf where it sees none), as cuDNN keeps them.
void write_stats(const FusedAttention& a, const std::vector<float>& q,
                 const std::vector<float>& k) {
  const HeadStrides qs = dense(a, a.tq), ks = dense(a, a.tk);
  std::vector<float> row(static_cast<std::size_t>(a.tk));
  for (std::int64_t b = 0; b < a.b; ++b) {
    const std::int64_t length = a.key_lengths != nullptr ? a.key_lengths[b] : a.tk;
    for (std::int64_t h = 0; h < a.h; ++h) {
      for (std::int64_t i = 0; i < a.tq; ++i) {
        const std::int64_t causal_end = a.causal ? i + (a.tk - a.tq) + 1 : a.tk;
        const std::int64_t end = std::clamp<std::int64_t>(std::min(length, causal_end), 0, a.tk);
        float max = -std::numeric_limits<float>::infinity();
        for (std::int64_t j = 0; j < end; ++j) {
          float dot = 0.0F;
          for (std::int64_t e = 0; e < a.d; ++e) {
            dot += q[static_cast<std::size_t>(b * qs.batch + h * qs.head + i * qs.time + e)] *
                   k[static_cast<std::size_t>(b * ks.batch + h * ks.head + j * ks.time + e)];
          }
          row[static_cast<std::size_t>(j)] = dot * a.scale;
          max = std::max(max, row[static_cast<std::size_t>(j)]);
        }
        double sum = 0.0;
        for (std::int64_t j = 0; j < end; ++j) {
          sum += std::exp(static_cast<double>(row[static_cast<std::size_t>(j)] - max));
        }
        a.stats[(b * a.h + h) * a.tq + i] =
            end == 0 ? max : max + static_cast<float>(std::log(sum));
      }
    }
  }
}

}  // namespace

bool emulated_attention_supported(const FusedAttention& a) {
  return (a.type == DType::bf16 || a.type == DType::f16) && a.b > 0 && a.h > 0 && a.tq > 0 &&
         a.tk > 0 && a.d > 0 && a.dropout_p >= 0.0F && a.dropout_p < 1.0F &&
         (!a.causal || a.tq == a.tk);
}

void emulated_attention_forward(const FusedAttention& a) {
  const Composed c = composed(a);
  const std::vector<float> q = widened(a, a.q, a.qs, a.tq);
  const std::vector<float> k = widened(a, a.k, a.ks, a.tk);
  const std::vector<float> v = widened(a, a.v, a.vs, a.tk);
  std::vector<float> out(count(a, a.tq));
  backend::cpu_backend().attention_forward(c.shape, q.data(), dense(a, a.tq), k.data(),
                                           dense(a, a.tk), v.data(), dense(a, a.tk), out.data(),
                                           dense(a, a.tq), nullptr);
  narrowed(a, out, a.out, a.os, a.tq);
  if (a.stats != nullptr) write_stats(a, q, k);
}

void emulated_attention_backward(const FusedAttention& a) {
  const Composed c = composed(a);
  const std::vector<float> q = widened(a, a.q, a.qs, a.tq);
  const std::vector<float> k = widened(a, a.k, a.ks, a.tk);
  const std::vector<float> v = widened(a, a.v, a.vs, a.tk);
  const std::vector<float> dout = widened(a, a.dout, a.os, a.tq);
  // The weights again, from q and k (cuDNN's backward recomputes them too).
  std::vector<float> out(count(a, a.tq));
  std::vector<float> probs(static_cast<std::size_t>(a.b * a.h * a.tq * a.tk));
  backend::Backend& cpu = backend::cpu_backend();
  cpu.attention_forward(c.shape, q.data(), dense(a, a.tq), k.data(), dense(a, a.tk), v.data(),
                        dense(a, a.tk), out.data(), dense(a, a.tq), probs.data());
  std::vector<float> dq(count(a, a.tq)), dk(count(a, a.tk)), dv(count(a, a.tk));
  cpu.attention_backward(c.shape, q.data(), dense(a, a.tq), k.data(), dense(a, a.tk), v.data(),
                         dense(a, a.tk), probs.data(), dout.data(), dense(a, a.tq), dq.data(),
                         dense(a, a.tq), dk.data(), dense(a, a.tk), dv.data(), dense(a, a.tk));
  narrowed(a, dq, a.dq, a.qs, a.tq);
  narrowed(a, dk, a.dk, a.ks, a.tk);
  narrowed(a, dv, a.dv, a.vs, a.tk);
}

}  // namespace rig::cuda
