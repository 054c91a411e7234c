#pragma once
// Where a kernel reached a barrier or a shuffle: the emulator compares the
// sites of a block's threads to report divergence by file, line and column.
//
// std::source_location where the standard library provides it. Clang 14 with
// libstdc++ 12 (the sanitizer build's compiler) lacks the builtin that
// libstdc++'s <source_location> needs, so there CallSite is the same interface
// over the compiler's __builtin_FILE / LINE / COLUMN / FUNCTION.

#include <version>

#if defined(__cpp_lib_source_location)
#include <source_location>
#endif

namespace rig::simt {

#if defined(__cpp_lib_source_location)
using CallSite = std::source_location;
#else
class CallSite {
 public:
  static constexpr CallSite current(const char* file = __builtin_FILE(),
                                    const char* function = __builtin_FUNCTION(),
                                    unsigned line = __builtin_LINE(),
                                    unsigned column = __builtin_COLUMN()) noexcept {
    CallSite site;
    site.file_ = file;
    site.function_ = function;
    site.line_ = line;
    site.column_ = column;
    return site;
  }
  constexpr CallSite() noexcept = default;
  constexpr const char* file_name() const noexcept { return file_; }
  constexpr const char* function_name() const noexcept { return function_; }
  constexpr unsigned line() const noexcept { return line_; }
  constexpr unsigned column() const noexcept { return column_; }

 private:
  const char* file_ = "";
  const char* function_ = "";
  unsigned line_ = 0;
  unsigned column_ = 0;
};
#endif

}  // namespace rig::simt
