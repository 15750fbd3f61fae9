// int64_t arithmetic that stops at the maximum instead of overflowing, for
// byte and FLOP totals of hostile or huge modules: a sum that reaches
// kSaturated reads "at least this much", never a wrapped, negative number.
#pragma once

#include <cstdint>
#include <limits>

namespace loom {

inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

// a + b for a, b >= 0, or kSaturated.
inline int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t sum = 0;
  return __builtin_add_overflow(a, b, &sum) ? kSaturated : sum;
}

// a x b for a, b >= 0, or kSaturated.
inline int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? kSaturated : product;
}

}  // namespace loom
