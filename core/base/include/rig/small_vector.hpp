// SmallVector<T, N>: a std::vector-like sequence that keeps up to N elements
// inside the object and moves to the heap only beyond that. Shapes, strides,
// axis lists and autograd's tensor lists are small, so ops that make them do
// not touch the heap. It offers the subset of std::vector that rig and its
// plugins use, and converts to and from std::vector<T>.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

namespace rig {

template <class T, std::size_t N>
class SmallVector {
  static_assert(N > 0, "SmallVector needs an inline capacity");
  static_assert(N <= std::numeric_limits<std::uint32_t>::max());

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_type inline_capacity = N;

  SmallVector() noexcept = default;
  explicit SmallVector(size_type count) { resize(count); }
  SmallVector(size_type count, const T& value) { assign(count, value); }
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  // Implicit, so that code written for std::vector keeps compiling.
  SmallVector(const std::vector<T>& values) { assign(values.begin(), values.end()); }
  template <std::size_t M>
  explicit SmallVector(const SmallVector<T, M>& other) {
    assign(other.begin(), other.end());
  }

  SmallVector(const SmallVector& other) { assign(other.begin(), other.end()); }
  SmallVector(SmallVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    take(std::move(other));
  }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (this != &other) {
      clear();
      release_heap();
      take(std::move(other));
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~SmallVector() {
    clear();
    release_heap();
  }

  operator std::vector<T>() const { return std::vector<T>(begin(), end()); }
  std::vector<T> to_vector() const { return std::vector<T>(begin(), end()); }

  // ---- Size and capacity ----
  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  size_type max_size() const noexcept { return std::numeric_limits<std::uint32_t>::max(); }
  // True while the elements live inside the object (no heap memory held).
  bool is_inline() const noexcept { return data_ == inline_data(); }

  void reserve(size_type wanted) {
    if (wanted > capacity_) grow_to(wanted);
  }
  void shrink_to_fit() {
    if (is_inline() || size_ == capacity_) return;
    SmallVector copy(std::make_move_iterator(begin()), std::make_move_iterator(end()));
    *this = std::move(copy);
  }

  // ---- Element access ----
  T& operator[](size_type i) noexcept { return data_[i]; }
  const T& operator[](size_type i) const noexcept { return data_[i]; }
  T& at(size_type i) {
    check_index(i);
    return data_[i];
  }
  const T& at(size_type i) const {
    check_index(i);
    return data_[i];
  }
  T& front() noexcept { return data_[0]; }
  const T& front() const noexcept { return data_[0]; }
  T& back() noexcept { return data_[size_ - 1]; }
  const T& back() const noexcept { return data_[size_ - 1]; }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }

  // ---- Iterators ----
  iterator begin() noexcept { return data_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator cbegin() const noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator crbegin() const noexcept { return rbegin(); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  const_reverse_iterator crend() const noexcept { return rend(); }

  // ---- Modifiers ----
  void clear() noexcept {
    std::destroy(begin(), end());
    size_ = 0;
  }

  void assign(size_type count, const T& value) {
    if (count > capacity_) {
      SmallVector fresh;
      fresh.grow_to(count);
      std::uninitialized_fill_n(fresh.data_, count, value);
      fresh.size_ = static_cast<std::uint32_t>(count);
      *this = std::move(fresh);
      return;
    }
    const T copy = value;  // `value` may be an element of this vector
    clear();
    std::uninitialized_fill_n(data_, count, copy);
    size_ = static_cast<std::uint32_t>(count);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::forward_iterator<It>) {
      const auto count = static_cast<size_type>(std::distance(first, last));
      reserve(count);
      std::uninitialized_copy(first, last, data_);
      size_ = static_cast<std::uint32_t>(count);
    } else {
      for (; first != last; ++first) emplace_back(*first);
    }
  }
  void assign(std::initializer_list<T> values) { assign(values.begin(), values.end()); }

  void push_back(const T& value) { emplace_back(value); }
  void push_back(T&& value) { emplace_back(std::move(value)); }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    if (size_ == capacity_) {
      // `args` may refer into this vector: build the element before moving the others.
      T element(std::forward<Args>(args)...);
      grow_to(next_capacity(size_ + 1));
      std::construct_at(data_ + size_, std::move(element));
    } else {
      std::construct_at(data_ + size_, std::forward<Args>(args)...);
    }
    return data_[size_++];
  }
  void pop_back() noexcept {
    --size_;
    std::destroy_at(data_ + size_);
  }

  void resize(size_type count) { resize_impl(count, nullptr); }
  void resize(size_type count, const T& value) { resize_impl(count, &value); }

  iterator insert(const_iterator pos, const T& value) { return emplace(pos, value); }
  iterator insert(const_iterator pos, T&& value) { return emplace(pos, std::move(value)); }
  iterator insert(const_iterator pos, size_type count, const T& value) {
    const SmallVector values(count, value);  // `value` may be an element of this vector
    return insert(pos, values.begin(), values.end());
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    const auto index = static_cast<size_type>(pos - cbegin());
    const size_type old_size = size_;
    if constexpr (std::forward_iterator<It>) {
      const SmallVector values(first, last);  // the range may alias this vector
      reserve(size_ + values.size());
      for (const T& v : values) std::construct_at(data_ + size_++, v);
    } else {
      for (; first != last; ++first) emplace_back(*first);
    }
    std::rotate(begin() + index, begin() + old_size, end());
    return begin() + index;
  }
  iterator insert(const_iterator pos, std::initializer_list<T> values) {
    return insert(pos, values.begin(), values.end());
  }
  template <class... Args>
  iterator emplace(const_iterator pos, Args&&... args) {
    const auto index = static_cast<size_type>(pos - cbegin());
    emplace_back(std::forward<Args>(args)...);
    std::rotate(begin() + index, end() - 1, end());
    return begin() + index;
  }

  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto index = static_cast<size_type>(first - cbegin());
    const auto count = static_cast<size_type>(last - first);
    if (count == 0) return begin() + index;
    std::move(begin() + index + count, end(), begin() + index);
    std::destroy(end() - count, end());
    size_ -= static_cast<std::uint32_t>(count);
    return begin() + index;
  }

  void swap(SmallVector& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    SmallVector tmp(std::move(other));
    other = std::move(*this);
    *this = std::move(tmp);
  }
  friend void swap(SmallVector& a, SmallVector& b) noexcept(noexcept(a.swap(b))) { a.swap(b); }

  // ---- Comparison (also against std::vector, which converts) ----
  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend auto operator<=>(const SmallVector& a,
                          const SmallVector& b) requires std::three_way_comparable<T> {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  T* inline_data() noexcept { return reinterpret_cast<T*>(inline_); }
  const T* inline_data() const noexcept { return reinterpret_cast<const T*>(inline_); }

  void check_index(size_type i) const {
    if (i >= size_) throw std::out_of_range("SmallVector::at: index out of range");
  }

  size_type next_capacity(size_type wanted) const {
    return std::max<size_type>(wanted, 2 * static_cast<size_type>(capacity_));
  }

  // Moves the elements into heap storage of `wanted` (> capacity_) elements.
  void grow_to(size_type wanted) {
    if (wanted > max_size()) throw std::length_error("SmallVector: too many elements");
    std::allocator<T> alloc;
    T* fresh = alloc.allocate(wanted);
    if constexpr (std::is_nothrow_move_constructible_v<T> || !std::is_copy_constructible_v<T>) {
      std::uninitialized_move(begin(), end(), fresh);
    } else {
      try {
        std::uninitialized_copy(begin(), end(), fresh);
      } catch (...) {
        alloc.deallocate(fresh, wanted);
        throw;
      }
    }
    std::destroy(begin(), end());
    release_heap();
    data_ = fresh;
    capacity_ = static_cast<std::uint32_t>(wanted);
  }

  // Frees heap storage (the elements must already be destroyed).
  void release_heap() noexcept {
    if (!is_inline()) std::allocator<T>().deallocate(data_, capacity_);
    data_ = inline_data();
    capacity_ = N;
  }

  // Takes other's elements; *this must be empty and inline.
  void take(SmallVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    if (other.is_inline()) {
      std::uninitialized_move(other.begin(), other.end(), data_);
      size_ = other.size_;
      other.clear();
    } else {
      data_ = other.data_;
      size_ = other.size_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_data();
      other.size_ = 0;
      other.capacity_ = N;
    }
  }

  void resize_impl(size_type count, const T* value) {
    if (count < size_) {
      std::destroy(begin() + count, end());
      size_ = static_cast<std::uint32_t>(count);
      return;
    }
    if (count > capacity_) {
      if (value != nullptr) {
        const T copy = *value;  // `value` may be an element of this vector
        grow_to(count);
        std::uninitialized_fill(end(), begin() + count, copy);
        size_ = static_cast<std::uint32_t>(count);
        return;
      }
      grow_to(count);
    }
    if (value != nullptr) {
      std::uninitialized_fill(end(), begin() + count, *value);
    } else {
      std::uninitialized_value_construct(end(), begin() + count);
    }
    size_ = static_cast<std::uint32_t>(count);
  }

  T* data_ = inline_data();
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
  alignas(T) std::byte inline_[N * sizeof(T)];
};

}  // namespace rig
