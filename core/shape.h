// Shape and strides: a small fixed-capacity vector of int64 (no heap allocation per op).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace seqgrad {

inline constexpr int kMaxDims = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(std::span<const int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit Shape(const std::vector<int64_t>& dims) { assign(dims.begin(), dims.end()); }

  int size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t& operator[](int i) { return d_[i]; }
  int64_t operator[](int i) const { return d_[i]; }
  int64_t* begin() { return d_.data(); }
  int64_t* end() { return d_.data() + n_; }
  const int64_t* begin() const { return d_.data(); }
  const int64_t* end() const { return d_.data() + n_; }
  int64_t back() const { return d_[n_ - 1]; }

  void push_back(int64_t v) {
    SG_CHECK_SHAPE(n_ < kMaxDims, "shape: at most {} dimensions are supported", kMaxDims);
    d_[n_++] = v;
  }
  void insert(int pos, int64_t v) {
    push_back(0);
    for (int i = n_ - 1; i > pos; --i) d_[i] = d_[i - 1];
    d_[pos] = v;
  }
  void erase(int pos) {
    for (int i = pos; i + 1 < n_; ++i) d_[i] = d_[i + 1];
    --n_;
  }
  void resize(int n, int64_t fill = 0) {
    SG_CHECK_SHAPE(n <= kMaxDims, "shape: at most {} dimensions are supported", kMaxDims);
    for (int i = n_; i < n; ++i) d_[i] = fill;
    n_ = n;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < n_; ++i) n *= d_[i];
    return n;
  }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.n_ == b.n_ && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  template <class It>
  void assign(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  std::array<int64_t, kMaxDims> d_{};
  int n_ = 0;
};

// Row-major (C-contiguous) strides for a shape, in elements.
inline Shape contiguous_strides(const Shape& shape) {
  Shape s;
  s.resize(shape.size());
  int64_t acc = 1;
  for (int i = shape.size() - 1; i >= 0; --i) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

// Wraps a possibly negative dimension index into [0, ndim); the error names the op.
inline int wrap_dim(int64_t dim, int ndim, const char* op) {
  int64_t n = std::max(ndim, 1);
  SG_CHECK_INDEX(dim >= -n && dim < n, "{}: dimension {} out of range for a tensor of {} dimensions",
                 op, dim, ndim);
  return static_cast<int>(dim < 0 ? dim + n : dim);
}

// NumPy broadcasting of two shapes; the error names the op and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace seqgrad

// Shapes print like Python tuples: (2, 3), (3,), ().
template <>
struct fmt::formatter<seqgrad::Shape> : fmt::formatter<std::string_view> {
  auto format(const seqgrad::Shape& s, format_context& ctx) const {
    auto out = ctx.out();
    *out++ = '(';
    for (int i = 0; i < s.size(); ++i) {
      if (i) out = fmt::format_to(out, ", ");
      out = fmt::format_to(out, "{}", s[i]);
    }
    if (s.size() == 1) *out++ = ',';
    *out++ = ')';
    return out;
  }
};
