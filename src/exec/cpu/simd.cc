// The vectorised element-wise loops (see simd.h). Highway compiles this file
// once per SIMD target (foreach_target.h); the tails of every loop, shorter
// than a vector, run the scalar definitions.

#ifndef LOOM_SIMD_SHARED
#define LOOM_SIMD_SHARED

#include "exec/cpu/simd.h"

#include <algorithm>
#include <cmath>

#include "exec/cpu/float_formats.h"

namespace loom::exec::cpu::simd::detail {

inline float ScalarBinary(Binary op, float x, float y) {
  switch (op) {
    case Binary::kAdd:
      return x + y;
    case Binary::kSubtract:
      return x - y;
    case Binary::kMultiply:
      return x * y;
    case Binary::kDivide:
      return x / y;
    case Binary::kMaximum:
      return std::isnan(x) || std::isnan(y) ? std::bit_cast<float>(0x7fc00000u) : std::max(x, y);
    case Binary::kMinimum:
      return std::isnan(x) || std::isnan(y) ? std::bit_cast<float>(0x7fc00000u) : std::min(x, y);
  }
  return 0;
}

}  // namespace loom::exec::cpu::simd::detail

#endif  // LOOM_SIMD_SHARED

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "exec/cpu/simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace loom::exec::cpu::simd::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;

// bf16 bits (in the low half of u32 lanes... as u16 lanes of a half vector)
// to f32, NaN to the canonical quiet NaN of its sign.
HWY_INLINE hn::Vec<DF> WidenBf16(hn::Vec<DU16> bits) {
  const DF df;
  const DU32 du32;
  const DI32 di32;
  const auto widened = hn::ShiftLeft<16>(hn::PromoteTo(du32, bits));
  const auto magnitude = hn::BitCast(di32, hn::And(widened, hn::Set(du32, 0x7fffffffu)));
  const auto is_nan = hn::RebindMask(du32, hn::Gt(magnitude, hn::Set(di32, 0x7f800000)));
  const auto nan = hn::Or(hn::And(widened, hn::Set(du32, 0x80000000u)), hn::Set(du32, 0x7fc00000u));
  return hn::BitCast(df, hn::IfThenElse(is_nan, nan, widened));
}

// f32 to bf16 bits, rounded to nearest even, NaN canonical.
HWY_INLINE hn::Vec<DU16> NarrowToBf16(hn::Vec<DF> value) {
  const DU32 du32;
  const DI32 di32;
  const DU16 du16;
  const auto bits = hn::BitCast(du32, value);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du32, 0x7fffu), lsb)));
  const auto magnitude = hn::BitCast(di32, hn::And(bits, hn::Set(du32, 0x7fffffffu)));
  const auto is_nan = hn::RebindMask(du32, hn::Gt(magnitude, hn::Set(di32, 0x7f800000)));
  const auto nan =
      hn::Or(hn::And(hn::ShiftRight<16>(bits), hn::Set(du32, 0x8000u)), hn::Set(du32, 0x7fc0u));
  return hn::DemoteTo(du16, hn::BitCast(di32, hn::IfThenElse(is_nan, nan, rounded)));
}

template <Binary kOp>
HWY_INLINE hn::Vec<DF> Apply(hn::Vec<DF> x, hn::Vec<DF> y) {
  const DF df;
  if constexpr (kOp == Binary::kAdd) return hn::Add(x, y);
  if constexpr (kOp == Binary::kSubtract) return hn::Sub(x, y);
  if constexpr (kOp == Binary::kMultiply) return hn::Mul(x, y);
  if constexpr (kOp == Binary::kDivide) return hn::Div(x, y);
  const auto nan = hn::Or(hn::IsNaN(x), hn::IsNaN(y));
  const auto canonical = hn::BitCast(df, hn::Set(DU32(), 0x7fc00000u));
  // std::max(x, y) is x unless x < y; std::min(x, y) is x unless y < x.
  if constexpr (kOp == Binary::kMaximum) {
    return hn::IfThenElse(nan, canonical, hn::IfThenElse(hn::Lt(x, y), y, x));
  }
  return hn::IfThenElse(nan, canonical, hn::IfThenElse(hn::Lt(y, x), y, x));
}

void Bf16ToF32(const uint16_t* HWY_RESTRICT in, float* HWY_RESTRICT out, size_t n) {
  const DF df;
  const DU16 du16;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(WidenBf16(hn::LoadU(du16, in + i)), df, out + i);
  for (; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

void F32ToBf16(const float* HWY_RESTRICT in, uint16_t* HWY_RESTRICT out, size_t n) {
  const DF df;
  const DU16 du16;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(NarrowToBf16(hn::LoadU(df, in + i)), du16, out + i);
  for (; i < n; ++i) out[i] = FloatToBf16(in[i]);
}

template <Binary kOp>
void Bf16Loop(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  const DF df;
  const DU16 du16;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto x = WidenBf16(hn::LoadU(du16, a + i));
    const auto y = WidenBf16(hn::LoadU(du16, b + i));
    hn::StoreU(NarrowToBf16(Apply<kOp>(x, y)), du16, out + i);
  }
  for (; i < n; ++i) out[i] = FloatToBf16(ScalarBinary(kOp, Bf16ToFloat(a[i]), Bf16ToFloat(b[i])));
}

template <Binary kOp>
void F32Loop(const float* a, const float* b, float* out, size_t n) {
  const DF df;
  const size_t lanes = hn::Lanes(df);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(Apply<kOp>(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = ScalarBinary(kOp, a[i], b[i]);
}

template <template <Binary> class Loop, typename T>
void Dispatch(Binary op, const T* a, const T* b, T* out, size_t n) {
  switch (op) {
    case Binary::kAdd:
      return Loop<Binary::kAdd>::Run(a, b, out, n);
    case Binary::kSubtract:
      return Loop<Binary::kSubtract>::Run(a, b, out, n);
    case Binary::kMultiply:
      return Loop<Binary::kMultiply>::Run(a, b, out, n);
    case Binary::kDivide:
      return Loop<Binary::kDivide>::Run(a, b, out, n);
    case Binary::kMaximum:
      return Loop<Binary::kMaximum>::Run(a, b, out, n);
    case Binary::kMinimum:
      return Loop<Binary::kMinimum>::Run(a, b, out, n);
  }
}

template <Binary kOp>
struct Bf16Op {
  static void Run(const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
    Bf16Loop<kOp>(a, b, out, n);
  }
};
template <Binary kOp>
struct F32Op {
  static void Run(const float* a, const float* b, float* out, size_t n) {
    F32Loop<kOp>(a, b, out, n);
  }
};

void Bf16Binary(Binary op, const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  Dispatch<Bf16Op>(op, a, b, out, n);
}

void F32Binary(Binary op, const float* a, const float* b, float* out, size_t n) {
  Dispatch<F32Op>(op, a, b, out, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace loom::exec::cpu::simd::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::exec::cpu::simd {
namespace detail {
HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F32ToBf16);
HWY_EXPORT(Bf16Binary);
HWY_EXPORT(F32Binary);
}  // namespace detail

void Bf16ToF32(const uint16_t* in, float* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(detail::Bf16ToF32)(in, out, n);
}
void F32ToBf16(const float* in, uint16_t* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(detail::F32ToBf16)(in, out, n);
}
void Bf16Binary(Binary op, const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(detail::Bf16Binary)(op, a, b, out, n);
}
void F32Binary(Binary op, const float* a, const float* b, float* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(detail::F32Binary)(op, a, b, out, n);
}

}  // namespace loom::exec::cpu::simd
#endif  // HWY_ONCE
