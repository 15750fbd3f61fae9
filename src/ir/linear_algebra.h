// triangular-solve and cholesky: their options and shapes, in one place
// for the verifier and both executors.
//
//   %x = f32[4,16,8] triangular-solve(f32[4,16,16] %a, f32[4,16,8] %b), left_side=true,
//            lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE
//   %l = f32[4,16,16] cholesky(f32[4,16,16] %a), lower=true
//
// Both take batches of square matrices in their two minor dimensions.
// triangular-solve solves op(a) x = b (left_side) or x op(a) = b for x,
// op(a) a, its transpose or its adjoint (transpose_a, which XLA requires),
// reading only the triangle of a that `lower` names, and not its diagonal
// where unit_diagonal says it is ones; b is [..., m, n] on the left side,
// [..., n, m] on the right, a [..., m, m], and x is shaped as b. cholesky
// factors a = l l^T (lower) or u^T u, reading only that triangle of a.
// left_side, lower and unit_diagonal default to false, as XLA's parser has
// them. What both compute is exec/linear_algebra.h's.
#pragma once

#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

enum class TriangularTranspose { kNone, kTranspose, kAdjoint };

struct TriangularSolveOptions {
  bool left_side = false;
  bool lower = false;
  bool unit_diagonal = false;
  TriangularTranspose transpose_a = TriangularTranspose::kNone;
};

struct CholeskyOptions {
  bool lower = false;
};

// The options, each error at its attribute (a missing transpose_a at the
// instruction).
Expected<TriangularSolveOptions> TriangularSolveOptionsOf(const Instruction& solve);
Expected<CholeskyOptions> CholeskyOptionsOf(const Instruction& cholesky);

// XLA's shape rules: x shaped as b, l as a.
Expected<Shape> InferTriangularSolveShape(const Shape& a, const Shape& b,
                                          const TriangularSolveOptions& options);
Expected<Shape> InferCholeskyShape(const Shape& a);

}  // namespace loom::ir
