// batch-norm-training, batch-norm-inference and batch-norm-grad: their
// attributes and shapes, in one place for the verifier and both executors.
//
//   %t = (f32[8,16,16,64], f32[64], f32[64]) batch-norm-training(f32[8,16,16,64] %x,
//            f32[64] %scale, f32[64] %offset), epsilon=0.001, feature_index=3
//   %y = f32[8,16,16,64] batch-norm-inference(%x, %scale, %offset, %mean, %variance),
//            epsilon=0.001, feature_index=3
//   %g = (f32[8,16,16,64], f32[64], f32[64]) batch-norm-grad(%x, %scale, %mean,
//            %variance, %grad_output), epsilon=0.001, feature_index=3
//
// Every per-feature operand is [F], F the operand's size along
// feature_index, in the operand's floating-point type; training returns
// (normalized, mean, variance) and grad (grad_operand, grad_scale,
// grad_offset). What they compute is XLA's BatchNormExpander's expansion
// (exec/batch_norm.h); epsilon is a float in XLA, so it is read as one.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::ir {

struct BatchNorm {
  int64_t feature_index = 0;
  float epsilon = 0;
};

// The attributes, checked against the operand's rank.
Expected<BatchNorm> BatchNormOf(const Instruction& batch_norm);

// The result of batch-norm `op` (training, inference or grad) on operands
// of `operands` shapes, in the order above.
Expected<Shape> InferBatchNormShape(Opcode op, const std::vector<const Shape*>& operands,
                                    const BatchNorm& attributes);

}  // namespace loom::ir
