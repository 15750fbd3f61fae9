// From a collective instruction to the collectives of exec/collectives.h:
// which devices take part (ir/collective_groups.h), along which dimension,
// and how variadic forms split into one transfer per operand.
#pragma once

#include <cstdint>
#include <span>

#include "exec/collectives.h"
#include "ir/collective_groups.h"
#include "ir/instruction.h"

namespace loom::exec {

// One device's view of the run's collectives: its communicator, the device
// grid, and the tag sequence that matches its collectives with its peers'.
class CollectiveRuntime {
 public:
  CollectiveRuntime(Communicator& comm, ir::DeviceGrid grid) : comm_(comm), grid_(grid) {}

  Communicator& comm() const { return comm_; }
  const ir::DeviceGrid& grid() const { return grid_; }
  // Every device runs the same collectives in the same order, so the n-th
  // collective of every device gets tag n.
  uint64_t NextTag() { return next_tag_++; }

 private:
  Communicator& comm_;
  ir::DeviceGrid grid_;
  uint64_t next_tag_ = 0;
};

// Posts the transfers of `instruction` (all-gather, all-reduce,
// reduce-scatter, all-to-all, collective-permute, or one of their -start
// forms) on `operands`; Finish() yields the collective's result (a tuple
// for variadic forms).
Expected<PendingPtr> StartCollectiveOp(const ir::Instruction& instruction,
                                       std::span<const Tensor> operands, CollectiveRuntime& runtime,
                                       const Reducer& reducer);

}  // namespace loom::exec
