#include "pass/ring/dimension_trace.h"

#include <functional>
#include <numeric>

namespace loom::pass {

namespace {

bool HasDefaultLayout(const ir::Shape& shape) {
  if (!shape.layout()) return true;
  const auto& minor_to_major = shape.layout()->minor_to_major;
  if (minor_to_major.empty()) return true;
  for (size_t i = 0; i < minor_to_major.size(); ++i) {
    if (minor_to_major[i] != static_cast<int64_t>(minor_to_major.size() - 1 - i)) return false;
  }
  return true;
}

// Row-major reshape: operand dimension `dim` keeps its N blocks contiguous
// in result dimension d when the dimensions before both hold the same number
// of elements (so each slab of the more major dimensions maps to itself) and
// N divides d. Block b of the operand is then the b-th N-th of every slab,
// which is block b along d. A reshape is defined on the logical order
// whatever the layouts; a bitcast reinterprets memory, so it is such a
// reshape only with default layouts (TraceDimension checks).
std::optional<int64_t> TraceThroughReshape(const ir::Shape& operand, const ir::Shape& result,
                                           int64_t dim, int64_t blocks) {
  if (operand.ElementCount() != result.ElementCount()) return std::nullopt;
  const int64_t before = ElementsBefore(operand.dims(), dim);
  for (int64_t d = 0; d < result.rank(); ++d) {
    if (ElementsBefore(result.dims(), d) == before && result.dim(d) % blocks == 0) return d;
  }
  return std::nullopt;
}

}  // namespace

int64_t ElementsBefore(const std::vector<int64_t>& dims, int64_t dim) {
  return std::accumulate(dims.begin(), dims.begin() + dim, int64_t{1}, std::multiplies<>());
}

bool IsTraceableOp(const ir::Instruction& op) {
  switch (op.opcode()) {
    case ir::Opcode::kReshape:
    case ir::Opcode::kBitcast:
    case ir::Opcode::kConvert:
    case ir::Opcode::kCopy:
    case ir::Opcode::kTranspose:
      return op.operand_count() == 1 && op.shape().IsArray() && op.operand(0)->shape().IsArray();
    default:
      return false;
  }
}

std::optional<int64_t> TraceDimension(const ir::Instruction& op, int64_t dim, int64_t blocks) {
  if (!IsTraceableOp(op)) return std::nullopt;
  const ir::Shape& operand = op.operand(0)->shape();
  switch (op.opcode()) {
    case ir::Opcode::kConvert:
    case ir::Opcode::kCopy:
      return dim;
    case ir::Opcode::kTranspose: {
      const auto& permutation = op.attrs().dimensions.value_or(std::vector<int64_t>{});
      for (size_t i = 0; i < permutation.size(); ++i) {
        if (permutation[i] == dim) return static_cast<int64_t>(i);
      }
      return std::nullopt;
    }
    case ir::Opcode::kBitcast:
      // A bitcast between different element widths is not a reshape.
      if (operand.type() != op.shape().type()) return std::nullopt;
      if (!HasDefaultLayout(operand) || !HasDefaultLayout(op.shape())) return std::nullopt;
      return TraceThroughReshape(operand, op.shape(), dim, blocks);
    case ir::Opcode::kReshape:
      return TraceThroughReshape(operand, op.shape(), dim, blocks);
    default:
      return std::nullopt;
  }
}

Expected<ir::Instruction*> ReplayOnBlock(ir::Builder& builder, const ir::Instruction& op,
                                         ir::Instruction* block, int64_t result_dim,
                                         int64_t blocks) {
  std::vector<int64_t> dims = op.shape().dims();
  dims[static_cast<size_t>(result_dim)] /= blocks;
  ir::Shape shape(op.shape().type(), std::move(dims));
  if (op.opcode() == ir::Opcode::kBitcast || op.opcode() == ir::Opcode::kReshape) {
    return builder.Reshape(block, shape.dims());
  }
  return builder.CloneUnaryWithShape(op, block, std::move(shape));
}

ChainAbove TraceableChainAbove(ir::Instruction* value) {
  ChainAbove above;
  while (IsTraceableOp(*value)) {
    above.chain.insert(above.chain.begin(), value);
    value = value->operand(0);
  }
  above.source = value;
  return above;
}

ChainTrace TraceChain(const std::vector<ir::Instruction*>& chain, int64_t dim, int64_t blocks) {
  ChainTrace trace;
  for (const ir::Instruction* op : chain) {
    std::optional<int64_t> traced = TraceDimension(*op, dim, blocks);
    if (!traced) {
      trace.stuck = op;
      return trace;
    }
    dim = *traced;
    trace.dims.push_back(dim);
  }
  return trace;
}

Expected<ir::Instruction*> ReplayChainOnBlock(ir::Builder& builder,
                                              const std::vector<ir::Instruction*>& chain,
                                              const std::vector<int64_t>& dims,
                                              ir::Instruction* block, int64_t blocks) {
  for (size_t i = 0; i < chain.size(); ++i) {
    LOOM_ASSIGN_OR_RETURN(block, ReplayOnBlock(builder, *chain[i], block, dims[i], blocks));
  }
  return block;
}

}  // namespace loom::pass
