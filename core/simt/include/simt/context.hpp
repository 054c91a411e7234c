// How a kernel is written once for the GPU and for the host.
//
// A kernel is a struct holding its arguments (plain values and device
// pointers, copied to the GPU by value) with a call operator templated on the
// execution context:
//
//   struct ScaleRows {
//     const float* x; float* y; std::int64_t cols;
//     template <class Ctx> RIG_HD void operator()(Ctx& ctx) const {
//       const std::int64_t row = ctx.block_idx().x;
//       for (std::int64_t j = ctx.thread_rank(); j < cols; j += ctx.block_threads()) ...
//     }
//   };
//
// The body declares no __shared__ arrays and calls no CUDA intrinsics: it gets
// everything from the context. Two contexts implement the same members:
//   simt::EmulatedContext (simt/emulator.hpp): the host SIMT emulator, one
//     fiber per thread, used by the unit tests on machines without a GPU;
//   simt::CudaContext (core/cuda/runtime/cuda_context.cuh): the real thing.
//
// Members of a context `ctx` (all cheap, all const unless they synchronise):
//   Dim3 thread_idx(), block_idx(), block_dim(), grid_dim()
//   unsigned thread_rank()    linear index of the thread in its block (x fastest)
//   unsigned block_threads()  block_dim().count()
//   unsigned lane(), warp()   thread_rank() % 32, thread_rank() / 32
//   void sync()               barrier of the block: every thread of the block
//                             must reach the same sync() call
//   T shfl(T v, unsigned src_lane), shfl_xor(T v, unsigned lane_mask),
//   T shfl_down(T v, unsigned delta)
//                             whole-warp shuffles (mask 0xffffffff): every
//                             lane of the warp must call the same shuffle, so
//                             blocks are a multiple of 32 threads. shfl_down
//                             past lane 31 returns v. T: 4- or 8-byte
//                             arithmetic types.
//   T* shared<T>()            the launch's dynamic shared memory
//                             (LaunchShape::shared_bytes), 16-byte aligned;
//                             its contents are undefined at block start
//   std::size_t shared_bytes()
//   T* reduce_scratch<T>()    kReduceSlots slots of T (sizeof(T) <= 8) in
//                             shared memory, separate from shared<T>(), for
//                             the collectives of simt/collectives.hpp
//
// The collectives (warp and block sums and maxima) are written once over these
// members in simt/collectives.hpp, so the emulator and the GPU reduce in the
// same order and agree bit for bit.
#pragma once

#include "rig/hd.hpp"
#include "simt/launch_shape.hpp"
