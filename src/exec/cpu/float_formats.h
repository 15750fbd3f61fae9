// Fast conversions between f32/f64 and the 16-bit float formats, bit for bit
// the rules of EncodeFloat / DecodeFloat (exec/tensor.h): round to nearest
// even, overflow to infinity, NaN to the canonical quiet NaN of its sign.
// Tested against them on every 16-bit pattern and on random values.
//
// Why float arithmetic is exact enough for bf16 and f16: an operation of
// +, -, *, / or sqrt on p-bit values, computed in q >= 2p + 2 bits and then
// rounded to p bits, gives the correctly rounded result (double rounding is
// harmless). f32 has q = 24 >= 2 * 11 + 2, so bf16 and f16 arithmetic can go
// through float; f32 arithmetic through double (53 >= 50) is what the
// reference does. Other functions (exp, tanh, ...) are computed in double and
// rounded once, from double, with the *FromDouble conversions.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "exec/tensor.h"

namespace loom::exec::cpu {

// Written without branches (selects instead), so that loops over them
// vectorise.
inline float Bf16ToFloat(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  const uint32_t canonical_nan = (widened & 0x80000000u) | 0x7fc00000u;
  return std::bit_cast<float>((widened & 0x7fffffffu) > 0x7f800000u ? canonical_nan : widened);
}

inline uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t canonical_nan = ((bits >> 16) & 0x8000u) | 0x7fc0u;
  // bf16 keeps f32's exponent range, so this rounds subnormals correctly too;
  // a carry out of the mantissa moves the exponent up, to infinity at most.
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? canonical_nan : rounded);
}

inline float F16ToFloat(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | (mantissa == 0 ? 0x7f800000u : 0x7fc00000u));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

inline uint16_t FloatToF16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (bits >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (bits < 0x38800000u) {                        // below 2^-14: a subnormal half
    // Scaling by 2^24 is exact; nearbyint rounds to nearest even. 1024 is the
    // smallest normal, which the same bits encode.
    const float scaled = std::bit_cast<float>(bits) * 0x1p24f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  bits += 0x0fffu + ((bits >> 13) & 1u);
  return sign | static_cast<uint16_t>((bits - 0x38000000u) >> 13);
}

// Rounds a double to `significant` bits at once (no intermediate rounding to
// float), for values in the normal range of the target, or returns false.
inline bool RoundDoubleToBits(double value, int significant, double min_normal, double& rounded) {
  const double magnitude = std::fabs(value);
  if (!(magnitude >= min_normal) || std::isinf(magnitude)) return false;
  uint64_t bits = std::bit_cast<uint64_t>(value);
  const int dropped = 53 - significant;
  const uint64_t half = (uint64_t{1} << (dropped - 1)) - 1;
  bits += half + ((bits >> dropped) & 1u);
  bits &= ~((uint64_t{1} << dropped) - 1);
  rounded = std::bit_cast<double>(bits);
  return true;
}

inline uint16_t DoubleToBf16(double value) {
  double rounded;
  if (!RoundDoubleToBits(value, 8, 0x1p-126, rounded)) {
    return static_cast<uint16_t>(EncodeFloat(value, ir::PrimitiveType::kBF16));
  }
  if (std::fabs(rounded) >= 0x1p128) return std::signbit(value) ? 0xff80u : 0x7f80u;
  return FloatToBf16(static_cast<float>(rounded));  // exact: 8 significant bits
}

inline uint16_t DoubleToF16(double value) {
  double rounded;
  if (!RoundDoubleToBits(value, 11, 0x1p-14, rounded)) {
    return static_cast<uint16_t>(EncodeFloat(value, ir::PrimitiveType::kF16));
  }
  if (std::fabs(rounded) >= 65536.0) return std::signbit(value) ? 0xfc00u : 0x7c00u;
  return FloatToF16(static_cast<float>(rounded));  // exact: 11 significant bits
}

}  // namespace loom::exec::cpu
