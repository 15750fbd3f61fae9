// One device's view of the run's collectives: its communicator, the device
// grid, the tag sequence that matches its collectives with its peers', and
// the worker thread its collectives run on (exec/collectives.h).
#pragma once

#include <cstdint>
#include <memory>

#include "exec/collectives.h"
#include "exec/comm/communicator.h"
#include "ir/collective_groups.h"

namespace loom::exec {

class CollectiveRuntime {
 public:
  // `native`: use the communicator's own collectives where it has them
  // (all-gather; all-reduce and reduce-scatter of f32 and f64 sums), instead
  // of Loom's rings, whose reduction order is fixed.
  CollectiveRuntime(Communicator& comm, ir::DeviceGrid grid, bool native = false)
      : comm_(comm), grid_(grid), native_(native) {}

  Communicator& comm() const { return comm_; }
  const ir::DeviceGrid& grid() const { return grid_; }
  // The communicator's own collectives when they are wanted and it has them.
  NativeCollectives* native() const { return native_ ? comm_.native_collectives() : nullptr; }
  // Every device runs the same collectives in the same order, so the n-th
  // collective of every device gets tag n.
  uint64_t NextTag() { return next_tag_++; }
  // The device's collective worker, started on first use.
  CollectiveWorker& worker() {
    if (!worker_) worker_ = std::make_unique<CollectiveWorker>();
    return *worker_;
  }

 private:
  Communicator& comm_;
  ir::DeviceGrid grid_;
  bool native_;
  uint64_t next_tag_ = 0;
  std::unique_ptr<CollectiveWorker> worker_;
};

}  // namespace loom::exec
