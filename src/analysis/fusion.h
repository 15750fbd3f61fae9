// Which instructions a fusing compiler (XLA on TPU and GPU) computes inside
// the kernel of their users instead of in a kernel of their own, so that the
// cost model prices each kernel as one pass over memory: what it reads from
// outside, what its root writes, one launch.
//
// A chain of elementwise ops is one loop kernel:
//
//   %h = bf16[8192,4096] dot(%x, %w)
//   %c = bf16[8192,4096] multiply(%h, %h)          // fused into %t
//   %s = bf16[8192,4096] multiply(%c, %broadcast)  // fused into %t
//   %t = bf16[8192,4096] tanh(%s)                  // the kernel: reads %h, writes %t
//
// A softmax (or a norm) is one kernel too, its reductions included, since
// a row of its operand stays on chip between the reduction and its use
// (XLA's softmax fusion on GPU, Megatron's fused kernels):
//
//   %m = f32[4,2048] reduce(%s, %ninf), dimensions={2}, to_apply=%max  // fused
//   %d = f32[4,2048,2048] subtract(%s, broadcast(%m))                   // fused
//   %e = f32[4,2048,2048] exponential(%d)                               // fused
//   %z = f32[4,2048] reduce(%e, %zero), dimensions={2}, to_apply=%add   // fused
//   %p = f32[4,2048,2048] divide(%e, broadcast(%z))  // the kernel: reads %s, writes %p
//
// And a dot reads its operands through the converts, slices and layout
// changes that feed it (XLA's operand fusion into the convolution on TPU,
// its GEMM fusions on GPU), so a layer's bf16 view of its f32 weights costs
// the dot's read of the f32 window, not a kernel of its own:
//
//   %w = f32[1,768,6144] dynamic-slice(%stacked, %layer, %z, %z)  // fused into %y
//   %r = f32[768,6144] reshape(%w)                                // fused into %y
//   %b = bf16[768,6144] convert(%r)                               // fused into %y
//   %y = bf16[8192,6144] dot(%x, %b)  // reads %x and the f32 window of %stacked
//
// And a dot whose one user adds it to a value of its own shape computes the
// sum in its kernel (XLA's output fusion on TPU; on GPU the GEMM rewriter's
// matrix bias, cuBLAS's beta = 1): the kernel reads the addend and writes
// the sum, and the product never reaches memory. A ring that accumulates
// partial products (a contracting all-gather's, a reduce-scatter's) adds
// each step's product in its kernel so:
//
//   %p = f32[8192,4096] dot(%x.block, %w.block)   // fused into %acc
//   %acc = f32[8192,4096] add(%acc.in, %p)        // the kernel: reads %acc.in
//                                                 // and the dot's operands
//
// The rules, XLA's loop, input, operand and output fusion simplified:
//  - a loop-fusible producer (elementwise, convert, select, clamp, compare,
//    broadcast, iota, transpose, slice, dynamic-slice, gather, concatenate,
//    pad, reverse, reshape, bitcast) joins its users' kernel when every user
//    takes it in (a loop-fusible op, a reduce's input, a
//    dynamic-update-slice's update or a scatter's updates, computed in
//    place) and all of them are
//    in that one kernel; a broadcast or an iota, which read little or
//    nothing, and a widening convert (bf16 to f32: each kernel reads the
//    narrow value) are duplicated into each kernel that uses them instead;
//  - a reduce joins its users' kernel on the same terms, when a row of it
//    (the elements summed into one result) holds at most
//    kMaxFusedReduceRow elements, what a kernel keeps on chip;
//  - a kernel whose root is a convert, bitcast, reshape, transpose,
//    broadcast, copy, slice or dynamic-slice that only dots read, and that
//    only passes on, through such ops, a value in memory (a parameter, a
//    loop's state, a collective's or another kernel's result), is fused
//    into the dots instead: each reads that value itself. One that computes
//    its value (a convert of a norm's output) stays a kernel, which writes
//    the narrower value;
//  - a dot or convolution whose only user is an add of its shape and
//    element type (not of the dot with itself) is computed in that add's
//    kernel, whose root the add stays: it is fused into nothing else;
//  - a product kernel (a dot, a convolution or such an add) whose result
//    only a dynamic-update-slice stores, through reshapes or bitcasts,
//    writes it into the window itself: the store roots the kernel, which
//    writes the update's bytes in place (XLA's dynamic-slice fusion on GPU,
//    which hands the GEMM the window as its output; Megatron's
//    gradient-accumulation fusion, beta = 1 into the weight's gradient),
//    where the store follows that kernel in the text with nothing between
//    that launches a kernel (else the product would run at the store and
//    keep its operands live till then).
//    A layer's weight gradient, accumulated into a stack of them, is so
//    read and written once, in the product's kernel:
//
//      %g = f32[1,768,6144] dynamic-slice(%grads, %layer, %z, %z)  // fused
//      %r = f32[768,6144] reshape(%g)                              // fused
//      %p = f32[768,6144] dot(%x, %dy)                             // fused
//      %s = f32[768,6144] add(%r, %p)                              // fused
//      %u = f32[1,768,6144] reshape(%s)                            // fused
//      %grads.next = f32[48,768,6144] dynamic-update-slice(%grads, %u, %layer, %z, %z)
//        // the kernel: reads the window, %x and %dy, writes the window
//
//  - never the computation's root, nor a value a loop, a collective or a
//    tuple takes: those cross a kernel boundary.
// Scalar arithmetic (a loop's counter, a ring's offsets) folds into the
// kernels that use it (FoldsIntoUsers) and roots no kernel of its own.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/computation.h"
#include "ir/instruction.h"

namespace loom::analysis {

// The most elements a fused reduction's row may hold.
inline constexpr int64_t kMaxFusedReduceRow = 64 * 1024;

// One operand read: `reader`'s operand `index`.
struct OperandRead {
  const ir::Instruction* reader;
  int64_t index;
};

class FusionPlan {
 public:
  explicit FusionPlan(const ir::Computation& computation);

  // Whether `instruction` is computed inside its users' kernels: it launches
  // nothing and writes no result to memory.
  bool FusedIntoUsers(const ir::Instruction& instruction) const {
    return fused_.count(&instruction) > 0;
  }
  // For an instruction that is not fused into its users, the root of its
  // kernel: every operand its kernel reads from memory (the operands, from
  // outside the kernel, of the root and of the instructions fused into it).
  // A value read twice is listed twice; empty for fused instructions.
  const std::vector<OperandRead>& KernelReads(const ir::Instruction& root) const;
  // How many instructions the kernel rooted at `root` computes besides it
  // (0 for fused instructions).
  int64_t MembersBesidesRoot(const ir::Instruction& root) const;
  // How many instructions of the computation are fused into their users.
  size_t fused_count() const { return fused_.size(); }
  // For the root of an output fusion (an add, or a dynamic-update-slice
  // that stores a product), the dot or convolution its kernel computes;
  // else nullptr.
  const ir::Instruction* OutputFusedProduct(const ir::Instruction& root) const;

 private:
  std::unordered_set<const ir::Instruction*> fused_;
  std::unordered_map<const ir::Instruction*, std::vector<OperandRead>> reads_;
  std::unordered_map<const ir::Instruction*, int64_t> members_;                  // besides the root
  std::unordered_map<const ir::Instruction*, const ir::Instruction*> products_;  // by root
};

// Whether `opcode` can be computed inside a loop fusion.
bool IsLoopFusible(ir::Opcode opcode);

// Whether `instruction` is scalar arithmetic that a fusing compiler folds
// into the kernels of its users: it costs nothing of its own.
bool FoldsIntoUsers(const ir::Instruction& instruction);

}  // namespace loom::analysis
