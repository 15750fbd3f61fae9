// triangular-solve and cholesky (exec/linear_algebra.h) on both backends:
// the same bits on each, the equations they solve held to the rounding
// error bound of substitution and of Cholesky's algorithm, only the named
// triangle of a read, and the options' identities (a transposed operand,
// the other side, the adjoint of a real matrix, the upper factor) exact.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "exec/interpreter.h"
#include "exec/reference/reference_interpreter.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::exec {
namespace {

// The unit roundoff of each type the tests run.
double UnitRoundoff(const std::string& type) {
  if (type == "f64") return std::ldexp(1.0, -53);
  if (type == "f32") return std::ldexp(1.0, -24);
  if (type == "f16") return std::ldexp(1.0, -11);
  return std::ldexp(1.0, -8);  // bf16
}

// Higham's gamma_n = n u / (1 - n u): the relative error bound of n
// rounded operations in sequence.
double Gamma(int64_t n, double u) { return static_cast<double>(n) * u / (1 - n * u); }

std::string Dims(const std::vector<int64_t>& batch, int64_t rows, int64_t columns) {
  std::vector<int64_t> dims = batch;
  dims.push_back(rows);
  dims.push_back(columns);
  return fmt::format("{}", fmt::join(dims, ","));
}

// Runs a module of one instruction on `inputs` on both backends, requires
// the same bits, and returns the result.
Tensor RunBoth(const std::string& text, const std::vector<Tensor>& inputs) {
  SCOPED_TRACE(text);
  auto module = ir::ParseModule(text);
  EXPECT_TRUE(module.ok()) << module.error().ToString();
  if (!module.ok()) return Tensor();
  auto verified = ir::VerifyModule(**module);
  EXPECT_TRUE(verified.ok()) << verified.error().ToString();
  const InterpreterOptions options{.deterministic = true};
  Expected<Tensor> reference = ReferenceInterpreter({}, options).RunEntry(**module, inputs);
  Expected<Tensor> fast = Interpreter({}, options).RunEntry(**module, inputs);
  EXPECT_TRUE(reference.ok()) << reference.error().ToString();
  EXPECT_TRUE(fast.ok()) << fast.error().ToString();
  if (!reference.ok() || !fast.ok()) return Tensor();
  for (int64_t i = 0; i < fast->ElementCount(); ++i) {
    const bool both_nan = std::isnan(fast->GetDouble(i)) && std::isnan(reference->GetDouble(i));
    if (!both_nan && fast->GetBits(i) != reference->GetBits(i)) {
      ADD_FAILURE() << "element " << i << ": fast " << fast->GetDouble(i) << ", reference "
                    << reference->GetDouble(i);
      break;
    }
  }
  return std::move(*reference);
}

std::string SolveModule(const std::string& type, const std::string& a, const std::string& b,
                        bool left, bool lower, bool unit, const std::string& transpose) {
  return fmt::format(
      "HloModule solve\n\nENTRY main {{\n  a = {0}[{1}] parameter(0)\n  b = {0}[{2}] "
      "parameter(1)\n  ROOT x = {0}[{2}] triangular-solve(a, b), left_side={3}, lower={4}, "
      "unit_diagonal={5}, transpose_a={6}\n}}\n",
      type, a, b, left, lower, unit, transpose);
}

std::string CholeskyModule(const std::string& type, const std::string& a, bool lower) {
  return fmt::format(
      "HloModule cholesky\n\nENTRY main {{\n  a = {0}[{1}] parameter(0)\n  ROOT l = {0}[{1}] "
      "cholesky(a), lower={2}\n}}\n",
      type, a, lower);
}

ir::Shape ShapeOf(const std::string& type, const std::string& dims) {
  auto module = ir::ParseModule(fmt::format(
      "HloModule s\n\nENTRY main {{\n  ROOT p = {}[{}] parameter(0)\n}}\n", type, dims));
  return (*module)->entry()->root()->shape();
}

// Element (matrix, i, j) of a batch of square or rectangular matrices.
struct Matrices {
  int64_t rows = 0, columns = 0;
  int64_t At(int64_t matrix, int64_t i, int64_t j) const {
    return (matrix * rows + i) * columns + j;
  }
};

Matrices MatricesOf(const Tensor& t) {
  const std::vector<int64_t>& dims = t.shape().dims();
  return {dims[dims.size() - 2], dims[dims.size() - 1]};
}

int64_t MatrixCount(const Tensor& t) {
  const Matrices m = MatricesOf(t);
  return t.ElementCount() / (m.rows * m.columns);
}

// The batch with each matrix transposed (values copied exactly).
Tensor TransposeMinor(const Tensor& t) {
  std::vector<int64_t> dims = t.shape().dims();
  std::swap(dims[dims.size() - 1], dims[dims.size() - 2]);
  Tensor out = Tensor::Zeros(ir::Shape(t.shape().type(), dims)).value();
  const Matrices from = MatricesOf(t), to = MatricesOf(out);
  for (int64_t m = 0; m < MatrixCount(t); ++m) {
    for (int64_t i = 0; i < from.rows; ++i) {
      for (int64_t j = 0; j < from.columns; ++j) {
        out.SetDouble(to.At(m, j, i), t.GetDouble(from.At(m, i, j)));
      }
    }
  }
  return out;
}

// `a` with what the op must not read made NaN: the triangle `lower` does
// not name and, with `unit`, the diagonal.
Tensor Spoiled(Tensor a, bool lower, bool unit) {
  const Matrices m = MatricesOf(a);
  for (int64_t k = 0; k < MatrixCount(a); ++k) {
    for (int64_t i = 0; i < m.rows; ++i) {
      for (int64_t j = 0; j < m.columns; ++j) {
        const bool other = lower ? j > i : j < i;
        if (other || (unit && i == j)) {
          a.SetDouble(m.At(k, i, j), std::numeric_limits<double>::quiet_NaN());
        }
      }
    }
  }
  return a;
}

// Well-conditioned triangles: a diagonal in [1, 2] (either sign), the rest
// in [-1, 1] / m, and b in [-4, 4].
Tensor RandomTriangular(const ir::Shape& shape, std::mt19937& rng) {
  Tensor a = Tensor::Zeros(shape).value();
  const Matrices m = MatricesOf(a);
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int64_t k = 0; k < MatrixCount(a); ++k) {
    for (int64_t i = 0; i < m.rows; ++i) {
      for (int64_t j = 0; j < m.columns; ++j) {
        const double v = i == j ? std::copysign(1.5 + unit(rng) / 2, unit(rng))
                                : unit(rng) / static_cast<double>(m.rows);
        a.SetDouble(m.At(k, i, j), v);
      }
    }
  }
  return a;
}

Tensor RandomUniform(const ir::Shape& shape, double scale, std::mt19937& rng) {
  Tensor t = Tensor::Zeros(shape).value();
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int64_t i = 0; i < t.ElementCount(); ++i) t.SetDouble(i, scale * unit(rng));
  return t;
}

// Requires op(a) x = b (left) or x op(a) = b within substitution's
// backward error: each vector's residual |c_i - sum_k u_ik y_k| at most
// gamma_m sum_k |u_ik| |y_k| (Higham, Accuracy and Stability, thm 8.5),
// with u_ii = 1 under unit_diagonal. The residual is taken in double, whose
// own error is far below the bound.
void ExpectSolved(const Tensor& a, const Tensor& b, const Tensor& x, bool left, bool lower,
                  bool unit, bool transposed, double roundoff) {
  const Matrices bm = MatricesOf(b);
  const int64_t m = left ? bm.rows : bm.columns;
  const Matrices am{m, m};
  const auto t = [&](int64_t k, int64_t i, int64_t j) {  // op(a) with its triangle
    const int64_t r = transposed ? j : i, c = transposed ? i : j;
    if (r == c && unit) return 1.0;
    if (lower ? c > r : c < r) return 0.0;
    return a.GetDouble(am.At(k, r, c));
  };
  const double bound = Gamma(m, roundoff) * (1 + 1e-6);
  for (int64_t k = 0; k < MatrixCount(b); ++k) {
    for (int64_t v = 0; v < (left ? bm.columns : bm.rows); ++v) {
      for (int64_t i = 0; i < m; ++i) {
        // Row i of op(a) x (left) or column i of x op(a) (right).
        double sum = 0, magnitude = 0;
        for (int64_t j = 0; j < m; ++j) {
          const double coefficient = left ? t(k, i, j) : t(k, j, i);
          const double y = x.GetDouble(left ? bm.At(k, j, v) : bm.At(k, v, j));
          sum += coefficient * y;
          magnitude += std::abs(coefficient * y);
        }
        const double c = b.GetDouble(left ? bm.At(k, i, v) : bm.At(k, v, i));
        ASSERT_LE(std::abs(c - sum), bound * magnitude + 1e-300)
            << "matrix " << k << ", vector " << v << ", row " << i;
      }
    }
  }
}

TEST(LinearAlgebra, TriangularSolveSolvesItsEquationsReadingOneTriangle) {
  struct Case {
    std::vector<int64_t> batch;
    int64_t m, n;
  };
  const std::vector<Case> cases = {
      {{}, 5, 3}, {{2}, 8, 1}, {{2, 3}, 4, 6}, {{}, 1, 4}, {{}, 17, 2}};
  std::mt19937 rng(2100);
  for (const std::string type : {"f64", "f32", "bf16", "f16"}) {
    for (const Case& c : cases) {
      const std::string a_dims = Dims(c.batch, c.m, c.m);
      const Tensor a = RandomTriangular(ShapeOf(type, a_dims), rng);
      for (const bool left : {true, false}) {
        const std::string b_dims = left ? Dims(c.batch, c.m, c.n) : Dims(c.batch, c.n, c.m);
        const Tensor b = RandomUniform(ShapeOf(type, b_dims), 4, rng);
        for (const bool lower : {true, false}) {
          for (const bool unit : {false, true}) {
            for (const std::string transpose : {"NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"}) {
              SCOPED_TRACE(fmt::format("{} a[{}] b[{}] left {} lower {} unit {} {}", type, a_dims,
                                       b_dims, left, lower, unit, transpose));
              const auto solve = [&](const Tensor& a_in, const Tensor& b_in, bool on_left,
                                     bool in_lower, const std::string& how) {
                const std::string bd = Dims(c.batch, b_in.shape().dims()[c.batch.size()],
                                            b_in.shape().dims()[c.batch.size() + 1]);
                return RunBoth(SolveModule(type, a_dims, bd, on_left, in_lower, unit, how),
                               {a_in, b_in});
              };
              const Tensor x = solve(a, b, left, lower, transpose);
              ExpectSolved(a, b, x, left, lower, unit, transpose != "NO_TRANSPOSE",
                           UnitRoundoff(type));
              // Only the named triangle (and, not unit, the diagonal) is read.
              EXPECT_TRUE(
                  x.BitwiseEqual(solve(Spoiled(a, lower, unit), b, left, lower, transpose)));
              if (transpose == "ADJOINT") {
                EXPECT_TRUE(x.BitwiseEqual(solve(a, b, left, lower, "TRANSPOSE")));
              }
              if (transpose == "TRANSPOSE") {
                // op(a) = a^T: the same solve of the transposed matrix.
                EXPECT_TRUE(
                    x.BitwiseEqual(solve(TransposeMinor(a), b, left, !lower, "NO_TRANSPOSE")));
              }
              if (!left) {
                // x op(a) = b is op(a)^T x^T = b^T.
                const std::string flipped =
                    transpose == "NO_TRANSPOSE" ? "TRANSPOSE" : "NO_TRANSPOSE";
                EXPECT_TRUE(x.BitwiseEqual(
                    TransposeMinor(solve(a, TransposeMinor(b), true, lower, flipped))));
              }
            }
          }
        }
      }
    }
  }
}

// Symmetric positive definite: a = g g^T / n + I for g in [-1, 1], built
// in double and rounded to the type (so symmetric exactly).
Tensor RandomPositiveDefinite(const ir::Shape& shape, std::mt19937& rng) {
  Tensor a = Tensor::Zeros(shape).value();
  const Matrices m = MatricesOf(a);
  const int64_t n = m.rows;
  std::uniform_real_distribution<double> unit(-1, 1);
  for (int64_t k = 0; k < MatrixCount(a); ++k) {
    std::vector<double> g(static_cast<size_t>(n * n));
    for (double& v : g) v = unit(rng);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) {
        double sum = i == j ? 1.0 : 0.0;
        for (int64_t l = 0; l < n; ++l) {
          sum += g[static_cast<size_t>(i * n + l)] * g[static_cast<size_t>(j * n + l)] /
                 static_cast<double>(n);
        }
        a.SetDouble(m.At(k, i, j), sum);
        a.SetDouble(m.At(k, j, i), a.GetDouble(m.At(k, i, j)));
      }
    }
  }
  return a;
}

// Requires l l^T = a within Cholesky's backward error, |a_ij - sum_k
// l_ik l_jk| <= gamma_(n+1) sum_k |l_ik| |l_jk| (Higham, thm 10.3), and the
// upper triangle zero.
void ExpectFactored(const Tensor& a, const Tensor& l, double roundoff) {
  const Matrices m = MatricesOf(a);
  const int64_t n = m.rows;
  const double bound = Gamma(n + 1, roundoff) * (1 + 1e-6);
  for (int64_t k = 0; k < MatrixCount(a); ++k) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        if (j > i) {
          ASSERT_EQ(l.GetBits(m.At(k, i, j)), 0u)
              << "matrix " << k << " (" << i << ", " << j << ")";
          continue;
        }
        double sum = 0, magnitude = 0;
        for (int64_t p = 0; p <= j; ++p) {
          const double product = l.GetDouble(m.At(k, i, p)) * l.GetDouble(m.At(k, j, p));
          sum += product;
          magnitude += std::abs(product);
        }
        ASSERT_LE(std::abs(a.GetDouble(m.At(k, i, j)) - sum), bound * magnitude)
            << "matrix " << k << " (" << i << ", " << j << ")";
      }
    }
  }
}

TEST(LinearAlgebra, CholeskyFactorsReadingOneTriangleAndFailsPerMatrix) {
  struct Case {
    std::vector<int64_t> batch;
    int64_t n;
  };
  const std::vector<Case> cases = {{{}, 6}, {{3}, 4}, {{2, 2}, 9}, {{}, 1}, {{}, 33}};
  std::mt19937 rng(2200);
  for (const std::string type : {"f64", "f32", "bf16", "f16"}) {
    for (const Case& c : cases) {
      const std::string dims = Dims(c.batch, c.n, c.n);
      SCOPED_TRACE(fmt::format("{}[{}]", type, dims));
      const Tensor a = RandomPositiveDefinite(ShapeOf(type, dims), rng);
      const Tensor l = RunBoth(CholeskyModule(type, dims, true), {a});
      ExpectFactored(a, l, UnitRoundoff(type));
      EXPECT_TRUE(
          l.BitwiseEqual(RunBoth(CholeskyModule(type, dims, true), {Spoiled(a, true, false)})));
      // The upper factor is the lower factor of a^T, transposed, reading
      // only a's upper triangle.
      const Tensor u = RunBoth(CholeskyModule(type, dims, false), {Spoiled(a, false, false)});
      EXPECT_TRUE(u.BitwiseEqual(
          TransposeMinor(RunBoth(CholeskyModule(type, dims, true), {TransposeMinor(a)}))));
      if (MatrixCount(a) < 2) continue;
      // A matrix that is not positive definite comes back all NaN; the
      // others of its batch are as before.
      Tensor broken = a;
      const Matrices m = MatricesOf(a);
      broken.SetDouble(m.At(1, c.n - 1, c.n - 1), -1.0);
      const Tensor mixed = RunBoth(CholeskyModule(type, dims, true), {broken});
      const int64_t size = c.n * c.n;
      for (int64_t i = 0; i < mixed.ElementCount(); ++i) {
        if (i / size == 1) {
          ASSERT_TRUE(std::isnan(mixed.GetDouble(i))) << i;
        } else {
          ASSERT_EQ(mixed.GetBits(i), l.GetBits(i)) << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom::exec
