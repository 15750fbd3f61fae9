// What triangular-solve and cholesky (ir/linear_algebra.h) compute, as
// loops over one element policy (exec/float_elements.h): every product,
// difference, quotient and square root rounded to the element type, and
// every sum taken in one fixed order, so that the reference interpreter
// and the CPU kernel, which both run these loops, agree bit for bit on any
// machine. XLA leaves the order to each backend (its expanders block by
// 128; LAPACK and cuSOLVER by their own tiles), so these are Loom's bits,
// held in the tests to the equations they solve.
//
// triangular-solve: with t = op(a) (its `lower` triangle read, or its
// transpose's), every column of b (left side: t x = b) or row of b (right
// side: x t = b, that is t^T x^T = b^T) is one vector c solved against
// u = t or t^T by substitution, forward where u is lower triangular:
//   y_i = (c_i - u_ik y_k - ...) / u_ii   over the solved k, k increasing
// (k < i forward, k > i backward). With unit_diagonal there is no
// division.
//
// cholesky (lower; an upper one is the transpose of the lower factor of
// a's transpose): column by column, left-looking,
//   l_jj = sqrt(a_jj - l_j0^2 - ... - l_j(j-1)^2)
//   l_ij = (a_ij - l_i0 l_j0 - ... - l_i(j-1) l_j(j-1)) / l_jj   (i > j)
// the other triangle zero. As XLA's expander does, a matrix whose square
// root of a pivot is NaN (it is not positive definite) comes back all NaN;
// the other matrices of the batch are unaffected.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "ir/linear_algebra.h"

namespace loom::exec::linear_algebra {

// A batch of matrices in the two minor dimensions of `dims`.
struct Batch {
  int64_t count = 1;
  int64_t rows = 0;
  int64_t columns = 0;
};

inline Batch BatchOf(const std::vector<int64_t>& dims) {
  Batch batch;
  const size_t rank = dims.size();
  for (size_t d = 0; d + 2 < rank; ++d) batch.count *= dims[d];
  batch.rows = dims[rank - 2];
  batch.columns = dims[rank - 1];
  return batch;
}

// x = solve(a, b) for a [..., m, m] and b, x of b's dimensions `b_dims`.
template <typename E>
void TriangularSolve(const E& e, const std::vector<int64_t>& b_dims,
                     const ir::TriangularSolveOptions& options, const std::byte* a,
                     const std::byte* b, std::byte* x) {
  const Batch batch = BatchOf(b_dims);
  const int64_t m = options.left_side ? batch.rows : batch.columns;
  const int64_t vectors = options.left_side ? batch.columns : batch.rows;
  const bool transposed = options.transpose_a != ir::TriangularTranspose::kNone;
  // u = t on the left side, t^T on the right; t = a or a^T.
  const bool a_then_u_transposed = transposed != !options.left_side;
  const bool u_lower = options.lower != a_then_u_transposed;
  // Where a vector's element i lies in b (and x): column v of the left
  // side's [m, n], row v of the right side's [n, m].
  const auto at = [&](int64_t matrix, int64_t v, int64_t i) {
    const int64_t within = options.left_side ? i * vectors + v : v * m + i;
    return matrix * m * vectors + within;
  };
  std::vector<double> y(static_cast<size_t>(m));
  for (int64_t matrix = 0; matrix < batch.count; ++matrix) {
    const int64_t a_base = matrix * m * m;
    const auto u = [&](int64_t i, int64_t k) {
      return e.Load(a, a_base + (a_then_u_transposed ? k * m + i : i * m + k));
    };
    for (int64_t v = 0; v < vectors; ++v) {
      for (int64_t step = 0; step < m; ++step) {
        const int64_t i = u_lower ? step : m - 1 - step;
        double value = e.Load(b, at(matrix, v, i));
        // The solved indices, earliest first: below i when forward, above
        // it when backward.
        const int64_t first = u_lower ? 0 : i + 1, last = u_lower ? i : m;
        for (int64_t k = first; k < last; ++k) {
          value = e.Round(value - e.Round(u(i, k) * y[static_cast<size_t>(k)]));
        }
        if (!options.unit_diagonal) value = e.Round(value / u(i, i));
        y[static_cast<size_t>(i)] = value;
      }
      for (int64_t i = 0; i < m; ++i) e.Store(x, at(matrix, v, i), y[static_cast<size_t>(i)]);
    }
  }
}

// l = cholesky(a) for a of dimensions `dims`.
template <typename E>
void Cholesky(const E& e, const std::vector<int64_t>& dims, const ir::CholeskyOptions& options,
              const std::byte* a, std::byte* l) {
  const Batch batch = BatchOf(dims);
  const int64_t n = batch.rows;
  // The lower factor of a, or of a's transpose for an upper one (stored
  // transposed back, so that l holds u = that factor's transpose).
  const auto index = [&](int64_t i, int64_t j) { return options.lower ? i * n + j : j * n + i; };
  std::vector<double> factor(static_cast<size_t>(n * n));
  const auto f = [&](int64_t i, int64_t j) -> double& {
    return factor[static_cast<size_t>(i * n + j)];
  };
  for (int64_t matrix = 0; matrix < batch.count; ++matrix) {
    const int64_t base = matrix * n * n;
    std::fill(factor.begin(), factor.end(), 0.0);
    bool failed = false;
    for (int64_t j = 0; j < n; ++j) {
      double pivot = e.Load(a, base + index(j, j));
      for (int64_t k = 0; k < j; ++k) pivot = e.Round(pivot - e.Round(f(j, k) * f(j, k)));
      f(j, j) = e.Round(std::sqrt(pivot));
      failed = failed || std::isnan(f(j, j));
      for (int64_t i = j + 1; i < n; ++i) {
        double value = e.Load(a, base + index(i, j));
        for (int64_t k = 0; k < j; ++k) value = e.Round(value - e.Round(f(i, k) * f(j, k)));
        f(i, j) = e.Round(value / f(j, j));
      }
    }
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) e.Store(l, base + index(i, j), failed ? nan : f(i, j));
    }
  }
}

}  // namespace loom::exec::linear_algebra
