// Where the dimensions of a dot's operands go: which are batch, contracting
// or free, and which output dimension each batch and free dimension becomes
// (XLA's order: batch, then lhs free, then rhs free).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "ir/instruction.h"

namespace loom::pass {

enum class DimClass { kFree, kBatch, kContracting };
std::string_view DimClassName(DimClass dim_class);

// One operand dimension of a dot and its counterpart: for a batch or
// contracting dimension, the other operand's matching dimension; for batch
// and free dimensions, the output dimension.
struct OperandDim {
  DimClass dim_class = DimClass::kFree;
  std::optional<int64_t> other_operand_dim;
  std::optional<int64_t> output_dim;
};

// Dimension `dim` of operand `operand` (0: lhs, 1: rhs) of `dot`.
OperandDim ClassifyOperandDim(const ir::Instruction& dot, int64_t operand, int64_t dim);

// An output dimension of `dot`: which operand supplies it (0, 1, or both for
// a batch dimension: -1) and at which of that operand's dimensions (for a
// batch dimension: lhs's, with rhs's in rhs_dim).
struct OutputDim {
  DimClass dim_class = DimClass::kFree;  // kFree or kBatch
  int64_t operand = 0;
  int64_t lhs_dim = -1;
  int64_t rhs_dim = -1;
};
OutputDim ClassifyOutputDim(const ir::Instruction& dot, int64_t output_dim);
// "batch", "lhs free" or "rhs free".
std::string_view OutputDimName(const OutputDim& dim);

}  // namespace loom::pass
