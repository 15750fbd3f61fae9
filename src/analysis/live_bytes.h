// Peak live bytes of one device: an estimate of the memory a runtime that
// reuses buffers would need to run the module in its text order.
//
// The model is not Loom's interpreter, which keeps every value until the end;
// it is what a runtime with XLA-like buffer assignment holds, without fusion
// or with it:
//
//   - The text order of a computation is its schedule. A value occupies its
//     buffers from the instruction that defines it until the last instruction
//     that reads them, in that order; between definition and last read it
//     counts in full. While an instruction runs, its operands and its result
//     are live together (no elementwise op reuses an operand's buffer).
//   - The entry computation's parameters are live from the start to the end,
//     and so is whatever the root refers to.
//   - Values that only name other buffers add 0 bytes and keep those buffers
//     live as long as they are read: get-tuple-element (just the element it
//     selects), tuple, bitcast, add-dependency, opt-barrier, domain, a while
//     (its result is its operand's buffers: the loop state), the *-done of an
//     asynchronous op (the result element of its -start), and element 0 of an
//     -start (its operands).
//   - dynamic-update-slice writes in place, adding 0 bytes, when its operand 0
//     is read by nothing after it and is not an entry parameter (as XLA does;
//     otherwise it is a copy).
//   - An instruction that runs a computation needs, on top of what is live
//     around it, the larger of its result and that computation's peak: a call
//     or async-start its callee's, a conditional its largest branch's, a while
//     its body's or condition's. The callee's peak is computed the same way
//     with its parameters at 0 bytes, since they are the caller's buffers (for
//     a while, the loop state) and those are already counted.
//   - Fusion bodies, reducers and other called computations add nothing: they
//     run element by element without buffers of their own.
//   - Constants are ordinary values.
//   - With Fusion::kFused, an instruction that analysis::FusionPlan computes
//     inside its users' kernels (an elementwise chain, a softmax's
//     reductions, the convert of a weight only dots read) writes no buffer:
//     it adds 0 bytes and names its operands' buffers, so they stay live
//     until the kernel that reads them runs.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/module.h"

namespace loom::analysis {

// Whether intermediate values that a fusing compiler keeps on chip take
// memory (kNone: every instruction writes its result) or not (kFused: as
// XLA on TPUs and GPUs fuses them, cost::CostModel::FusesElementwise).
enum class Fusion { kNone, kFused };

// The peak, over the entry computation's schedule, of the bytes live on one
// device, under the model above. The module must have passed the verifier
// (operands defined before use, no recursive calls). 0 without an entry.
int64_t PeakLiveBytes(const ir::Module& module, Fusion fusion = Fusion::kNone);

// One buffer live at the peak: top-level element `element` (0 for an array)
// of the value `defined_by` defines.
struct LiveBuffer {
  const ir::Instruction* defined_by = nullptr;
  int64_t element = 0;
  int64_t bytes = 0;
};

// Where the peak is and what makes it up. `where` is the schedule position
// at the peak in each computation down to the one that peaks: the entry's
// instruction, then, when that instruction runs a computation whose peak is
// what it adds, that computation's instruction, and so on. `live` is every
// buffer of nonzero size live there, at every level, largest first; their
// bytes add up to `peak_bytes` (unless the sum saturated).
struct PeakBreakdown {
  int64_t peak_bytes = 0;
  std::vector<const ir::Instruction*> where;
  std::vector<LiveBuffer> live;
};

// The peak of PeakLiveBytes and the buffers that make it up.
PeakBreakdown PeakLiveBreakdown(const ir::Module& module, Fusion fusion = Fusion::kNone);

}  // namespace loom::analysis
