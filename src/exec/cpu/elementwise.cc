// Element-wise kernels. Floats of f32, f64, bf16 and f16 run typed loops:
// +, -, *, / and sqrt in the element's own precision (f32 in float, f64 in
// double, bf16 and f16 in float and rounded once, which float_formats.h
// shows to be exact), every other function in double and rounded once to the
// element type, as the reference interpreter does. Integers and f8 take the
// generic path through exec/scalar_ops.h.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec/cpu/float_formats.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/simd.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"
#include "ir/reduce_precision.h"
#include "ir/shape_inference.h"

namespace loom::exec::cpu {
namespace {

using ir::Opcode;
using ir::PrimitiveType;

// How a float type is stored, what it computes in, and how a result is
// rounded back to it (from its compute type, or from double).
struct F32Format {
  using Storage = float;
  using Compute = float;
  static Compute Load(Storage v) { return v; }
  static Storage Store(Compute v) { return v; }
  static Storage FromDouble(double v) { return static_cast<float>(v); }
  static Storage NaN() { return std::bit_cast<float>(0x7fc00000u); }
};
struct F64Format {
  using Storage = double;
  using Compute = double;
  static Compute Load(Storage v) { return v; }
  static Storage Store(Compute v) { return v; }
  static Storage FromDouble(double v) { return v; }
  static Storage NaN() { return std::numeric_limits<double>::quiet_NaN(); }
};
struct Bf16Format {
  using Storage = uint16_t;
  using Compute = float;
  static Compute Load(Storage v) { return Bf16ToFloat(v); }
  static Storage Store(Compute v) { return FloatToBf16(v); }
  static Storage FromDouble(double v) { return DoubleToBf16(v); }
  static Storage NaN() { return 0x7fc0; }
};
struct F16Format {
  using Storage = uint16_t;
  using Compute = float;
  static Compute Load(Storage v) { return F16ToFloat(v); }
  static Storage Store(Compute v) { return FloatToF16(v); }
  static Storage FromDouble(double v) { return DoubleToF16(v); }
  static Storage NaN() { return 0x7e00; }
};

// Calls body.template operator()<Format>() for the typed float formats;
// false for every other type.
template <typename Body>
bool WithFloatFormat(PrimitiveType type, Body&& body) {
  switch (type) {
    case PrimitiveType::kF32:
      return body.template operator()<F32Format>();
    case PrimitiveType::kF64:
      return body.template operator()<F64Format>();
    case PrimitiveType::kBF16:
      return body.template operator()<Bf16Format>();
    case PrimitiveType::kF16:
      return body.template operator()<F16Format>();
    default:
      return false;
  }
}

template <typename F, typename Op>
void Map1(const HostArray& x, const HostArray& out, Op op) {
  const auto* in = x.as<typename F::Storage>();
  auto* result = out.as<typename F::Storage>();
  const int64_t n = out.elements();
  for (int64_t i = 0; i < n; ++i) result[i] = op(F::Load(in[i]));
}

template <typename F, typename Op>
void Map2(const HostArray& a, const HostArray& b, const HostArray& out, Op op) {
  const auto* x = a.as<typename F::Storage>();
  const auto* y = b.as<typename F::Storage>();
  auto* result = out.as<typename F::Storage>();
  const int64_t n = out.elements();
  for (int64_t i = 0; i < n; ++i) result[i] = op(F::Load(x[i]), F::Load(y[i]));
}

// A function computed in double and rounded once to the element type.
template <typename F, double (*kFunction)(double)>
void MapThroughDouble(const HostArray& x, const HostArray& out) {
  Map1<F>(x, out, [](typename F::Compute v) { return F::FromDouble(kFunction(v)); });
}

double Rsqrt(double x) { return 1.0 / std::sqrt(x); }
double Logistic(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double Exp(double x) { return std::exp(x); }
double Expm1(double x) { return std::expm1(x); }
double Log(double x) { return std::log(x); }
double Log1p(double x) { return std::log1p(x); }
double Cbrt(double x) { return std::cbrt(x); }
double Sin(double x) { return std::sin(x); }
double Cos(double x) { return std::cos(x); }
double Tan(double x) { return std::tan(x); }
double Tanh(double x) { return std::tanh(x); }
double Erf(double x) { return std::erf(x); }

template <typename F>
bool FloatUnary(Opcode op, const HostArray& x, const HostArray& out) {
  using C = typename F::Compute;
  switch (op) {
    case Opcode::kAbs:
      Map1<F>(x, out, [](C v) { return F::Store(std::fabs(v)); });
      return true;
    case Opcode::kNegate:
      Map1<F>(x, out, [](C v) { return F::Store(-v); });
      return true;
    case Opcode::kCopy:
      if (x.data != out.data) std::memcpy(out.data, x.data, static_cast<size_t>(out.bytes()));
      return true;
    case Opcode::kFloor:
      Map1<F>(x, out, [](C v) { return F::Store(std::floor(v)); });
      return true;
    case Opcode::kCeil:
      Map1<F>(x, out, [](C v) { return F::Store(std::ceil(v)); });
      return true;
    case Opcode::kRoundNearestEven:
      Map1<F>(x, out, [](C v) { return F::Store(std::nearbyint(v)); });
      return true;
    case Opcode::kRoundNearestAfz:
      Map1<F>(x, out, [](C v) { return F::Store(std::round(v)); });
      return true;
    case Opcode::kSign:
      Map1<F>(x, out, [](C v) {
        return F::Store(std::isnan(v) ? v : (v > 0 ? C{1} : (v < 0 ? C{-1} : v)));
      });
      return true;
    case Opcode::kSqrt:  // correctly rounded, so exact for the narrow types too
      Map1<F>(x, out, [](C v) { return F::Store(std::sqrt(v)); });
      return true;
    case Opcode::kRsqrt:
      MapThroughDouble<F, Rsqrt>(x, out);
      return true;
    case Opcode::kExp:
      MapThroughDouble<F, Exp>(x, out);
      return true;
    case Opcode::kExpm1:
      MapThroughDouble<F, Expm1>(x, out);
      return true;
    case Opcode::kLog:
      MapThroughDouble<F, Log>(x, out);
      return true;
    case Opcode::kLog1p:
      MapThroughDouble<F, Log1p>(x, out);
      return true;
    case Opcode::kCbrt:
      MapThroughDouble<F, Cbrt>(x, out);
      return true;
    case Opcode::kSin:
      MapThroughDouble<F, Sin>(x, out);
      return true;
    case Opcode::kCos:
      MapThroughDouble<F, Cos>(x, out);
      return true;
    case Opcode::kTan:
      MapThroughDouble<F, Tan>(x, out);
      return true;
    case Opcode::kTanh:
      MapThroughDouble<F, Tanh>(x, out);
      return true;
    case Opcode::kErf:
      MapThroughDouble<F, Erf>(x, out);
      return true;
    case Opcode::kLogistic:
      MapThroughDouble<F, Logistic>(x, out);
      return true;
    default:
      return false;
  }
}

template <typename F>
bool FloatBinary(Opcode op, const HostArray& a, const HostArray& b, const HostArray& out) {
  using C = typename F::Compute;
  // f32 and bf16 arithmetic vectorised for the CPU at hand (simd.h), with
  // the same bits as the loops below.
  if (const std::optional<simd::Binary> vectorised = simd::BinaryOf(op)) {
    const auto n = static_cast<size_t>(out.elements());
    if constexpr (std::is_same_v<F, F32Format>) {
      simd::F32Binary(*vectorised, a.as<float>(), b.as<float>(), out.as<float>(), n);
      return true;
    } else if constexpr (std::is_same_v<F, Bf16Format>) {
      simd::Bf16Binary(*vectorised, a.as<uint16_t>(), b.as<uint16_t>(), out.as<uint16_t>(), n);
      return true;
    }
  }
  switch (op) {
    case Opcode::kAdd:
      Map2<F>(a, b, out, [](C x, C y) { return F::Store(x + y); });
      return true;
    case Opcode::kSubtract:
      Map2<F>(a, b, out, [](C x, C y) { return F::Store(x - y); });
      return true;
    case Opcode::kMultiply:
      Map2<F>(a, b, out, [](C x, C y) { return F::Store(x * y); });
      return true;
    case Opcode::kDivide:
      Map2<F>(a, b, out, [](C x, C y) { return F::Store(x / y); });
      return true;
    case Opcode::kMaximum:  // NaN if either is; else the first when equal
      Map2<F>(a, b, out, [](C x, C y) {
        return std::isnan(x) || std::isnan(y) ? F::NaN() : F::Store(std::max(x, y));
      });
      return true;
    case Opcode::kMinimum:
      Map2<F>(a, b, out, [](C x, C y) {
        return std::isnan(x) || std::isnan(y) ? F::NaN() : F::Store(std::min(x, y));
      });
      return true;
    case Opcode::kPower:
      Map2<F>(a, b, out, [](C x, C y) { return F::FromDouble(std::pow(double{x}, double{y})); });
      return true;
    case Opcode::kAtan2:
      Map2<F>(a, b, out, [](C x, C y) { return F::FromDouble(std::atan2(double{x}, double{y})); });
      return true;
    case Opcode::kRemainder:
      Map2<F>(a, b, out, [](C x, C y) { return F::FromDouble(std::fmod(double{x}, double{y})); });
      return true;
    default:
      return false;
  }
}

Error Unsupported(const ir::Instruction& op, PrimitiveType type) {
  return KernelError(op, fmt::format("unsupported op {} on {}", ir::OpcodeName(op.opcode()),
                                     ir::PrimitiveTypeName(type)));
}

// The reference's element-by-element arithmetic (exec/scalar_ops.h).
Status GenericUnary(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  const PrimitiveType type = x.type();
  const bool floating = ir::IsFloatingPoint(type);
  for (int64_t i = 0; i < out.elements(); ++i) {
    if (floating) {
      const std::optional<double> value =
          scalar::UnaryFloat(op.opcode(), LoadDouble(x.data, type, i));
      if (!value)
        return KernelError(op,
                           fmt::format("unsupported op {} on floats", ir::OpcodeName(op.opcode())));
      StoreDouble(out.data, out.type(), i, *value);
    } else {
      const std::optional<int64_t> value =
          scalar::UnaryInteger(op.opcode(), LoadInt(x.data, type, i), type);
      if (!value)
        return KernelError(
            op, fmt::format("unsupported op {} on integers", ir::OpcodeName(op.opcode())));
      StoreInt(out.data, out.type(), i, *value);
    }
  }
  return OkStatus();
}

// false for an op the element type does not have.
bool GenericBinary(Opcode op, const HostArray& a, const HostArray& b, const HostArray& out) {
  const PrimitiveType type = a.type();
  const bool floating = ir::IsFloatingPoint(type);
  for (int64_t i = 0; i < out.elements(); ++i) {
    if (floating) {
      const std::optional<double> value =
          scalar::BinaryFloat(op, LoadDouble(a.data, type, i), LoadDouble(b.data, type, i));
      if (!value) return false;
      StoreDouble(out.data, out.type(), i, *value);
    } else {
      const std::optional<int64_t> value =
          scalar::BinaryInteger(op, LoadInt(a.data, type, i), LoadInt(b.data, type, i), type);
      if (!value) return false;
      StoreInt(out.data, out.type(), i, *value);
    }
  }
  return true;
}

bool AnyBinary(Opcode op, const HostArray& a, const HostArray& b, const HostArray& out) {
  if (WithFloatFormat(a.type(), [&]<typename F>() { return FloatBinary<F>(op, a, b, out); })) {
    return true;
  }
  // The typed loops cover every float op but the bitwise ones, which floats
  // do not have: what is left goes element by element.
  return GenericBinary(op, a, b, out);
}

template <typename F>
void IsFinite(const HostArray& x, const HostArray& out) {
  const auto* in = x.as<typename F::Storage>();
  auto* result = out.as<uint8_t>();
  for (int64_t i = 0; i < out.elements(); ++i) result[i] = std::isfinite(F::Load(in[i])) ? 1 : 0;
}

}  // namespace

Error KernelError(const ir::Instruction& op, const std::string& what) {
  return Error{fmt::format("{} (%{}) at line {}", what, op.name(), op.loc().line), op.loc()};
}

// reduce-precision on the elements' bits, a typed loop per width.
Status ReducePrecision(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  Expected<ir::ReducePrecision> reduce = ir::ReducePrecisionOf(op);
  if (!reduce.ok()) return reduce.error();
  const std::optional<int> mantissa = scalar::IeeeMantissaBits(x.type());
  if (!mantissa || out.type() != x.type()) {
    return KernelError(op, fmt::format("reduce-precision of {} (f16, bf16, f32 or f64 only)",
                                       ir::PrimitiveTypeName(x.type())));
  }
  const int width = ir::PrimitiveTypeBits(x.type());
  const scalar::PrecisionReducer reducer(width, *mantissa, reduce->exponent_bits,
                                         reduce->mantissa_bits);
  const auto run = [&]<typename T>(T) {
    const T* in = x.as<const T>();
    T* result = out.as<T>();
    for (int64_t i = 0; i < out.elements(); ++i) result[i] = static_cast<T>(reducer(in[i]));
  };
  if (width == 16) run(uint16_t{});
  if (width == 32) run(uint32_t{});
  if (width == 64) run(uint64_t{});
  return OkStatus();
}

Status Unary(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  if (x.elements() != out.elements())
    return KernelError(op, "operand shape differs from the result's");
  if (op.opcode() == Opcode::kReducePrecision) return ReducePrecision(op, x, out);
  if (op.opcode() == Opcode::kIsFinite) {
    if (WithFloatFormat(x.type(), [&]<typename F>() {
          IsFinite<F>(x, out);
          return true;
        })) {
      return OkStatus();
    }
    for (int64_t i = 0; i < out.elements(); ++i) {
      StoreInt(out.data, out.type(), i, std::isfinite(LoadDouble(x.data, x.type(), i)));
    }
    return OkStatus();
  }
  if (WithFloatFormat(x.type(), [&]<typename F>() { return FloatUnary<F>(op.opcode(), x, out); })) {
    return OkStatus();
  }
  return GenericUnary(op, x, out);
}

Status Binary(const ir::Instruction& op, const HostArray& a, const HostArray& b,
              const HostArray& out) {
  if (a.elements() != out.elements() || b.elements() != out.elements()) {
    return KernelError(op, "operand shapes differ from the result's");
  }
  if (!AnyBinary(op.opcode(), a, b, out)) return Unsupported(op, a.type());
  return OkStatus();
}

Status Combine(Opcode reducer, const HostArray& a, const HostArray& b, const HostArray& out) {
  if (a.elements() != out.elements() || b.elements() != out.elements()) {
    return Error{"reduction of contributions of different sizes"};
  }
  if (!AnyBinary(reducer, a, b, out)) {
    return Error{fmt::format("reducer {} does not apply to {}", ir::OpcodeName(reducer),
                             ir::PrimitiveTypeName(a.type()))};
  }
  return OkStatus();
}

Status Compare(const ir::Instruction& op, const HostArray& a, const HostArray& b,
               const HostArray& out) {
  if (!op.attrs().direction) return KernelError(op, "compare without direction");
  if (a.elements() != out.elements() || b.elements() != out.elements()) {
    return KernelError(op, "operand shapes differ from the result's");
  }
  const ir::ComparisonDirection direction = *op.attrs().direction;
  const ir::RawAttribute* kind = op.attrs().FindRaw("type");
  const bool total_order = kind != nullptr && kind->value == "TOTALORDER";
  const PrimitiveType type = a.type();
  auto* result = out.as<uint8_t>();
  const int64_t n = out.elements();
  if (ir::IsFloatingPoint(type) && total_order) {
    const int width = ir::PrimitiveTypeBits(type);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t x = scalar::TotalOrderKey(LoadBits(a.data, type, i), width);
      const int64_t y = scalar::TotalOrderKey(LoadBits(b.data, type, i), width);
      result[i] = scalar::CompareResult(direction, false, (x > y) - (x < y));
    }
    return OkStatus();
  }
  if (WithFloatFormat(type, [&]<typename F>() {
        const auto* x = a.as<typename F::Storage>();
        const auto* y = b.as<typename F::Storage>();
        for (int64_t i = 0; i < n; ++i) {
          const auto u = F::Load(x[i]), v = F::Load(y[i]);
          result[i] =
              scalar::CompareResult(direction, std::isnan(u) || std::isnan(v), (u > v) - (u < v));
        }
        return true;
      })) {
    return OkStatus();
  }
  for (int64_t i = 0; i < n; ++i) {
    if (ir::IsFloatingPoint(type)) {
      const double x = LoadDouble(a.data, type, i), y = LoadDouble(b.data, type, i);
      result[i] =
          scalar::CompareResult(direction, std::isnan(x) || std::isnan(y), (x > y) - (x < y));
    } else {
      result[i] = scalar::CompareResult(
          direction, false,
          scalar::CompareIntegers(LoadInt(a.data, type, i), LoadInt(b.data, type, i), type));
    }
  }
  return OkStatus();
}

namespace {

template <typename T>
void SelectElements(const uint8_t* predicate, bool scalar_predicate, const T* on_true,
                    const T* on_false, T* out, int64_t n) {
  if (scalar_predicate) {
    const T* chosen = predicate[0] ? on_true : on_false;
    if (chosen != out) std::memmove(out, chosen, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = predicate[i] ? on_true[i] : on_false[i];
}

}  // namespace

Status Select(const HostArray& predicate, const HostArray& on_true, const HostArray& on_false,
              const HostArray& out) {
  const bool scalar_predicate = predicate.shape->rank() == 0;
  const auto* p = predicate.as<uint8_t>();
  const int64_t n = out.elements();
  switch (out.element_bytes()) {
    case 1:
      SelectElements(p, scalar_predicate, on_true.as<uint8_t>(), on_false.as<uint8_t>(),
                     out.as<uint8_t>(), n);
      break;
    case 2:
      SelectElements(p, scalar_predicate, on_true.as<uint16_t>(), on_false.as<uint16_t>(),
                     out.as<uint16_t>(), n);
      break;
    case 4:
      SelectElements(p, scalar_predicate, on_true.as<uint32_t>(), on_false.as<uint32_t>(),
                     out.as<uint32_t>(), n);
      break;
    default:
      SelectElements(p, scalar_predicate, on_true.as<uint64_t>(), on_false.as<uint64_t>(),
                     out.as<uint64_t>(), n);
      break;
  }
  return OkStatus();
}

Status Clamp(const ir::Instruction& op, const HostArray& low, const HostArray& x,
             const HostArray& high, const HostArray& out) {
  const int64_t low_step = low.shape->rank() == 0 ? 0 : 1;
  const int64_t high_step = high.shape->rank() == 0 ? 0 : 1;
  const int64_t n = out.elements();
  // clamp = minimum(maximum(x, low), high), with XLA's NaN propagation.
  if (WithFloatFormat(x.type(), [&]<typename F>() {
        using C = typename F::Compute;
        const auto* lo = low.as<typename F::Storage>();
        const auto* in = x.as<typename F::Storage>();
        const auto* hi = high.as<typename F::Storage>();
        auto* result = out.as<typename F::Storage>();
        for (int64_t i = 0; i < n; ++i) {
          const C v = F::Load(in[i]), l = F::Load(lo[i * low_step]), h = F::Load(hi[i * high_step]);
          if (std::isnan(v) || std::isnan(l)) {
            result[i] = F::NaN();
            continue;
          }
          const C m = std::max(v, l);
          result[i] = std::isnan(h) ? F::NaN() : F::Store(std::min(m, h));
        }
        return true;
      })) {
    return OkStatus();
  }
  const PrimitiveType type = x.type();
  for (int64_t i = 0; i < n; ++i) {
    if (ir::IsFloatingPoint(type)) {
      const double m =
          scalar::FloatMax(LoadDouble(x.data, type, i), LoadDouble(low.data, type, i * low_step));
      StoreDouble(out.data, type, i,
                  scalar::FloatMin(m, LoadDouble(high.data, type, i * high_step)));
    } else {
      const auto m = scalar::BinaryInteger(Opcode::kMaximum, LoadInt(x.data, type, i),
                                           LoadInt(low.data, type, i * low_step), type);
      const auto r = scalar::BinaryInteger(Opcode::kMinimum, *m,
                                           LoadInt(high.data, type, i * high_step), type);
      StoreInt(out.data, type, i, *r);
    }
  }
  (void)op;
  return OkStatus();
}

namespace {

template <typename From, typename To>
void ConvertFloats(const HostArray& x, const HostArray& out) {
  const auto* in = x.as<typename From::Storage>();
  auto* result = out.as<typename To::Storage>();
  const int64_t n = out.elements();
  if constexpr (std::is_same_v<typename From::Compute, float> &&
                std::is_same_v<typename To::Compute, float>) {
    // f32, bf16, f16 among themselves: the value is exact in float, so one
    // rounding from float.
    for (int64_t i = 0; i < n; ++i) result[i] = To::Store(From::Load(in[i]));
  } else {
    for (int64_t i = 0; i < n; ++i)
      result[i] = To::FromDouble(static_cast<double>(From::Load(in[i])));
  }
}

}  // namespace

Status Convert(const HostArray& x, const HostArray& out) {
  const PrimitiveType from = x.type(), to = out.type();
  if (from == to) {
    if (x.data != out.data) std::memcpy(out.data, x.data, static_cast<size_t>(out.bytes()));
    return OkStatus();
  }
  const auto count = static_cast<size_t>(out.elements());
  if (from == PrimitiveType::kF32 && to == PrimitiveType::kBF16) {
    simd::F32ToBf16(x.as<float>(), out.as<uint16_t>(), count);
    return OkStatus();
  }
  if (from == PrimitiveType::kBF16 && to == PrimitiveType::kF32 && x.data != out.data) {
    simd::Bf16ToF32(x.as<uint16_t>(), out.as<float>(), count);
    return OkStatus();
  }
  const bool typed = WithFloatFormat(from, [&]<typename From>() {
    return WithFloatFormat(to, [&]<typename To>() {
      ConvertFloats<From, To>(x, out);
      return true;
    });
  });
  if (typed) return OkStatus();
  // Floats and unsigned values go through double (exact for every source
  // type but u64/s64 above 2^53); signed integers through int64 so that
  // integer-to-integer converts wrap exactly.
  const bool through_int =
      ir::IsSignedInteger(from) || (scalar::IsUnsignedLike(from) && !ir::IsFloatingPoint(to));
  const int64_t n = out.elements();
  if (x.data == out.data && x.element_bytes() != out.element_bytes()) {
    return Error{"convert in place between types of different widths"};
  }
  for (int64_t i = 0; i < n; ++i) {
    if (through_int) {
      StoreInt(out.data, to, i, LoadInt(x.data, from, i));
    } else {
      StoreDouble(out.data, to, i, LoadDouble(x.data, from, i));
    }
  }
  return OkStatus();
}

Status StochasticConvert(const ir::Instruction& op, const HostArray& x, const HostArray& random,
                         const HostArray& out) {
  const PrimitiveType from = x.type(), to = out.type();
  const Expected<ir::Shape> shape = ir::InferStochasticConvertShape(*x.shape, *random.shape, to);
  if (!shape.ok()) return KernelError(op, shape.error().message);
  if (!shape->Compatible(*out.shape) || !ir::IsSignedInteger(to)) {
    return KernelError(op, "stochastic-convert to " + out.shape->ToString(false) +
                               " is not executable (XLA's decomposer converts " +
                               shape->ToString(false) + " to signed integers only)");
  }
  for (int64_t i = 0; i < out.elements(); ++i) {
    StoreInt(out.data, to, i,
             scalar::StochasticConvert(LoadDouble(x.data, from, i),
                                       LoadBits(random.data, random.type(), i), from, to));
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
