// The deterministic matrix product keeps its promise: every element is the
// in-order double sum of the one-loop reference, bit for bit, on every SIMD
// target this CPU runs (Highway dispatches to the widest at run time), for
// every size around the register tile and block edges, for transposed
// operands, and computed whole or block by block along rows or columns.
#include "exec/cpu/deterministic_gemm.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "exec/every_simd_target.h"

namespace loom::exec::cpu {
namespace {

// Values that make rounding visible: mixed signs and magnitudes, so that a
// different order of any sum changes its last bits.
std::vector<double> Values(int64_t count, uint32_t seed, bool single_precision) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values) {
    v = std::ldexp(mantissa(rng), exponent(rng));
    if (single_precision) v = static_cast<float>(v);
  }
  return values;
}

StridedMatrix<double> RowMajor(const std::vector<double>& data, int64_t rows, int64_t cols) {
  return {data.data(), rows, cols, cols, 1};
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

using DeterministicGemmOnEveryTarget = testing::EverySimdTarget;

TEST_F(DeterministicGemmOnEveryTarget, EqualsTheReferenceAroundEveryEdge) {
  // Sizes below, at and above the register tile (4 rows, 3 vectors of up to
  // 8 doubles), the 64-row block, the 256-deep K block and the 960-column block.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},    {1, 1, 300},   {3, 5, 7},
                                                      {4, 24, 256}, {5, 25, 257},  {65, 13, 2},
                                                      {64, 97, 1},  {7, 961, 513}, {130, 50, 600}};
  for (bool exact : {true, false}) {
    for (const auto& [m, n, k] : shapes) {
      SCOPED_TRACE(::testing::Message() << m << "x" << n << "x" << k << (exact ? " f32" : " f64"));
      const std::vector<double> a = Values(m * k, 1, exact), b = Values(k * n, 2, exact);
      std::vector<double> expected(static_cast<size_t>(m * n));
      DeterministicGemmReference(RowMajor(a, m, k), RowMajor(b, k, n), expected.data(), n);
      ForEachTarget([&] {
        std::vector<double> c(static_cast<size_t>(m * n), -1.0);
        DeterministicGemm(RowMajor(a, m, k), RowMajor(b, k, n), c.data(), n, exact);
        EXPECT_TRUE(SameBits(c, expected));
      });
    }
  }
}

TEST_F(DeterministicGemmOnEveryTarget, BlocksOfRowsAndColumnsEqualTheWholeProduct) {
  const int64_t m = 150, n = 70, k = 700;
  const std::vector<double> a = Values(m * k, 3, false), b = Values(k * n, 4, false);
  std::vector<double> whole(static_cast<size_t>(m * n));
  DeterministicGemm(RowMajor(a, m, k), RowMajor(b, k, n), whole.data(), n, false);
  ForEachTarget([&] {
    for (int64_t parts : {2, 3, 4, 7}) {
      SCOPED_TRACE(::testing::Message() << parts << " parts");
      std::vector<double> by_rows(whole.size()), by_cols(whole.size());
      const int64_t rows = (m + parts - 1) / parts, cols = (n + parts - 1) / parts;
      for (int64_t i0 = 0; i0 < m; i0 += rows) {
        const StridedMatrix<double> block{a.data() + i0 * k, std::min(rows, m - i0), k, k, 1};
        DeterministicGemm(block, RowMajor(b, k, n), by_rows.data() + i0 * n, n, false);
      }
      for (int64_t j0 = 0; j0 < n; j0 += cols) {
        const StridedMatrix<double> block{b.data() + j0, k, std::min(cols, n - j0), n, 1};
        DeterministicGemm(RowMajor(a, m, k), block, by_cols.data() + j0, n, false);
      }
      EXPECT_TRUE(SameBits(by_rows, whole));
      EXPECT_TRUE(SameBits(by_cols, whole));
    }
  });
}

TEST_F(DeterministicGemmOnEveryTarget, TransposedAndFloatOperandsSumTheSame) {
  const int64_t m = 37, n = 29, k = 301;
  const std::vector<double> a = Values(m * k, 5, true), b = Values(k * n, 6, true);
  std::vector<double> expected(static_cast<size_t>(m * n));
  DeterministicGemmReference(RowMajor(a, m, k), RowMajor(b, k, n), expected.data(), n);
  // The same matrices stored transposed (k x m and n x k), read through
  // swapped strides, and as floats.
  std::vector<double> at(a.size()), bt(b.size());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) at[p * m + i] = a[i * k + p];
  for (int64_t p = 0; p < k; ++p)
    for (int64_t j = 0; j < n; ++j) bt[j * k + p] = b[p * n + j];
  const std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  ForEachTarget([&] {
    std::vector<double> transposed(expected.size()), floats(expected.size());
    DeterministicGemm(StridedMatrix<double>{at.data(), m, k, 1, m},
                      StridedMatrix<double>{bt.data(), k, n, 1, k}, transposed.data(), n, true);
    DeterministicGemm(StridedMatrix<float>{af.data(), m, k, k, 1},
                      StridedMatrix<float>{bf.data(), k, n, n, 1}, floats.data(), n);
    EXPECT_TRUE(SameBits(transposed, expected));
    EXPECT_TRUE(SameBits(floats, expected));
  });
}

TEST_F(DeterministicGemmOnEveryTarget, EmptyContractionIsPositiveZeroAndSpecialValuesPropagate) {
  std::vector<double> c(6, -1.0);
  const std::vector<double> none;
  DeterministicGemm(StridedMatrix<double>{none.data(), 2, 0, 0, 1},
                    StridedMatrix<double>{none.data(), 0, 3, 3, 1}, c.data(), 3, true);
  for (double v : c) EXPECT_TRUE(v == 0.0 && !std::signbit(v));

  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> a = {1, inf, 0, 2}, b = {1, 2, 3, 4};  // [[1, inf], [0, 2]]
  ForEachTarget([&] {
    std::vector<double> out(4);
    DeterministicGemm(RowMajor(a, 2, 2), RowMajor(b, 2, 2), out.data(), 2, true);
    EXPECT_EQ(out[0], inf);
    EXPECT_EQ(out[1], inf);
    EXPECT_EQ(out[2], 6);
    EXPECT_EQ(out[3], 8);
  });
}

TEST(DeterministicGemmTargets, NamesTheTargetsInOrderOfPreference) {
  const std::vector<std::string> targets = DeterministicGemmTargets();
  ASSERT_FALSE(targets.empty());
  EXPECT_EQ(targets.size(), hwy::SupportedAndGeneratedTargets().size());
}

}  // namespace
}  // namespace loom::exec::cpu
