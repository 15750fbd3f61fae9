// The reference interpreter's dot: both operands packed element by element
// into [batch][rows][cols], then OpenBLAS for floating-point types (sgemm for
// f32, bf16, f16 and f8 widened to f32; dgemm for f64) or, in deterministic
// mode, the one-loop definition of the deterministic kernel
// (cpu::DeterministicGemmReference); integers in int64 in the same order.
#pragma once

#include <string>

#include "exec/tensor.h"
#include "ir/attributes.h"
#include "support/status.h"

namespace loom::exec {

// lhs x rhs per `dims`; the result has `result_shape` (batch dims, then lhs
// free dims, then rhs free dims). With `deterministic`, every element is the
// sum over the contracting index k = 0..K-1 in increasing order, accumulated
// in double (int64 with wraparound for integers) and rounded once at the end
// (exec/cpu/deterministic_gemm.h), so the result depends only on the inputs:
// not on the CPU, and not on which block of a larger product it is.
Expected<Tensor> ReferenceDot(const Tensor& lhs, const Tensor& rhs, const ir::DotDimensions& dims,
                              const ir::Shape& result_shape, bool deterministic);

}  // namespace loom::exec
