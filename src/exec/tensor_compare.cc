#include "exec/tensor_compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace loom::exec {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Significant bits (with the implicit one) of the floating-point types Loom
// executes.
int SignificantBits(ir::PrimitiveType type) {
  switch (type) {
    case ir::PrimitiveType::kF64:
      return 53;
    case ir::PrimitiveType::kF32:
      return 24;
    case ir::PrimitiveType::kF16:
      return 11;
    case ir::PrimitiveType::kBF16:
      return 8;
    case ir::PrimitiveType::kF8E4M3FN:
      return 4;
    case ir::PrimitiveType::kF8E5M2:
      return 3;
    default:
      return 0;
  }
}

// The position of a float's bit pattern in the order of the values it
// encodes, so that neighbouring values are one apart: sign-magnitude to
// two's complement.
int64_t OrderedKey(uint64_t bits, int width) {
  const uint64_t sign_bit = uint64_t{1} << (width - 1);
  const auto magnitude = static_cast<int64_t>(bits & ~sign_bit);
  return (bits & sign_bit) ? -magnitude : magnitude;
}

double UlpDistance(const Tensor& a, const Tensor& b, int64_t i) {
  const double x = a.GetDouble(i), y = b.GetDouble(i);
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : kInfinity;
  if (x == y) return 0;  // +0 and -0, equal infinities
  const int width = ir::PrimitiveTypeBits(a.type());
  return std::fabs(static_cast<double>(OrderedKey(a.GetBits(i), width)) -
                   static_cast<double>(OrderedKey(b.GetBits(i), width)));
}

double AbsoluteDifference(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y) ? 0 : kInfinity;
  if (x == y) return 0;  // also equal infinities
  return std::fabs(x - y);
}

void CompareArrays(const Tensor& a, const Tensor& b, TensorDifference& d) {
  const bool floating = ir::IsFloatingPoint(a.type());
  double max_abs = 0, max_magnitude = 0;
  for (int64_t i = 0; i < a.ElementCount(); ++i) {
    ++d.elements;
    if (a.GetBits(i) == b.GetBits(i)) {
      if (floating) max_magnitude = std::max(max_magnitude, std::fabs(b.GetDouble(i)));
      continue;
    }
    ++d.elements_differing;
    if (!floating) {
      const double diff =
          std::fabs(static_cast<double>(a.GetInt(i)) - static_cast<double>(b.GetInt(i)));
      max_abs = std::max(max_abs, diff);
      d.max_ulps = std::max(d.max_ulps, diff);
      const double scale = std::max(std::fabs(static_cast<double>(a.GetInt(i))),
                                    std::fabs(static_cast<double>(b.GetInt(i))));
      d.max_rel = std::max(d.max_rel, scale > 0 ? diff / scale : kInfinity);
      d.max_scaled = std::max(d.max_scaled, diff / std::max(1.0, scale));
      continue;
    }
    const double x = a.GetDouble(i), y = b.GetDouble(i);
    const double diff = AbsoluteDifference(x, y);
    max_abs = std::max(max_abs, diff);
    if (!std::isnan(y)) max_magnitude = std::max(max_magnitude, std::fabs(y));
    d.max_ulps = std::max(d.max_ulps, UlpDistance(a, b, i));
    if (diff > 0) {
      const double scale = std::max(std::fabs(x), std::fabs(y));
      d.max_rel = std::max(d.max_rel, scale > 0 ? diff / scale : kInfinity);
      d.max_scaled = std::max(d.max_scaled, diff / std::max(1.0, scale));
    }
  }
  d.max_abs = std::max(d.max_abs, max_abs);
  d.max_magnitude = std::max(d.max_magnitude, max_magnitude);
  double error = 0;
  if (max_abs > 0) {
    const double u = UnitRoundoff(a.type());
    error = (u > 0 && max_magnitude > 0 && std::isfinite(max_abs)) ? max_abs / (u * max_magnitude)
                                                                   : kInfinity;
  }
  d.error_in_u = std::max(d.error_in_u, error);
}

void CompareInto(const Tensor& a, const Tensor& b, TensorDifference& d) {
  if (!a.shape().Compatible(b.shape())) {
    d.shapes_match = d.bitwise = false;
    d.max_abs = d.max_rel = d.max_ulps = d.max_scaled = d.error_in_u = kInfinity;
    return;
  }
  if (a.IsTuple()) {
    for (size_t i = 0; i < a.tuple_elements().size(); ++i) {
      CompareInto(a.tuple_elements()[i], b.tuple_elements()[i], d);
    }
    return;
  }
  const int64_t differing_before = d.elements_differing;
  CompareArrays(a, b, d);
  if (d.elements_differing != differing_before) d.bitwise = false;
}

}  // namespace

TensorDifference CompareTensors(const Tensor& a, const Tensor& b) {
  TensorDifference difference;
  CompareInto(a, b, difference);
  return difference;
}

double UnitRoundoff(ir::PrimitiveType type) {
  const int bits = SignificantBits(type);
  return bits == 0 ? 0.0 : std::ldexp(1.0, -bits);
}

double RoundingEnvelope(ir::PrimitiveType type, int64_t longest_sum) {
  const double u = UnitRoundoff(type);
  if (u == 0) return 0;
  const double accumulation = UnitRoundoff(
      type == ir::PrimitiveType::kF64 ? ir::PrimitiveType::kF64 : ir::PrimitiveType::kF32);
  const double n = static_cast<double>(std::max<int64_t>(longest_sum, 1));
  constexpr double kOutputRoundings = 8;
  return std::max(kOutputRoundings, 2 * std::sqrt(n) * accumulation / u);
}

bool IsRoundingDifference(const TensorDifference& difference, ir::PrimitiveType type,
                          int64_t longest_sum) {
  return difference.shapes_match && !difference.bitwise &&
         difference.error_in_u <= RoundingEnvelope(type, longest_sum);
}

}  // namespace loom::exec
