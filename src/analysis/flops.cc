#include "analysis/flops.h"

#include <algorithm>

#include "ir/computation.h"
#include "ir/convolution.h"
#include "ir/reduce_window.h"
#include "ir/verifier.h"
#include "support/saturating.h"

namespace loom::analysis {
namespace {

int64_t ProductOfDims(const ir::Shape& shape, const std::vector<int64_t>& dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d >= 0 && d < shape.rank()) product *= shape.dim(d);
  }
  return product;
}

bool ReducesAcrossDevices(ir::Opcode op) {
  switch (op) {
    case ir::Opcode::kAllReduce:
    case ir::Opcode::kAllReduceStart:
    case ir::Opcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t LinearAlgebraFlops(const ir::Instruction& instruction) {
  const ir::Opcode opcode = instruction.opcode();
  if (opcode != ir::Opcode::kTriangularSolve && opcode != ir::Opcode::kCholesky) return 0;
  const ir::Shape& a = instruction.operand(0)->shape();
  if (!a.IsArray() || a.rank() < 2) return 0;
  const int64_t n = a.dim(a.rank() - 1);
  const int64_t matrices = a.ElementCount() / std::max<int64_t>(1, n * n);
  if (opcode == ir::Opcode::kCholesky) return matrices * n * n * n / 3;
  const int64_t vectors = instruction.shape().ElementCount() / std::max<int64_t>(1, matrices * n);
  return matrices * n * n * vectors;
}

int64_t DotFlops(const ir::Instruction& dot) {
  if (!dot.attrs().dot || dot.operand_count() < 1) return 0;
  const int64_t contracted =
      ProductOfDims(dot.operand(0)->shape(), dot.attrs().dot->lhs_contracting);
  return 2 * dot.shape().ElementCount() * contracted;
}

DotDims DotDimsOf(const ir::Instruction& dot) {
  DotDims dims;
  if (!dot.attrs().dot || dot.operand_count() < 2) return dims;
  const ir::DotDimensions& numbers = *dot.attrs().dot;
  const ir::Shape& lhs = dot.operand(0)->shape();
  const ir::Shape& rhs = dot.operand(1)->shape();
  auto free_size = [](const ir::Shape& shape, const std::vector<int64_t>& batch,
                      const std::vector<int64_t>& contracting) {
    int64_t size = 1;
    for (int64_t d = 0; d < shape.rank(); ++d) {
      if (std::find(batch.begin(), batch.end(), d) == batch.end() &&
          std::find(contracting.begin(), contracting.end(), d) == contracting.end()) {
        size *= shape.dim(d);
      }
    }
    return size;
  };
  dims.batch = ProductOfDims(lhs, numbers.lhs_batch);
  dims.k = ProductOfDims(lhs, numbers.lhs_contracting);
  dims.m = free_size(lhs, numbers.lhs_batch, numbers.lhs_contracting);
  dims.n = free_size(rhs, numbers.rhs_batch, numbers.rhs_contracting);
  return dims;
}

std::optional<ConvolutionWork> ConvolutionWorkOf(const ir::Instruction& convolution) {
  if (convolution.opcode() != ir::Opcode::kConvolution || convolution.operand_count() != 2) {
    return std::nullopt;
  }
  const Expected<ir::Convolution> c = ir::ConvolutionOf(convolution);
  const ir::Shape& input = convolution.operand(0)->shape();
  const ir::Shape& kernel = convolution.operand(1)->shape();
  if (!c.ok() || !ir::InferConvolutionDims(input, kernel, *c).ok()) return std::nullopt;
  const ir::Shape& out = convolution.shape();
  const ir::ConvolutionDimensions& d = c->dims;
  int64_t positions = 1, landing = 1;  // output positions; (position, tap) pairs that land
  for (size_t k = 0; k < c->window.size(); ++k) {
    const int64_t extent = out.dim(d.output_spatial[k]);
    positions *= extent;
    landing *= ir::ValidTapPairs(c->window[k], input.dim(d.input_spatial[k]), extent);
  }
  const int64_t groups = c->feature_groups * c->batch_groups;
  const int64_t features = kernel.dim(d.kernel_input_feature);
  const int64_t outputs = kernel.dim(d.kernel_output_feature);
  ConvolutionWork work;
  work.dims.batch = groups;
  work.dims.m = out.dim(d.output_batch) * positions;
  work.dims.n = outputs / groups;
  work.dims.k = positions == 0 ? 0 : features * ((landing + positions - 1) / positions);
  work.flops = 2 * out.dim(d.output_batch) * outputs * features * landing;
  return work;
}

int64_t ConvolutionFlops(const ir::Instruction& convolution) {
  const std::optional<ConvolutionWork> work = ConvolutionWorkOf(convolution);
  return work ? work->flops : 0;
}

namespace {

void AddKernelDots(const ir::Instruction& instruction, int depth, KernelDots& dots) {
  if (const std::optional<ConvolutionWork> work = ConvolutionWorkOf(instruction)) {
    dots.flops += work->flops;
    dots.dims.push_back(work->dims);
    if (!dots.type) dots.type = instruction.operand(0)->shape().type();
    return;
  }
  if (instruction.opcode() == ir::Opcode::kDot && instruction.attrs().dot) {
    dots.flops += DotFlops(instruction);
    dots.dims.push_back(DotDimsOf(instruction));
    if (!dots.type) dots.type = instruction.operand(0)->shape().type();
    return;
  }
  // The verifier refuses nests deeper than this; the bound keeps an
  // unverified cycle from recursing forever.
  if (instruction.opcode() != ir::Opcode::kFusion || depth > ir::kMaxCallDepth) return;
  for (const ir::Computation* callee : instruction.called_computations()) {
    for (const auto& inner : callee->instructions()) AddKernelDots(*inner, depth + 1, dots);
  }
}

}  // namespace

KernelDots KernelDotsOf(const ir::Instruction& instruction) {
  KernelDots dots;
  AddKernelDots(instruction, 0, dots);
  return dots;
}

int64_t SumLength(const ir::Instruction& instruction, const ir::DeviceGrid& grid) {
  const ir::Opcode op = instruction.opcode();
  if (op == ir::Opcode::kDot && instruction.attrs().dot && instruction.operand_count() > 0) {
    return ProductOfDims(instruction.operand(0)->shape(), instruction.attrs().dot->lhs_contracting);
  }
  if (op == ir::Opcode::kConvolution && ConvolutionWorkOf(instruction)) {
    // Every tap of a group's features, at most: the kernel's elements per
    // output feature.
    const ir::Shape& kernel = instruction.operand(1)->shape();
    const int64_t outputs = kernel.dim(ir::ConvolutionOf(instruction)->dims.kernel_output_feature);
    return outputs == 0 ? 1 : kernel.ElementCount() / outputs;
  }
  if (op == ir::Opcode::kReduce && instruction.operand_count() > 0) {
    return ProductOfDims(instruction.operand(0)->shape(),
                         instruction.attrs().dimensions.value_or(std::vector<int64_t>{}));
  }
  if (op == ir::Opcode::kReduceWindow) {
    // Its window's taps, at most.
    const Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
    int64_t taps = 1;
    if (window.ok()) {
      for (const ir::WindowDimension& w : *window) taps = SaturatingMul(taps, w.size);
    }
    return taps;
  }
  if (op == ir::Opcode::kSelectAndScatter) {
    // The windows that can select one element: ceil(size / stride) along
    // each dimension, at most.
    const Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(instruction);
    int64_t overlaps = 1;
    if (window.ok()) {
      for (const ir::WindowDimension& w : *window) {
        overlaps = SaturatingMul(overlaps, (w.size + w.stride - 1) / w.stride);
      }
    }
    return overlaps;
  }
  if (ReducesAcrossDevices(op)) {
    Expected<std::vector<std::vector<int64_t>>> groups = ir::ParticipantGroups(instruction, grid);
    int64_t longest = 1;
    if (groups.ok()) {
      for (const auto& group : *groups) longest = std::max<int64_t>(longest, group.size());
    }
    return longest;
  }
  return 1;
}

int64_t LongestSum(const ir::Module& module, const ir::DeviceGrid& grid) {
  int64_t longest = 1;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      longest = std::max(longest, SumLength(*instruction, grid));
    }
  }
  return longest;
}

}  // namespace loom::analysis
