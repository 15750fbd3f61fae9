#include "exec/scalar_ops.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "exec/tensor.h"

namespace loom::exec::scalar {

using ir::Opcode;
using ir::PrimitiveType;

bool IsUnsignedLike(PrimitiveType type) {
  return ir::IsUnsignedInteger(type) || type == PrimitiveType::kPred;
}

static int IntegerWidth(PrimitiveType type) { return ir::PrimitiveTypeBits(type); }

uint64_t WidthMask(int width) { return width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

int64_t SignExtend(uint64_t bits, int width) {
  if (width == 64) return static_cast<int64_t>(bits);
  const uint64_t sign_bit = uint64_t{1} << (width - 1);
  bits &= WidthMask(width);
  return static_cast<int64_t>((bits ^ sign_bit) - sign_bit);
}

// Three-way comparison of two integers of `type` as stored by Tensor::GetInt.
int CompareIntegers(int64_t a, int64_t b, PrimitiveType type) {
  if (IsUnsignedLike(type)) {
    const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
    return ua < ub ? -1 : (ua > ub ? 1 : 0);
  }
  return a < b ? -1 : (a > b ? 1 : 0);
}

double FloatMax(double a, double b) {  // XLA's maximum propagates NaN
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::max(a, b);
}
double FloatMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return std::min(a, b);
}

std::optional<double> UnaryFloat(Opcode op, double x) {
  switch (op) {
    case Opcode::kAbs:
      return std::fabs(x);
    case Opcode::kNegate:
      return -x;
    case Opcode::kExp:
      return std::exp(x);
    case Opcode::kExpm1:
      return std::expm1(x);
    case Opcode::kLog:
      return std::log(x);
    case Opcode::kLog1p:
      return std::log1p(x);
    case Opcode::kSqrt:
      return std::sqrt(x);
    case Opcode::kRsqrt:
      return 1.0 / std::sqrt(x);
    case Opcode::kCbrt:
      return std::cbrt(x);
    case Opcode::kSin:
      return std::sin(x);
    case Opcode::kCos:
      return std::cos(x);
    case Opcode::kTan:
      return std::tan(x);
    case Opcode::kTanh:
      return std::tanh(x);
    case Opcode::kErf:
      return std::erf(x);
    case Opcode::kLogistic:
      return 1.0 / (1.0 + std::exp(-x));
    case Opcode::kFloor:
      return std::floor(x);
    case Opcode::kCeil:
      return std::ceil(x);
    case Opcode::kRoundNearestEven:
      return std::nearbyint(x);
    case Opcode::kRoundNearestAfz:
      return std::round(x);
    case Opcode::kSign:
      return std::isnan(x) ? x : (x > 0 ? 1.0 : (x < 0 ? -1.0 : x));
    case Opcode::kCopy:
      return x;
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> UnaryInteger(Opcode op, int64_t x, PrimitiveType type) {
  const int width = IntegerWidth(type);
  const uint64_t bits = static_cast<uint64_t>(x) & WidthMask(width);
  switch (op) {
    case Opcode::kAbs:
      return IsUnsignedLike(type) || x >= 0 ? x : static_cast<int64_t>(0 - bits);
    case Opcode::kNegate:
      return static_cast<int64_t>(0 - bits);
    case Opcode::kSign:
      return IsUnsignedLike(type) ? (x != 0) : (x > 0) - (x < 0);
    case Opcode::kNot:
      return type == PrimitiveType::kPred ? (x == 0) : static_cast<int64_t>(~bits);
    case Opcode::kPopulationCount:
      return std::popcount(bits);
    case Opcode::kClz:
      return std::countl_zero(bits) - (64 - width);
    case Opcode::kCopy:
      return x;
    default:
      return std::nullopt;
  }
}

std::optional<double> BinaryFloat(Opcode op, double a, double b) {
  switch (op) {
    case Opcode::kAdd:
      return a + b;
    case Opcode::kSubtract:
      return a - b;
    case Opcode::kMultiply:
      return a * b;
    case Opcode::kDivide:
      return a / b;
    case Opcode::kRemainder:
      return std::fmod(a, b);
    case Opcode::kMaximum:
      return FloatMax(a, b);
    case Opcode::kMinimum:
      return FloatMin(a, b);
    case Opcode::kPower:
      return std::pow(a, b);
    case Opcode::kAtan2:
      return std::atan2(a, b);
    default:
      return std::nullopt;
  }
}

static int64_t IntegerPower(int64_t base, int64_t exponent, PrimitiveType type) {
  if (!IsUnsignedLike(type) && exponent < 0) {
    // XLA: x^-n is 0 except for bases 1 and -1.
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, square = static_cast<uint64_t>(base);
  for (auto e = static_cast<uint64_t>(exponent); e != 0; e >>= 1) {
    if (e & 1) result *= square;
    square *= square;
  }
  return static_cast<int64_t>(result);
}

std::optional<int64_t> BinaryInteger(Opcode op, int64_t a, int64_t b, PrimitiveType type) {
  const int width = IntegerWidth(type);
  const auto ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  const bool is_unsigned = IsUnsignedLike(type);
  switch (op) {
    case Opcode::kAdd:
      return static_cast<int64_t>(ua + ub);
    case Opcode::kSubtract:
      return static_cast<int64_t>(ua - ub);
    case Opcode::kMultiply:
      return static_cast<int64_t>(ua * ub);
    // XLA: x / 0 is -1 (all bits set), x % 0 is x; INT_MIN / -1 is INT_MIN
    // (negation wraps) and INT_MIN % -1 is 0.
    case Opcode::kDivide:
      if (b == 0) return -1;
      if (is_unsigned) return static_cast<int64_t>(ua / ub);
      if (b == -1) return static_cast<int64_t>(0 - ua);
      return a / b;
    case Opcode::kRemainder:
      if (b == 0) return a;
      if (is_unsigned) return static_cast<int64_t>(ua % ub);
      if (b == -1) return 0;
      return a % b;
    case Opcode::kMaximum:
      return CompareIntegers(a, b, type) >= 0 ? a : b;
    case Opcode::kMinimum:
      return CompareIntegers(a, b, type) <= 0 ? a : b;
    case Opcode::kPower:
      return IntegerPower(a, b, type);
    case Opcode::kAnd:
      return a & b;
    case Opcode::kOr:
      return a | b;
    case Opcode::kXor:
      return a ^ b;
    // Shift amounts are unsigned; one of `width` or more shifts everything out.
    case Opcode::kShiftLeft:
      return (ub & WidthMask(width)) >= static_cast<uint64_t>(width)
                 ? 0
                 : static_cast<int64_t>(ua << ub);
    case Opcode::kShiftRightLogical:
      return (ub & WidthMask(width)) >= static_cast<uint64_t>(width)
                 ? 0
                 : static_cast<int64_t>((ua & WidthMask(width)) >> ub);
    case Opcode::kShiftRightArithmetic: {
      const int64_t signed_a = SignExtend(ua, width);
      const uint64_t amount =
          std::min<uint64_t>(ub & WidthMask(width), static_cast<uint64_t>(width - 1));
      return signed_a >> amount;
    }
    default:
      return std::nullopt;
  }
}

bool CompareResult(ir::ComparisonDirection direction, bool unordered, int order) {
  using D = ir::ComparisonDirection;
  if (unordered) return direction == D::kNe;  // NaN: only NE holds
  switch (direction) {
    case D::kEq:
      return order == 0;
    case D::kNe:
      return order != 0;
    case D::kLt:
      return order < 0;
    case D::kLe:
      return order <= 0;
    case D::kGt:
      return order > 0;
    case D::kGe:
      return order >= 0;
  }
  return false;
}

int64_t StochasticConvert(double x, uint64_t random, ir::PrimitiveType from, ir::PrimitiveType to) {
  const int width = static_cast<int>(ir::PrimitiveTypeBits(from));
  const int to_width = static_cast<int>(ir::PrimitiveTypeBits(to));
  const double magnitude = std::abs(x);
  const double truncated = std::floor(magnitude);
  // Both exact in `from`: the fraction of a float is a float, and scaling
  // it by 2^width stays in range (even in f16, whose largest fraction,
  // 1 - 2^-11, scales to its largest finite value 65504: the expander's f32
  // for f16 changes no bit, and is kept to follow it step for step).
  const ir::PrimitiveType fraction_type =
      from == ir::PrimitiveType::kF16 ? ir::PrimitiveType::kF32 : from;
  const double fixed = RoundToType(std::ldexp(magnitude - truncated, width), fraction_type);
  // To the random bits' type: an unsigned one of the operand's width.
  const auto threshold =
      static_cast<uint64_t>(SaturatingFloatToInteger(fixed, ir::PrimitiveType::kU64, width));
  const auto wrap = [&](uint64_t bits) { return SignExtend(bits & WidthMask(to_width), to_width); };
  int64_t value = SaturatingFloatToInteger(truncated, to, to_width);
  if (random < threshold) value = wrap(static_cast<uint64_t>(value) + 1);
  if (x < 0) value = wrap(~static_cast<uint64_t>(value) + 1);
  const double lowest = -std::ldexp(1.0, to_width - 1);
  const double highest = std::ldexp(1.0, to_width - 1) - 1;
  if (x <= RoundToType(lowest, from)) value = static_cast<int64_t>(lowest);
  if (x >= RoundToType(highest, from)) value = wrap((uint64_t{1} << (to_width - 1)) - 1);
  return value;
}

std::optional<int> IeeeMantissaBits(ir::PrimitiveType type) {
  switch (type) {
    case ir::PrimitiveType::kF16:
      return 10;
    case ir::PrimitiveType::kBF16:
      return 7;
    case ir::PrimitiveType::kF32:
      return 23;
    case ir::PrimitiveType::kF64:
      return 52;
    default:
      return std::nullopt;
  }
}

}  // namespace loom::exec::scalar
