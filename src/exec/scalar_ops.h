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

// stochastic-convert (ir/shape_inference.h) of one element `x` of the
// float type `from`, with `random` its unsigned bits of the same width, to
// the signed integer type `to`, step for step as XLA's
// StochasticConvertDecomposer expands it: the magnitude's integer part,
// plus one where random < fraction * 2^width (the fraction in f32 for an
// f16 operand, converted to the random type), negated for x < 0, and
// x <= min or x >= max of `to` (those bounds rounded to `from`, so an f16
// operand's s32 bounds are infinite) saturated. NaN gives 0. The value is
// returned sign-extended from `to`'s width.
int64_t StochasticConvert(double x, uint64_t random, ir::PrimitiveType from, ir::PrimitiveType to);

// The stored mantissa bits of f16, bf16, f32 and f64, the formats with
// IEEE infinities and NaNs that reduce-precision takes; nullopt for others.
std::optional<int> IeeeMantissaBits(ir::PrimitiveType type);

// reduce-precision (ir/reduce_precision.h) on the bits of an IEEE-style
// float of `width` bits and `mantissa` stored mantissa bits, step for step
// as XLA's EmitReducePrecisionIR: round the mantissa by adding a bias and
// masking, then saturate the exponent. Inline: the CPU kernel calls it
// once an element.
class PrecisionReducer {
 public:
  PrecisionReducer(int width, int mantissa, int exponent_bits, int mantissa_bits)
      : mantissa_(mantissa), dest_mantissa_(mantissa_bits) {
    const int exponent = width - 1 - mantissa;
    sign_ = uint64_t{1} << (width - 1);
    exponent_mask_ = ((uint64_t{1} << exponent) - 1) << mantissa;
    round_ = mantissa_bits < mantissa;
    if (round_) last_bit_ = uint64_t{1} << (mantissa - mantissa_bits);
    saturate_ = exponent_bits < exponent;
    if (saturate_) {
      const uint64_t bias = (uint64_t{1} << (exponent - 1)) - 1;
      const uint64_t reduced_bias = (uint64_t{1} << (exponent_bits - 1)) - 1;
      max_exponent_ = (bias + reduced_bias) << mantissa;
      min_exponent_ = (bias - reduced_bias) << mantissa;
    }
  }

  uint64_t operator()(uint64_t x) const {
    const bool nan = (x & ~sign_) > exponent_mask_;
    uint64_t y = x;
    if (round_) {
      const uint64_t bias =
          (last_bit_ >> 1) - 1 + ((y & last_bit_) >> (mantissa_ - dest_mantissa_));
      y = (y + bias) & ~(last_bit_ - 1);
    }
    if (saturate_) {
      const uint64_t exponent = y & exponent_mask_;
      if (exponent > max_exponent_) y = (y & sign_) | exponent_mask_;
      if (exponent <= min_exponent_) y &= sign_;
    }
    if (!nan) return y;
    return dest_mantissa_ > 0 ? x : exponent_mask_;  // +inf
  }

 private:
  int mantissa_, dest_mantissa_;
  uint64_t sign_ = 0, exponent_mask_ = 0, last_bit_ = 0, max_exponent_ = 0, min_exponent_ = 0;
  bool round_ = false, saturate_ = false;
};

}  // namespace loom::exec::scalar
