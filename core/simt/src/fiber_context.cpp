#include "fiber_context.hpp"

#include <cstdint>

#if defined(__x86_64__)

// rig_simt_fiber_switch(void** save_sp, void* load_sp), System V x86-64: pushes
// the callee-saved registers and the SSE / x87 control words (8 bytes), saves
// the stack pointer into *save_sp, then does the reverse from load_sp and
// returns into the other fiber. The caller-saved registers are the compiler's
// to spill around the call, as around any call.
extern "C" void rig_simt_fiber_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl rig_simt_fiber_switch
  .hidden rig_simt_fiber_switch
  .type rig_simt_fiber_switch, @function
rig_simt_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size rig_simt_fiber_switch, .-rig_simt_fiber_switch
)");

namespace rig::simt::detail {

void FiberContext::prepare(std::byte* stack, std::size_t size, void (*entry)()) {
  // The frame rig_simt_fiber_switch pops, built at the top of the stack. Its
  // `ret` jumps to entry with the stack pointer 8 past a 16-byte boundary, as
  // after a call; entry's own return address is 0, where unwinders stop.
  const auto top = reinterpret_cast<std::uintptr_t>(stack + size) & ~std::uintptr_t{15};
  auto* slot = reinterpret_cast<std::uint64_t*>(top);
  *--slot = 0;                                        // entry's return address
  *--slot = reinterpret_cast<std::uintptr_t>(entry);  // where `ret` goes
  for (int reg = 0; reg < 6; ++reg) *--slot = 0;      // rbp (0 ends frame chains), rbx, r12-r15
  std::uint32_t mxcsr = 0;
  std::uint16_t x87_control = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(x87_control));
  *--slot = std::uint64_t{mxcsr} | (std::uint64_t{x87_control} << 32);
  sp_ = slot;
}

void FiberContext::switch_to(FiberContext& from, const FiberContext& to) {
  rig_simt_fiber_switch(&from.sp_, to.sp_);
}

}  // namespace rig::simt::detail

#else

namespace rig::simt::detail {

void FiberContext::prepare(std::byte* stack, std::size_t size, void (*entry)()) {
  getcontext(&uc_);
  uc_.uc_stack.ss_sp = stack;
  uc_.uc_stack.ss_size = size;
  uc_.uc_link = nullptr;
  makecontext(&uc_, entry, 0);
}

void FiberContext::switch_to(FiberContext& from, const FiberContext& to) {
  swapcontext(&from.uc_, &to.uc_);
}

}  // namespace rig::simt::detail

#endif
