// The emulator's fibers: a saved execution context and the switch between two.
//
// On x86-64 the switch is a few instructions (fiber_context.cpp): it saves
// the callee-saved registers, the SSE and x87 control words and the stack
// pointer, and loads the other fiber's. glibc's swapcontext also saves and
// restores the signal mask, a system call on every switch, which made that
// call most of an emulated run's time. Elsewhere ucontext remains.
//
// AddressSanitizer's fiber annotations (__sanitizer_start_switch_fiber) are
// the caller's, as they are around swapcontext.
#pragma once

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace rig::simt::detail {

class FiberContext {
 public:
  // Makes this the context of a new fiber on [stack, stack + size): the first
  // switch to it calls entry(), which must never return (it leaves by
  // switching away for good).
  void prepare(std::byte* stack, std::size_t size, void (*entry)());

  // Saves the running execution into `from` and resumes `to`; returns when
  // something switches back to `from`.
  static void switch_to(FiberContext& from, const FiberContext& to);

 private:
#if defined(__x86_64__)
  void* sp_ = nullptr;  // the saved stack pointer; the registers are on the stack
#else
  ucontext_t uc_{};
#endif
};

}  // namespace rig::simt::detail
