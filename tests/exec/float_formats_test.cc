// The fast 16-bit float conversions agree bit for bit with EncodeFloat /
// DecodeFloat: on every 16-bit pattern, on every midpoint between two
// neighbouring 16-bit values (where ties-to-even decides), and on random f32
// and f64 bit patterns of every magnitude.
#include "exec/cpu/float_formats.h"

#include <gtest/gtest.h>

#include <bit>
#include <random>

namespace loom::exec::cpu {
namespace {

using ir::PrimitiveType;

uint32_t FloatBits(double value) { return std::bit_cast<uint32_t>(static_cast<float>(value)); }

TEST(FloatFormats, DecodeEvery16BitPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    ASSERT_EQ(std::bit_cast<uint32_t>(Bf16ToFloat(bits)),
              FloatBits(DecodeFloat(bits, PrimitiveType::kBF16)))
        << std::hex << b;
    ASSERT_EQ(std::bit_cast<uint32_t>(F16ToFloat(bits)),
              FloatBits(DecodeFloat(bits, PrimitiveType::kF16)))
        << std::hex << b;
  }
}

// Every value, and the midpoints to its neighbour with a nudge either way.
TEST(FloatFormats, EncodeValuesAndMidpoints) {
  for (PrimitiveType type : {PrimitiveType::kBF16, PrimitiveType::kF16}) {
    for (uint32_t b = 0; b < 0xffff; ++b) {
      const double here = DecodeFloat(b, type), next = DecodeFloat(b + 1, type);
      if (!std::isfinite(here) || !std::isfinite(next) || std::signbit(here) != std::signbit(next))
        continue;
      const double mid = (here + next) / 2;
      for (double value : {here, mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300),
                           std::nextafter(mid, -1e300)}) {
        const auto expected = static_cast<uint16_t>(EncodeFloat(value, type));
        if (type == PrimitiveType::kBF16) {
          ASSERT_EQ(DoubleToBf16(value), expected) << value;
          if (static_cast<double>(static_cast<float>(value)) == value) {
            ASSERT_EQ(FloatToBf16(static_cast<float>(value)), expected) << value;
          }
        } else {
          ASSERT_EQ(DoubleToF16(value), expected) << value;
          if (static_cast<double>(static_cast<float>(value)) == value) {
            ASSERT_EQ(FloatToF16(static_cast<float>(value)), expected) << value;
          }
        }
      }
    }
  }
}

TEST(FloatFormats, EncodeRandomFloatsAndDoubles) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const uint64_t raw = rng();
    const float f = std::bit_cast<float>(static_cast<uint32_t>(raw));
    ASSERT_EQ(FloatToBf16(f), EncodeFloat(f, PrimitiveType::kBF16)) << f;
    ASSERT_EQ(FloatToF16(f), EncodeFloat(f, PrimitiveType::kF16)) << f;
    // Doubles of every magnitude, and near the 16-bit ranges.
    double d = std::bit_cast<double>(raw);
    if (i % 2)
      d = std::ldexp(static_cast<double>(raw >> 11) * 0x1p-53, static_cast<int>(raw % 80) - 40);
    ASSERT_EQ(DoubleToBf16(d), EncodeFloat(d, PrimitiveType::kBF16)) << d;
    ASSERT_EQ(DoubleToF16(d), EncodeFloat(d, PrimitiveType::kF16)) << d;
  }
}

}  // namespace
}  // namespace loom::exec::cpu
