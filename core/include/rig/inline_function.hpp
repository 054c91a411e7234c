// InlineFunction<R(Args...), Capacity>: a move-only std::function that keeps
// callables of up to Capacity bytes inside the object, so storing an
// autograd backward closure does not allocate. A larger (or over-aligned, or
// throwing-move) callable still works: it goes to the heap, and
// stored_inline() says so.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

namespace rig {

template <class Signature, std::size_t Capacity = 192>
class InlineFunction;

template <class R, class... Args, std::size_t Capacity>
class InlineFunction<R(Args...), Capacity> {
 public:
  static constexpr std::size_t capacity = Capacity;
  // Whether a callable of type F is stored without a heap allocation.
  template <class F>
  static constexpr bool fits_inline =
      sizeof(F) <= Capacity &&
      alignof(F) <= alignof(std::max_align_t) && std::is_nothrow_move_constructible_v<F>;

  InlineFunction() noexcept = default;
  InlineFunction(std::nullptr_t) noexcept {}
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, InlineFunction> &&
           !std::is_same_v<std::remove_cvref_t<F>, std::nullptr_t> &&
           std::is_invocable_r_v<R, std::decay_t<F>&, Args...>)
      InlineFunction(F&& f) {  // NOLINT: implicit, like std::function
    emplace<std::decay_t<F>>(std::forward<F>(f));
  }

  InlineFunction(InlineFunction&& other) noexcept { take(other); }
  InlineFunction& operator=(InlineFunction&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  InlineFunction& operator=(std::nullptr_t) noexcept {
    reset();
    return *this;
  }
  InlineFunction(const InlineFunction&) = delete;
  InlineFunction& operator=(const InlineFunction&) = delete;
  ~InlineFunction() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }
  bool stored_inline() const noexcept { return ops_ == nullptr || ops_->inline_storage; }

  // Like std::function: callable through a const reference.
  R operator()(Args... args) const {
    if (ops_ == nullptr) throw std::bad_function_call();
    return ops_->invoke(const_cast<std::byte*>(storage_), std::forward<Args>(args)...);
  }

  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

 private:
  struct Ops {
    R (*invoke)(std::byte* storage, Args&&... args);
    void (*move)(std::byte* from, std::byte* to) noexcept;  // move-constructs, destroys `from`
    void (*destroy)(std::byte* storage) noexcept;
    bool inline_storage;
  };

  template <class F>
  struct InlineOps {
    static F& get(std::byte* s) noexcept { return *std::launder(reinterpret_cast<F*>(s)); }
    static R invoke(std::byte* s, Args&&... args) {
      return std::invoke(get(s), std::forward<Args>(args)...);
    }
    static void move(std::byte* from, std::byte* to) noexcept {
      ::new (static_cast<void*>(to)) F(std::move(get(from)));
      get(from).~F();
    }
    static void destroy(std::byte* s) noexcept { get(s).~F(); }
    static constexpr Ops ops{&invoke, &move, &destroy, true};
  };

  // Too large for the buffer: the buffer holds a unique_ptr to the callable.
  template <class F>
  struct HeapOps {
    using Holder = std::unique_ptr<F>;
    static Holder& get(std::byte* s) noexcept {
      return *std::launder(reinterpret_cast<Holder*>(s));
    }
    static R invoke(std::byte* s, Args&&... args) {
      return std::invoke(*get(s), std::forward<Args>(args)...);
    }
    static void move(std::byte* from, std::byte* to) noexcept {
      ::new (static_cast<void*>(to)) Holder(std::move(get(from)));
      get(from).~Holder();
    }
    static void destroy(std::byte* s) noexcept { get(s).~Holder(); }
    static constexpr Ops ops{&invoke, &move, &destroy, false};
  };

  template <class F, class Arg>
  void emplace(Arg&& f) {
    if constexpr (fits_inline<F>) {
      ::new (static_cast<void*>(storage_)) F(std::forward<Arg>(f));
      ops_ = &InlineOps<F>::ops;
    } else {
      static_assert(sizeof(std::unique_ptr<F>) <= Capacity);
      ::new (static_cast<void*>(storage_))
          std::unique_ptr<F>(std::make_unique<F>(std::forward<Arg>(f)));
      ops_ = &HeapOps<F>::ops;
    }
  }

  void take(InlineFunction& other) noexcept {
    if (other.ops_ != nullptr) {
      other.ops_->move(other.storage_, storage_);
      ops_ = other.ops_;
      other.ops_ = nullptr;
    }
  }

  alignas(std::max_align_t) std::byte storage_[Capacity];
  const Ops* ops_ = nullptr;
};

}  // namespace rig
