// Emits the steps of a ring either one after another (unrolled) or as an
// HLO while loop whose body is one step, with the same step function for
// both, so that the two forms cannot drift apart.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ir/builder.h"
#include "pass/collective_matmul.h"
#include "support/status.h"

namespace loom::pass {

// What a ring step reads and writes: the device's position in the ring
// (s32[]), values every step reads unchanged (the other operand of the dot,
// say), and the state steps hand on (windows in flight, partial results).
struct RingValues {
  ir::Instruction* position = nullptr;
  std::vector<ir::Instruction*> invariants;
  std::vector<ir::Instruction*> state;
};

// Builds one step with `builder`; `step` is the step number as an s32[]
// (a constant when unrolled, the loop counter in a loop). It reads `values`
// and replaces values.state with the state after the step.
using StepFn =
    std::function<Status(ir::Builder& builder, ir::Instruction* step, RingValues& values)>;

// Steps first .. first+count-1. In loop form (and count > 1) the loop's
// computations are windowed_dot_general_{body,cond}_`loop_name` (XLA's
// names, with "ag" or "rs"), placed before the computation `builder` builds
// into.
Status EmitSteps(ir::Builder& builder, RingForm form, std::string_view loop_name, int64_t first,
                 int64_t count, const StepFn& step, RingValues& values);

}  // namespace loom::pass
