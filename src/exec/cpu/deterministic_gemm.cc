// The deterministic matrix product (see the header for the summation order it
// keeps). GotoBLAS-style blocking: B is packed K-block by K-block into panels
// of W columns, A into panels of kRows rows; a register tile of kRows x W
// accumulators runs the K block in order and its partial sums go back to C
// between blocks. Panels are zero-padded at the edges, so every tile runs the
// same code; padded rows and columns are never written back.
//
// Highway compiles this file once per SIMD target (foreach_target.h) and
// picks the widest one the CPU has at run time; the sums are the same on all.

#ifndef LOOM_DETERMINISTIC_GEMM_SHARED
#define LOOM_DETERMINISTIC_GEMM_SHARED

#include "exec/cpu/deterministic_gemm.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "exec/cpu/float_formats.h"

namespace loom::exec::cpu::gemm_detail {

// One operand, whatever its element type.
struct Operand {
  const void* data = nullptr;
  GemmElement type = GemmElement::kF64;
  int64_t rows = 0, cols = 0, row_stride = 0, col_stride = 1;

  double At(int64_t i, int64_t j) const {
    const int64_t offset = i * row_stride + j * col_stride;
    switch (type) {
      case GemmElement::kF32:
        return static_cast<const float*>(data)[offset];
      case GemmElement::kF64:
        return static_cast<const double*>(data)[offset];
      case GemmElement::kBF16:
        return Bf16ToFloat(static_cast<const uint16_t*>(data)[offset]);
      case GemmElement::kF16:
        return F16ToFloat(static_cast<const uint16_t*>(data)[offset]);
    }
    return 0;
  }
};

struct Problem {
  Operand a, b;
  double* c = nullptr;
  int64_t ldc = 0;
  bool fused = false;  // products are exact: FMA rounds like multiply-then-add
};

constexpr int64_t kRows = 4;        // rows of a register tile
constexpr int64_t kVectors = 3;     // vectors per row of a register tile
constexpr int64_t kDepth = 256;     // K block
constexpr int64_t kRowBlock = 64;   // rows of A packed at once (a multiple of kRows)
constexpr int64_t kColBlock = 960;  // columns of B packed at once

}  // namespace loom::exec::cpu::gemm_detail

#endif  // LOOM_DETERMINISTIC_GEMM_SHARED

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "exec/cpu/deterministic_gemm.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace loom::exec::cpu::gemm_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<double>;

// B rows [k0, k0 + depth) x columns [j0, j0 + width) into panels of `w`
// columns: panel q holds, for each k in order, the w values of its columns.
void PackB(const Operand& b, int64_t k0, int64_t depth, int64_t j0, int64_t width, int64_t w,
           double* packed) {
  for (int64_t q = 0; q * w < width; ++q) {
    double* panel = packed + q * depth * w;
    const int64_t first = j0 + q * w;
    const int64_t valid = std::min(w, j0 + width - first);
    for (int64_t p = 0; p < depth; ++p) {
      double* row = panel + p * w;
      for (int64_t l = 0; l < valid; ++l) row[l] = b.At(k0 + p, first + l);
      for (int64_t l = valid; l < w; ++l) row[l] = 0.0;
    }
  }
}

// A rows [i0, i0 + height) x columns [k0, k0 + depth) into panels of kRows
// rows: panel r holds, for each k in order, the kRows values of its rows.
void PackA(const Operand& a, int64_t i0, int64_t height, int64_t k0, int64_t depth,
           double* packed) {
  for (int64_t r = 0; r * kRows < height; ++r) {
    double* panel = packed + r * depth * kRows;
    const int64_t first = i0 + r * kRows;
    const int64_t valid = std::min(kRows, i0 + height - first);
    for (int64_t p = 0; p < depth; ++p) {
      double* column = panel + p * kRows;
      for (int64_t l = 0; l < valid; ++l) column[l] = a.At(first + l, k0 + p);
      for (int64_t l = valid; l < kRows; ++l) column[l] = 0.0;
    }
  }
}

// acc + a * b, rounded as the sum of the rounded product (see the header for
// why FMA is allowed only when products are exact).
template <bool kFused>
HWY_INLINE hn::Vec<D> Accumulate(hn::Vec<D> acc, hn::Vec<D> a, hn::Vec<D> b) {
  if constexpr (kFused) {
    return hn::MulAdd(a, b, acc);
  } else {
    return hn::Add(acc, hn::Mul(a, b));
  }
}

// tile (kRows x w, row-major) += packed A panel · packed B panel over `depth`
// values of k, in increasing k.
template <bool kFused>
void RegisterTile(int64_t depth, const double* HWY_RESTRICT a, const double* HWY_RESTRICT b,
                  double* HWY_RESTRICT tile) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  const size_t w = kVectors * lanes;
  auto c00 = hn::LoadU(d, tile + 0 * w), c01 = hn::LoadU(d, tile + 0 * w + lanes),
       c02 = hn::LoadU(d, tile + 0 * w + 2 * lanes);
  auto c10 = hn::LoadU(d, tile + 1 * w), c11 = hn::LoadU(d, tile + 1 * w + lanes),
       c12 = hn::LoadU(d, tile + 1 * w + 2 * lanes);
  auto c20 = hn::LoadU(d, tile + 2 * w), c21 = hn::LoadU(d, tile + 2 * w + lanes),
       c22 = hn::LoadU(d, tile + 2 * w + 2 * lanes);
  auto c30 = hn::LoadU(d, tile + 3 * w), c31 = hn::LoadU(d, tile + 3 * w + lanes),
       c32 = hn::LoadU(d, tile + 3 * w + 2 * lanes);
  for (int64_t p = 0; p < depth; ++p) {
    const double* bp = b + p * w;
    const auto b0 = hn::LoadU(d, bp), b1 = hn::LoadU(d, bp + lanes),
               b2 = hn::LoadU(d, bp + 2 * lanes);
    const double* ap = a + p * kRows;
    const auto a0 = hn::Set(d, ap[0]);
    c00 = Accumulate<kFused>(c00, a0, b0);
    c01 = Accumulate<kFused>(c01, a0, b1);
    c02 = Accumulate<kFused>(c02, a0, b2);
    const auto a1 = hn::Set(d, ap[1]);
    c10 = Accumulate<kFused>(c10, a1, b0);
    c11 = Accumulate<kFused>(c11, a1, b1);
    c12 = Accumulate<kFused>(c12, a1, b2);
    const auto a2 = hn::Set(d, ap[2]);
    c20 = Accumulate<kFused>(c20, a2, b0);
    c21 = Accumulate<kFused>(c21, a2, b1);
    c22 = Accumulate<kFused>(c22, a2, b2);
    const auto a3 = hn::Set(d, ap[3]);
    c30 = Accumulate<kFused>(c30, a3, b0);
    c31 = Accumulate<kFused>(c31, a3, b1);
    c32 = Accumulate<kFused>(c32, a3, b2);
  }
  hn::StoreU(c00, d, tile + 0 * w);
  hn::StoreU(c01, d, tile + 0 * w + lanes);
  hn::StoreU(c02, d, tile + 0 * w + 2 * lanes);
  hn::StoreU(c10, d, tile + 1 * w);
  hn::StoreU(c11, d, tile + 1 * w + lanes);
  hn::StoreU(c12, d, tile + 1 * w + 2 * lanes);
  hn::StoreU(c20, d, tile + 2 * w);
  hn::StoreU(c21, d, tile + 2 * w + lanes);
  hn::StoreU(c22, d, tile + 2 * w + 2 * lanes);
  hn::StoreU(c30, d, tile + 3 * w);
  hn::StoreU(c31, d, tile + 3 * w + lanes);
  hn::StoreU(c32, d, tile + 3 * w + 2 * lanes);
}
static_assert(kRows == 4 && kVectors == 3, "RegisterTile is written out for 4 x 3 vectors");

// One register tile of C at (i, j), `rows` x `cols` of it inside C: its
// partial sums in, `depth` more terms, its partial sums out. The first K
// block starts from +0, as the reference's accumulators do.
template <bool kFused>
void UpdateTile(const Problem& problem, int64_t i, int64_t j, int64_t rows, int64_t cols,
                bool first_block, int64_t depth, const double* a_panel, const double* b_panel,
                size_t w, double* tile) {
  std::fill(tile, tile + kRows * w, 0.0);
  if (!first_block) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(tile + r * w, problem.c + (i + r) * problem.ldc + j, cols * sizeof(double));
    }
  }
  RegisterTile<kFused>(depth, a_panel, b_panel, tile);
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(problem.c + (i + r) * problem.ldc + j, tile + r * w, cols * sizeof(double));
  }
}

template <bool kFused>
void Blocked(const Problem& problem) {
  const D d;
  const int64_t w = static_cast<int64_t>(kVectors * hn::Lanes(d));
  const int64_t m = problem.a.rows, k = problem.a.cols, n = problem.b.cols;
  const int64_t col_block = std::max<int64_t>(w, kColBlock / w * w);
  const int64_t max_depth = std::min(kDepth, k);
  const int64_t max_width = std::min(col_block, (n + w - 1) / w * w);
  const int64_t max_height = std::min(kRowBlock, (m + kRows - 1) / kRows * kRows);
  std::vector<double> packed_b(static_cast<size_t>(max_depth * max_width));
  std::vector<double> packed_a(static_cast<size_t>(max_depth * max_height));
  std::vector<double> tile(static_cast<size_t>(kRows * w));
  for (int64_t j0 = 0; j0 < n; j0 += col_block) {
    const int64_t width = std::min(col_block, n - j0);
    for (int64_t k0 = 0; k0 < k; k0 += kDepth) {  // increasing k: the sums' order
      const int64_t depth = std::min(kDepth, k - k0);
      PackB(problem.b, k0, depth, j0, width, w, packed_b.data());
      for (int64_t i0 = 0; i0 < m; i0 += kRowBlock) {
        const int64_t height = std::min(kRowBlock, m - i0);
        PackA(problem.a, i0, height, k0, depth, packed_a.data());
        for (int64_t jq = 0; jq < width; jq += w) {
          for (int64_t ir = 0; ir < height; ir += kRows) {
            UpdateTile<kFused>(
                problem, i0 + ir, j0 + jq, std::min(kRows, height - ir), std::min(w, width - jq),
                k0 == 0, depth, packed_a.data() + (ir / kRows) * depth * kRows,
                packed_b.data() + (jq / w) * depth * w, static_cast<size_t>(w), tile.data());
          }
        }
      }
    }
  }
}

void Gemm(const Problem& problem) {
  const int64_t m = problem.a.rows, k = problem.a.cols, n = problem.b.cols;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty sums are +0
    for (int64_t i = 0; i < m; ++i) std::fill_n(problem.c + i * problem.ldc, n, 0.0);
    return;
  }
  if (problem.fused) {
    Blocked<true>(problem);
  } else {
    Blocked<false>(problem);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace loom::exec::cpu::gemm_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::exec::cpu {
namespace gemm_detail {
HWY_EXPORT(Gemm);

template <typename T>
Operand OperandOf(const StridedMatrix<T>& m) {
  return Operand{m.data,       std::is_same_v<T, float> ? GemmElement::kF32 : GemmElement::kF64,
                 m.rows,       m.cols,
                 m.row_stride, m.col_stride};
}
}  // namespace gemm_detail

void DeterministicGemm(const GemmOperand& a, const GemmOperand& b, double* c, int64_t ldc) {
  auto operand = [](const GemmOperand& m) {
    return gemm_detail::Operand{m.data, m.type, m.rows, m.cols, m.row_stride, m.col_stride};
  };
  const bool exact = a.type != GemmElement::kF64 && b.type != GemmElement::kF64;
  const gemm_detail::Problem problem{operand(a), operand(b), c, ldc, exact};
  HWY_DYNAMIC_DISPATCH(gemm_detail::Gemm)(problem);
}

void DeterministicGemm(const StridedMatrix<double>& a, const StridedMatrix<double>& b, double* c,
                       int64_t ldc, bool exact_products) {
  const gemm_detail::Problem problem{gemm_detail::OperandOf(a), gemm_detail::OperandOf(b), c, ldc,
                                     exact_products};
  HWY_DYNAMIC_DISPATCH(gemm_detail::Gemm)(problem);
}

void DeterministicGemm(const StridedMatrix<float>& a, const StridedMatrix<float>& b, double* c,
                       int64_t ldc) {
  const gemm_detail::Problem problem{gemm_detail::OperandOf(a), gemm_detail::OperandOf(b), c, ldc,
                                     /*fused=*/true};
  HWY_DYNAMIC_DISPATCH(gemm_detail::Gemm)(problem);
}

void DeterministicGemmReference(const StridedMatrix<double>& a, const StridedMatrix<double>& b,
                                double* c, int64_t ldc) {
  const gemm_detail::Operand lhs = gemm_detail::OperandOf(a), rhs = gemm_detail::OperandOf(b);
  for (int64_t i = 0; i < a.rows; ++i) {
    for (int64_t j = 0; j < b.cols; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < a.cols; ++p) sum += lhs.At(i, p) * rhs.At(p, j);
      c[i * ldc + j] = sum;
    }
  }
}

std::vector<std::string> DeterministicGemmTargets() {
  std::vector<std::string> names;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    names.emplace_back(hwy::TargetName(target));
  }
  return names;
}

}  // namespace loom::exec::cpu
#endif  // HWY_ONCE
