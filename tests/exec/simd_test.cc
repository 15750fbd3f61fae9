// The vectorised element-wise loops give the scalar definitions' bits on
// every SIMD target this CPU runs, for every op, on random bit patterns
// (NaNs of both signs and any payload, infinities, subnormals, zeros of both
// signs), in place and out of place, at lengths around every vector width.
// NaN results match as NaN (see Same).
#include "exec/cpu/simd.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "exec/cpu/float_formats.h"
#include "exec/every_simd_target.h"

namespace loom::exec::cpu::simd {
namespace {

float Expected(Binary op, float x, float y) {
  const float nan = std::bit_cast<float>(0x7fc00000u);
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
      return std::isnan(x) || std::isnan(y) ? nan : std::max(x, y);
    case Binary::kMinimum:
      return std::isnan(x) || std::isnan(y) ? nan : std::min(x, y);
  }
  return 0;
}

std::vector<uint32_t> RandomBits(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> bits(n);
  for (uint32_t& b : bits) {
    b = rng();
    switch (rng() % 8) {  // special values often
      case 0:
        b = (b & 0x80000000u) | 0x7f800000u | (b & 0x7fffffu);  // NaN or inf
        break;
      case 1:
        b &= 0x807fffffu;  // subnormal or zero
        break;
      case 2:
        b &= 0x8000ffffu;
        break;
      default:
        break;
    }
  }
  return bits;
}

// The same bits, or NaN on both sides: which NaN an operation on two NaN
// operands (or inf - inf) gives depends on the order the compiler puts the
// operands of a commutative instruction in, so no code promises its sign.
bool Same(uint32_t a, uint32_t b) {
  const bool a_nan = (a & 0x7fffffffu) > 0x7f800000u, b_nan = (b & 0x7fffffffu) > 0x7f800000u;
  return a == b || (a_nan && b_nan);
}
bool Same16(uint16_t a, uint16_t b) {
  return a == b || ((a & 0x7fff) > 0x7f80 && (b & 0x7fff) > 0x7f80);
}

constexpr Binary kOps[] = {Binary::kAdd,    Binary::kSubtract, Binary::kMultiply,
                           Binary::kDivide, Binary::kMaximum,  Binary::kMinimum};

using SimdOnEveryTarget = testing::EverySimdTarget;

TEST_F(SimdOnEveryTarget, Bf16ConversionsMatchTheScalarOnes) {
  const std::vector<uint32_t> bits = RandomBits(70000, 1);
  std::vector<float> floats(bits.size());
  std::vector<uint16_t> halves(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) {
    floats[i] = std::bit_cast<float>(bits[i]);
    halves[i] = static_cast<uint16_t>(bits[i]);
  }
  ForEachTarget([&] {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{16}, size_t{33}, bits.size()}) {
      std::vector<uint16_t> narrowed(n);
      std::vector<float> widened(n);
      F32ToBf16(floats.data(), narrowed.data(), n);
      Bf16ToF32(halves.data(), widened.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(narrowed[i], FloatToBf16(floats[i])) << std::hex << bits[i];
        ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]),
                  std::bit_cast<uint32_t>(Bf16ToFloat(halves[i])))
            << std::hex << halves[i];
      }
    }
  });
}

TEST_F(SimdOnEveryTarget, BinaryOpsMatchTheScalarOnes) {
  const std::vector<uint32_t> a_bits = RandomBits(5000, 2), b_bits = RandomBits(5000, 3);
  std::vector<float> a(a_bits.size()), b(b_bits.size());
  std::vector<uint16_t> ha(a.size()), hb(b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = std::bit_cast<float>(a_bits[i]);
    b[i] = std::bit_cast<float>(b_bits[i]);
    ha[i] = static_cast<uint16_t>(a_bits[i] >> 16);
    hb[i] = static_cast<uint16_t>(b_bits[i] >> 16);
  }
  ha[5] = hb[5];  // equal operands: max and min keep the first
  a[6] = -0.0f;
  b[6] = 0.0f;
  ForEachTarget([&] {
    for (Binary op : kOps) {
      SCOPED_TRACE(static_cast<int>(op));
      for (size_t n : {size_t{3}, size_t{17}, a.size()}) {
        std::vector<float> out(n);
        std::vector<uint16_t> hout(n);
        F32Binary(op, a.data(), b.data(), out.data(), n);
        Bf16Binary(op, ha.data(), hb.data(), hout.data(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_TRUE(Same(std::bit_cast<uint32_t>(out[i]),
                           std::bit_cast<uint32_t>(Expected(op, a[i], b[i]))))
              << i;
          const uint16_t expected =
              FloatToBf16(Expected(op, Bf16ToFloat(ha[i]), Bf16ToFloat(hb[i])));
          ASSERT_TRUE(Same16(hout[i], expected)) << i << ": " << hout[i] << " " << expected;
        }
      }
      // In place: the result over the first operand.
      std::vector<uint16_t> in_place = ha;
      Bf16Binary(op, in_place.data(), hb.data(), in_place.data(), in_place.size());
      for (size_t i = 0; i < in_place.size(); ++i) {
        ASSERT_TRUE(
            Same16(in_place[i], FloatToBf16(Expected(op, Bf16ToFloat(ha[i]), Bf16ToFloat(hb[i])))));
      }
    }
  });
}

}  // namespace
}  // namespace loom::exec::cpu::simd
