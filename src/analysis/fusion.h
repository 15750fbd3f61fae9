// Which instructions a fusing compiler (XLA on TPU and GPU) computes inside
// the kernel of their user instead of in a kernel of their own, so that the
// cost model prices a chain of elementwise ops as one pass over memory:
//
//   %h = bf16[8192,4096] dot(%x, %w)
//   %c = bf16[8192,4096] multiply(%h, %h)          // fused into %t
//   %s = bf16[8192,4096] multiply(%c, %broadcast)  // fused into %t
//   %t = bf16[8192,4096] tanh(%s)                  // the kernel: reads %h, writes %t
//
// The rules are those of XLA's loop and input fusion, simplified:
//  - a producer is fused when it is a loop-fusible op (elementwise, convert,
//    select, clamp, compare, broadcast, iota, transpose, slice,
//    dynamic-slice, concatenate, pad, reverse, reshape, bitcast) whose every
//    user is a consumer that takes it in: a loop-fusible op, a reduce (an
//    input fusion), or a dynamic-update-slice as its update (in place);
//  - it must have a single user, except a broadcast or an iota, which XLA
//    duplicates into each consumer (they read little or nothing);
//  - never the computation's root, a dot's operand, a collective's or a
//    loop's: those cross a kernel boundary.
// Dots, reduces, collectives and everything else stay kernels of their own.
// Scalars are free anyway (the cost model folds them into their users).
#pragma once

#include <unordered_set>

#include "ir/computation.h"
#include "ir/instruction.h"

namespace loom::analysis {

class FusionPlan {
 public:
  explicit FusionPlan(const ir::Computation& computation);

  // Whether `instruction` is computed inside its users' kernels: it launches
  // nothing and writes no result to memory.
  bool FusedIntoUsers(const ir::Instruction& instruction) const {
    return fused_.count(&instruction) > 0;
  }
  // How many instructions of the computation are fused into their users.
  size_t fused_count() const { return fused_.size(); }

 private:
  std::unordered_set<const ir::Instruction*> fused_;
};

// Whether `opcode` can be computed inside a loop fusion.
bool IsLoopFusible(ir::Opcode opcode);

}  // namespace loom::analysis
