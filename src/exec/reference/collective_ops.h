// The reference interpreter's collectives: from a collective instruction to
// the Tensor collectives of exec/collectives.h:
// which devices take part (ir/collective_groups.h), along which dimension,
// and how variadic forms split into one transfer per operand.
#pragma once

#include <cstdint>
#include <span>

#include "exec/collective_runtime.h"
#include "exec/collectives.h"
#include "ir/collective_groups.h"
#include "ir/instruction.h"

namespace loom::exec {

// Posts the transfers of `instruction` (all-gather, all-reduce,
// reduce-scatter, all-to-all, collective-permute, or one of their -start
// forms) on `operands`; Finish() yields the collective's result (a tuple
// for variadic forms).
Expected<PendingPtr> StartCollectiveOp(const ir::Instruction& instruction,
                                       std::span<const Tensor> operands, CollectiveRuntime& runtime,
                                       const Reducer& reducer);

}  // namespace loom::exec
