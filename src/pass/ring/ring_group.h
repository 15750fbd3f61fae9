// The ring a decomposed collective runs on: its groups as the collective
// defines them, in group order, expressed in the ids a collective-permute
// can name (partition ids with a channel, replica ids without one), and the
// table that gives each device its position in its group.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "ir/builder.h"
#include "ir/collective_groups.h"
#include "support/status.h"

namespace loom::pass {

class RingGroup {
 public:
  // The ring of `collective` on `grid`. Fails, with the reason the rewrite is
  // declined, when a group has one device, the groups differ in size, or a
  // group spans both replicas and partitions (no collective-permute names
  // such a ring).
  static Expected<RingGroup> Of(const ir::Instruction& collective, const ir::DeviceGrid& grid);

  int64_t size() const { return size_; }
  bool cross_partition() const { return cross_partition_; }

  // This device's position in its group, as an s32[] computed from
  // partition-id (or replica-id).
  Expected<ir::Instruction*> EmitPosition(ir::Builder& builder) const;
  // A collective-permute of `value` one step round the ring.
  Expected<ir::Instruction*> EmitShift(ir::Builder& builder, ir::Instruction* value,
                                       bool to_predecessor) const {
    return EmitShiftBy(builder, value, to_predecessor ? -1 : +1);
  }
  // A collective-permute of `value` `step` positions round the ring (r ->
  // r+step, mod N): the step-th round of a pairwise exchange.
  Expected<ir::Instruction*> EmitShiftBy(ir::Builder& builder, ir::Instruction* value,
                                         int64_t step) const;

 private:
  std::vector<std::pair<int64_t, int64_t>> Pairs(int64_t step) const;

  int64_t size_ = 0;
  bool cross_partition_ = true;
  // Groups of partition ids (or replica ids), each in ring order; the same
  // in every replica (partition).
  std::vector<std::vector<int64_t>> groups_;
  // position_[id]: the position of partition (replica) `id` in its group.
  std::vector<int64_t> position_;
};

// The rings of collectives on one grid, each worked out once for each set of
// groups: a pass matches every dot against its operands' collectives, and on
// a 16,384-device step one collective's groups are 2,048 lists to split and
// sort.
class RingGroups {
 public:
  explicit RingGroups(const ir::DeviceGrid& grid) : grid_(grid) {}
  const ir::DeviceGrid& grid() const { return grid_; }
  // RingGroup::Of(collective, grid()).
  Expected<RingGroup> Of(const ir::Instruction& collective);

 private:
  // What a ring depends on besides the grid: how the ids are read, and the
  // groups as written.
  struct Known {
    ir::GroupMode mode;
    std::optional<ir::ReplicaGroups> groups;
    Expected<RingGroup> ring;
  };
  ir::DeviceGrid grid_;
  std::vector<Known> known_;
};

}  // namespace loom::pass
