// triangular-solve and cholesky on host arrays: exec/linear_algebra.h's
// loops, typed for f32 and f64, through the generic conversions for the
// narrower floats.
#include "exec/linear_algebra.h"

#include "exec/cpu/kernels.h"
#include "exec/float_elements.h"

namespace loom::exec::cpu {
namespace {

// The result's shape by the op's rule, or the kernel's error.
Status CheckInferred(const ir::Instruction& op, const Expected<ir::Shape>& inferred,
                     const HostArray& out) {
  if (!inferred.ok()) return KernelError(op, inferred.error().message);
  if (!out.shape->Compatible(*inferred)) {
    return KernelError(
        op, "result shape " + out.shape->ToString(false) + " is not " + inferred->ToString(false));
  }
  return OkStatus();
}

}  // namespace

Status TriangularSolve(const ir::Instruction& op, const HostArray& a, const HostArray& b,
                       const HostArray& out) {
  Expected<ir::TriangularSolveOptions> options = ir::TriangularSolveOptionsOf(op);
  if (!options.ok()) return KernelError(op, options.error().message);
  LOOM_RETURN_IF_ERROR(
      CheckInferred(op, ir::InferTriangularSolveShape(*a.shape, *b.shape, *options), out));
  float_elements::WithElements(a.type(), [&](const auto& elements) {
    linear_algebra::TriangularSolve(elements, b.shape->dims(), *options, a.data, b.data, out.data);
  });
  return OkStatus();
}

Status Cholesky(const ir::Instruction& op, const HostArray& a, const HostArray& out) {
  Expected<ir::CholeskyOptions> options = ir::CholeskyOptionsOf(op);
  if (!options.ok()) return KernelError(op, options.error().message);
  LOOM_RETURN_IF_ERROR(CheckInferred(op, ir::InferCholeskyShape(*a.shape), out));
  float_elements::WithElements(a.type(), [&](const auto& elements) {
    linear_algebra::Cholesky(elements, a.shape->dims(), *options, a.data, out.data);
  });
  return OkStatus();
}

}  // namespace loom::exec::cpu
