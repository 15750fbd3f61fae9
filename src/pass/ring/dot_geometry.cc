#include "pass/ring/dot_geometry.h"

#include <algorithm>
#include <vector>

namespace loom::pass {

namespace {

int64_t IndexOf(const std::vector<int64_t>& dims, int64_t dim) {
  auto it = std::find(dims.begin(), dims.end(), dim);
  return it == dims.end() ? -1 : static_cast<int64_t>(it - dims.begin());
}

}  // namespace

std::string_view DimClassName(DimClass dim_class) {
  switch (dim_class) {
    case DimClass::kFree:
      return "free";
    case DimClass::kBatch:
      return "batch";
    case DimClass::kContracting:
      return "contracting";
  }
  return "?";
}

OperandDim ClassifyOperandDim(const ir::Instruction& dot, int64_t operand, int64_t dim) {
  const ir::DotDimensions& dims = *dot.attrs().dot;
  const auto& batch = operand == 0 ? dims.lhs_batch : dims.rhs_batch;
  const auto& other_batch = operand == 0 ? dims.rhs_batch : dims.lhs_batch;
  const auto& contracting = operand == 0 ? dims.lhs_contracting : dims.rhs_contracting;
  const auto& other_contracting = operand == 0 ? dims.rhs_contracting : dims.lhs_contracting;
  if (int64_t k = IndexOf(batch, dim); k >= 0) {
    return {DimClass::kBatch, other_batch[static_cast<size_t>(k)], k};
  }
  if (int64_t k = IndexOf(contracting, dim); k >= 0) {
    return {DimClass::kContracting, other_contracting[static_cast<size_t>(k)], std::nullopt};
  }
  const int64_t batch_count = static_cast<int64_t>(dims.lhs_batch.size());
  int64_t offset = batch_count;
  if (operand == 1) {
    offset += static_cast<int64_t>(
        ir::FreeDimensions(dot.operand(0)->shape().rank(), dims.lhs_batch, dims.lhs_contracting)
            .size());
  }
  const auto free = ir::FreeDimensions(dot.operand(operand)->shape().rank(), batch, contracting);
  return {DimClass::kFree, std::nullopt, offset + IndexOf(free, dim)};
}

OutputDim ClassifyOutputDim(const ir::Instruction& dot, int64_t output_dim) {
  const ir::DotDimensions& dims = *dot.attrs().dot;
  const int64_t batch_count = static_cast<int64_t>(dims.lhs_batch.size());
  if (output_dim < batch_count) {
    const auto k = static_cast<size_t>(output_dim);
    return {DimClass::kBatch, -1, dims.lhs_batch[k], dims.rhs_batch[k]};
  }
  const auto lhs_free =
      ir::FreeDimensions(dot.operand(0)->shape().rank(), dims.lhs_batch, dims.lhs_contracting);
  const int64_t lhs_index = output_dim - batch_count;
  if (lhs_index < static_cast<int64_t>(lhs_free.size())) {
    return {DimClass::kFree, 0, lhs_free[static_cast<size_t>(lhs_index)], -1};
  }
  const auto rhs_free =
      ir::FreeDimensions(dot.operand(1)->shape().rank(), dims.rhs_batch, dims.rhs_contracting);
  const auto rhs_index = static_cast<size_t>(lhs_index - static_cast<int64_t>(lhs_free.size()));
  return {DimClass::kFree, 1, -1, rhs_free[rhs_index]};
}

std::string_view OutputDimName(const OutputDim& dim) {
  if (dim.dim_class == DimClass::kBatch) return "batch";
  return dim.operand == 0 ? "lhs free" : "rhs free";
}

}  // namespace loom::pass
