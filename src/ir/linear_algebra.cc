#include "ir/linear_algebra.h"

#include <fmt/format.h>

#include <optional>
#include <string_view>

namespace loom::ir {
namespace {

// A boolean attribute, `fallback` where it is absent.
Expected<bool> BoolAttribute(const Instruction& instruction, std::string_view key, bool fallback) {
  const RawAttribute* raw = instruction.attrs().FindRaw(key);
  if (raw == nullptr) return fallback;
  if (raw->value != "true" && raw->value != "false") {
    return Error{
        fmt::format("%{}: {}={} is neither true nor false", instruction.name(), key, raw->value),
        raw->loc};
  }
  return raw->value == "true";
}

// A batch of square matrices of a floating-point type, or what it is not.
Status CheckSquareMatrices(std::string_view op, std::string_view role, const Shape& shape) {
  if (!shape.IsArray() || !(IsFloatingPoint(shape.type()) || IsComplex(shape.type()))) {
    return Error{fmt::format("{} takes floating-point or complex matrices, got {} for '{}'", op,
                             shape.ToString(false), role)};
  }
  if (shape.rank() < 2 || shape.dim(shape.rank() - 1) != shape.dim(shape.rank() - 2)) {
    return Error{
        fmt::format("{}'s '{}' must be square matrices in its two minor dimensions, got {}", op,
                    role, shape.ToString(false))};
  }
  return OkStatus();
}

}  // namespace

Expected<TriangularSolveOptions> TriangularSolveOptionsOf(const Instruction& solve) {
  TriangularSolveOptions options;
  LOOM_ASSIGN_OR_RETURN(options.left_side, BoolAttribute(solve, "left_side", false));
  LOOM_ASSIGN_OR_RETURN(options.lower, BoolAttribute(solve, "lower", false));
  LOOM_ASSIGN_OR_RETURN(options.unit_diagonal, BoolAttribute(solve, "unit_diagonal", false));
  const RawAttribute* transpose = solve.attrs().FindRaw("transpose_a");
  if (transpose == nullptr) {
    return Error{fmt::format("%{}: triangular-solve needs transpose_a=NO_TRANSPOSE, TRANSPOSE or "
                             "ADJOINT",
                             solve.name()),
                 solve.loc()};
  }
  if (transpose->value == "NO_TRANSPOSE") {
    options.transpose_a = TriangularTranspose::kNone;
  } else if (transpose->value == "TRANSPOSE") {
    options.transpose_a = TriangularTranspose::kTranspose;
  } else if (transpose->value == "ADJOINT") {
    options.transpose_a = TriangularTranspose::kAdjoint;
  } else {
    return Error{fmt::format("%{}: transpose_a={} is not NO_TRANSPOSE, TRANSPOSE or ADJOINT",
                             solve.name(), transpose->value),
                 transpose->loc};
  }
  return options;
}

Expected<CholeskyOptions> CholeskyOptionsOf(const Instruction& cholesky) {
  CholeskyOptions options;
  LOOM_ASSIGN_OR_RETURN(options.lower, BoolAttribute(cholesky, "lower", false));
  return options;
}

Expected<Shape> InferTriangularSolveShape(const Shape& a, const Shape& b,
                                          const TriangularSolveOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckSquareMatrices("triangular-solve", "a", a));
  if (!b.IsArray() || b.type() != a.type() || b.rank() != a.rank()) {
    return Error{
        fmt::format("triangular-solve's 'b' must have the element type and rank of 'a' "
                    "{}, got {}",
                    a.ToString(false), b.ToString(false))};
  }
  const int64_t rank = a.rank();
  const int64_t shared = b.dim(rank - (options.left_side ? 2 : 1));
  if (shared != a.dim(rank - 1)) {
    return Error{fmt::format("triangular-solve's 'b' {} must have {} {} of 'a' {}",
                             b.ToString(false), options.left_side ? "rows" : "columns",
                             a.dim(rank - 1), a.ToString(false))};
  }
  for (int64_t d = 0; d + 2 < rank; ++d) {
    if (a.dim(d) != b.dim(d)) {
      return Error{fmt::format("triangular-solve's batch dimensions differ: 'a' {}, 'b' {}",
                               a.ToString(false), b.ToString(false))};
    }
  }
  return b;
}

Expected<Shape> InferCholeskyShape(const Shape& a) {
  LOOM_RETURN_IF_ERROR(CheckSquareMatrices("cholesky", "a", a));
  return a;
}

}  // namespace loom::ir
