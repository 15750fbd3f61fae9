// batch-norm-* on host arrays: exec/batch_norm.h's loops, typed for f32
// and f64, through the generic conversions for the narrower floats.
#include "exec/batch_norm.h"

#include <fmt/format.h>

#include "exec/cpu/kernels.h"
#include "exec/float_elements.h"

namespace loom::exec::cpu {
namespace {

template <typename E>
void Run(const E& e, ir::Opcode op, const ir::BatchNorm& attributes, std::span<const HostArray> in,
         std::span<const HostArray> outs) {
  const std::vector<int64_t>& dims = in[0].shape->dims();
  switch (op) {
    case ir::Opcode::kBatchNormTraining:
      batch_norm::Training(e, dims, attributes, in[0].data, in[1].data, in[2].data, outs[0].data,
                           outs[1].data, outs[2].data);
      return;
    case ir::Opcode::kBatchNormInference:
      batch_norm::Inference(e, dims, attributes, in[0].data, in[1].data, in[2].data, in[3].data,
                            in[4].data, outs[0].data);
      return;
    default:
      batch_norm::Grad(e, dims, attributes, in[0].data, in[1].data, in[2].data, in[3].data,
                       in[4].data, outs[0].data, outs[1].data, outs[2].data);
      return;
  }
}

}  // namespace

Status BatchNorm(const ir::Instruction& op, std::span<const HostArray> operands,
                 std::span<const HostArray> outs) {
  Expected<ir::BatchNorm> attributes = ir::BatchNormOf(op);
  if (!attributes.ok()) return KernelError(op, attributes.error().message);
  std::vector<const ir::Shape*> shapes;
  for (const HostArray& operand : operands) shapes.push_back(operand.shape);
  const Expected<ir::Shape> shape = ir::InferBatchNormShape(op.opcode(), shapes, *attributes);
  if (!shape.ok()) return KernelError(op, shape.error().message);
  const size_t results = shape->IsTuple() ? 3 : 1;
  if (outs.size() != results) {
    return KernelError(op, fmt::format("{} makes {} results, given {}", ir::OpcodeName(op.opcode()),
                                       results, outs.size()));
  }
  float_elements::WithElements(operands[0].type(), [&](const auto& elements) {
    Run(elements, op.opcode(), *attributes, operands, outs);
  });
  return OkStatus();
}

}  // namespace loom::exec::cpu
