// The arithmetic of HLO's element-wise ops on one element, as XLA defines it:
// floats in double (then rounded to the element type by whoever stores the
// result), integers in int64 with the wraparound, shifts and division rules
// of the element type. The reference interpreter applies these element by
// element; the CPU kernels use them for the types and ops they have no
// typed loop for, so both give the same bits.
#pragma once

#include <cstdint>
#include <optional>

#include "ir/attributes.h"
#include "ir/opcode.h"
#include "ir/shape.h"

namespace loom::exec::scalar {

// Unsigned integers and pred.
bool IsUnsignedLike(ir::PrimitiveType type);
uint64_t WidthMask(int width);
int64_t SignExtend(uint64_t bits, int width);

// Three-way comparison of two integers of `type` as LoadInt reads them.
int CompareIntegers(int64_t a, int64_t b, ir::PrimitiveType type);

// XLA's maximum and minimum: NaN if either is NaN, else std::max / std::min
// (the first operand when the two compare equal).
double FloatMax(double a, double b);
double FloatMin(double a, double b);

// nullopt for an op the element kind does not have.
std::optional<double> UnaryFloat(ir::Opcode op, double x);
std::optional<int64_t> UnaryInteger(ir::Opcode op, int64_t x, ir::PrimitiveType type);
std::optional<double> BinaryFloat(ir::Opcode op, double a, double b);
std::optional<int64_t> BinaryInteger(ir::Opcode op, int64_t a, int64_t b, ir::PrimitiveType type);

// The key under which XLA's TOTALORDER comparison orders a float of `width`
// bits: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN.
// Inline: sorts and topk call it once an element.
inline int64_t TotalOrderKey(uint64_t bits, int width) {
  const uint64_t sign_bit = uint64_t{1} << (width - 1);
  const auto magnitude = static_cast<int64_t>(bits & ~sign_bit);
  return (bits & sign_bit) ? -magnitude - 1 : magnitude;
}

// Whether `direction` holds for a three-way `order` (or for an unordered
// pair: a NaN, where only NE holds).
bool CompareResult(ir::ComparisonDirection direction, bool unordered, int order);

}  // namespace loom::exec::scalar
