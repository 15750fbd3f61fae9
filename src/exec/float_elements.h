// How loops written once for every floating-point type (exec/batch_norm.h,
// exec/linear_algebra.h) load, store and round their elements: each value
// is held as a double and rounded to the element type after every
// operation, so that a loop computes what the same operations in the
// element type compute. (Rounding +, -, *, / and sqrt of doubles to float
// gives the float operation's result: a double holds more than twice a
// float's precision plus two bits, so the second rounding is innocuous.)
//
// AnyFloat serves every type through the generic conversions; Native<T>
// is the same arithmetic for float and double, without them.
#pragma once

#include <cstddef>
#include <cstdint>

#include "exec/tensor.h"
#include "ir/shape.h"

namespace loom::exec::float_elements {

struct AnyFloat {
  ir::PrimitiveType type;
  double Load(const std::byte* data, int64_t i) const { return LoadDouble(data, type, i); }
  void Store(std::byte* data, int64_t i, double value) const { StoreDouble(data, type, i, value); }
  double Round(double value) const { return RoundToType(value, type); }
};

template <typename T>
struct Native {
  double Load(const std::byte* data, int64_t i) const {
    return static_cast<double>(reinterpret_cast<const T*>(data)[i]);
  }
  void Store(std::byte* data, int64_t i, double value) const {
    reinterpret_cast<T*>(data)[i] = static_cast<T>(value);
  }
  double Round(double value) const { return static_cast<double>(static_cast<T>(value)); }
};

// Calls run(policy) with the policy for `type`: Native for f32 and f64,
// AnyFloat for the others.
template <typename Run>
void WithElements(ir::PrimitiveType type, Run&& run) {
  switch (type) {
    case ir::PrimitiveType::kF32:
      run(Native<float>{});
      return;
    case ir::PrimitiveType::kF64:
      run(Native<double>{});
      return;
    default:
      run(AnyFloat{type});
      return;
  }
}

}  // namespace loom::exec::float_elements
