#include "ir/collective_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace loom::ir {
namespace {

bool HasUseGlobalDeviceIdsField(Opcode opcode) {
  switch (opcode) {
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter:
      return true;
    default:
      return false;
  }
}

Error At(const Instruction& instruction, std::string message) {
  return Error{fmt::format("%{}: {}", instruction.name(), message), instruction.loc()};
}

// How many ids the groups of `mode` range over.
int64_t IdCount(GroupMode mode, const DeviceGrid& grid) {
  switch (mode) {
    case GroupMode::kCrossReplica:
    case GroupMode::kCrossReplicaAndPartition:
      return grid.replica_count;
    case GroupMode::kCrossPartition:
      return grid.partition_count;
    case GroupMode::kFlattenedId:
      return grid.size();
  }
  return grid.size();
}

// The written groups, checked: ids in range, each id at most once.
Expected<std::vector<std::vector<int64_t>>> WrittenGroups(const Instruction& instruction,
                                                          int64_t id_count) {
  const auto& attribute = instruction.attrs().replica_groups;
  if (attribute && attribute->is_iota()) {
    if (std::string problem = attribute->ValidateIota(); !problem.empty()) {
      return At(instruction, problem);
    }
  }
  std::vector<std::vector<int64_t>> groups =
      attribute ? attribute->Groups(id_count) : ReplicaGroups().Groups(id_count);
  std::vector<bool> seen(static_cast<size_t>(id_count), false);
  for (const auto& group : groups) {
    for (int64_t id : group) {
      if (id < 0 || id >= id_count) {
        return At(instruction,
                  fmt::format("replica group id {} is out of range [0, {})", id, id_count));
      }
      if (seen[static_cast<size_t>(id)]) {
        return At(instruction, fmt::format("id {} appears in two replica groups", id));
      }
      seen[static_cast<size_t>(id)] = true;
    }
  }
  return groups;
}

}  // namespace

Expected<GroupMode> CollectiveGroupMode(const Instruction& instruction) {
  const Attributes& attrs = instruction.attrs();
  const bool use_global = attrs.use_global_device_ids.value_or(false);
  if (!attrs.channel_id) {
    if (use_global) return At(instruction, "use_global_device_ids=true needs a channel_id");
    return GroupMode::kCrossReplica;
  }
  if (!HasUseGlobalDeviceIdsField(instruction.opcode())) return GroupMode::kCrossPartition;
  return use_global ? GroupMode::kFlattenedId : GroupMode::kCrossReplicaAndPartition;
}

Expected<std::vector<std::vector<int64_t>>> ParticipantGroups(const Instruction& instruction,
                                                              const DeviceGrid& grid) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_ASSIGN_OR_RETURN(const auto written, WrittenGroups(instruction, IdCount(mode, grid)));
  std::vector<std::vector<int64_t>> groups;
  switch (mode) {
    case GroupMode::kCrossReplica:
      for (int64_t p = 0; p < grid.partition_count; ++p) {
        for (const auto& group : written) {
          auto& out = groups.emplace_back();
          for (int64_t r : group) out.push_back(grid.DeviceId(r, p));
        }
      }
      break;
    case GroupMode::kCrossPartition:
      for (int64_t r = 0; r < grid.replica_count; ++r) {
        for (const auto& group : written) {
          auto& out = groups.emplace_back();
          for (int64_t p : group) out.push_back(grid.DeviceId(r, p));
        }
      }
      break;
    case GroupMode::kCrossReplicaAndPartition:
      for (const auto& group : written) {
        auto& out = groups.emplace_back();
        for (int64_t r : group) {
          for (int64_t p = 0; p < grid.partition_count; ++p) out.push_back(grid.DeviceId(r, p));
        }
      }
      break;
    case GroupMode::kFlattenedId:
      groups = written;
      break;
  }
  int64_t covered = 0;
  for (const auto& group : groups) covered += static_cast<int64_t>(group.size());
  if (covered != grid.size()) {
    return At(instruction,
              fmt::format("replica groups cover {} of the {} devices", covered, grid.size()));
  }
  return groups;
}

Expected<std::vector<int64_t>> ParticipantGroupOf(const Instruction& instruction,
                                                  const DeviceGrid& grid, int64_t device) {
  LOOM_ASSIGN_OR_RETURN(const auto groups, ParticipantGroups(instruction, grid));
  for (const auto& group : groups) {
    if (std::find(group.begin(), group.end(), device) != group.end()) return group;
  }
  return At(instruction, fmt::format("device {} is in no replica group", device));
}

Expected<std::vector<std::pair<int64_t, int64_t>>> GlobalSourceTargetPairs(
    const Instruction& instruction, const DeviceGrid& grid) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  const int64_t id_count = IdCount(mode, grid);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  const auto& written = instruction.attrs().source_target_pairs;
  if (!written) return pairs;
  for (const auto& [source, target] : *written) {
    if (source < 0 || source >= id_count || target < 0 || target >= id_count) {
      return At(instruction, fmt::format("source-target pair {{{},{}}} is out of range [0, {})",
                                         source, target, id_count));
    }
  }
  // Pairs of partition ids repeat in every replica, and vice versa.
  const bool partitions = mode == GroupMode::kCrossPartition;
  const int64_t copies = partitions ? grid.replica_count : grid.partition_count;
  for (int64_t copy = 0; copy < copies; ++copy) {
    for (const auto& [source, target] : *written) {
      pairs.emplace_back(partitions ? grid.DeviceId(copy, source) : grid.DeviceId(source, copy),
                         partitions ? grid.DeviceId(copy, target) : grid.DeviceId(target, copy));
    }
  }
  return pairs;
}

}  // namespace loom::ir
