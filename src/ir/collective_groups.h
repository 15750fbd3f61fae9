// Who takes part in a collective, in XLA's terms (CollectiveOpGroupMode).
//
// A run has replica_count x partition_count devices; device (r, p) has the
// global id r * partition_count + p. What the ids in replica_groups (or
// source_target_pairs) number depends on channel_id and
// use_global_device_ids:
//
//   no channel_id                                  cross-replica: replica ids,
//                                                  one set of groups per partition
//   channel_id, no use_global_device_ids attribute cross-partition: partition ids,
//     (all-to-all, collective-permute, ...)        one set of groups per replica
//   channel_id, use_global_device_ids=false        cross-replica-and-partition:
//     (all-gather, all-reduce, reduce-scatter)     replica ids, each group spans
//                                                  every partition of its replicas
//   channel_id, use_global_device_ids=true         flattened: global device ids
//
// all-gather, all-reduce and reduce-scatter always have a use_global_device_ids
// value in XLA (false when absent), so with a channel_id and no attribute
// they are cross-replica-and-partition; all-to-all, collective-permute and
// collective-broadcast have none, so with a channel_id they are
// cross-partition.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/instruction.h"
#include "support/status.h"

namespace loom::ir {

enum class GroupMode { kCrossReplica, kCrossPartition, kCrossReplicaAndPartition, kFlattenedId };

// The devices of a run.
struct DeviceGrid {
  int64_t replica_count = 1;
  int64_t partition_count = 1;
  int64_t size() const { return replica_count * partition_count; }
  int64_t DeviceId(int64_t replica, int64_t partition) const {
    return replica * partition_count + partition;
  }
};

// How the ids of `instruction`'s replica groups or pairs are to be read.
Expected<GroupMode> CollectiveGroupMode(const Instruction& instruction);

// Every group of global device ids the collective runs over, each in ring
// (group) order. Fails when an id is out of range, a device appears twice,
// or a device is in no group.
Expected<std::vector<std::vector<int64_t>>> ParticipantGroups(const Instruction& instruction,
                                                              const DeviceGrid& grid);

// The group (in order) that contains `device`.
Expected<std::vector<int64_t>> ParticipantGroupOf(const Instruction& instruction,
                                                  const DeviceGrid& grid, int64_t device);

// collective-permute's pairs as global device ids: a pair of partition ids
// (cross-partition) applies within every replica, a pair of replica ids
// within every partition.
Expected<std::vector<std::pair<int64_t, int64_t>>> GlobalSourceTargetPairs(
    const Instruction& instruction, const DeviceGrid& grid);

}  // namespace loom::ir
