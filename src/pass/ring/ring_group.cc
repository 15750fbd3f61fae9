#include "pass/ring/ring_group.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace loom::pass {

namespace {

// Splits global-id groups by the replica (or partition) they lie in; empty
// when some group spans two of them.
std::optional<std::map<int64_t, std::vector<std::vector<int64_t>>>> SplitGroups(
    const std::vector<std::vector<int64_t>>& groups, const ir::DeviceGrid& grid, bool by_replica) {
  std::map<int64_t, std::vector<std::vector<int64_t>>> split;
  for (const auto& group : groups) {
    const auto outer = [&](int64_t id) {
      return by_replica ? id / grid.partition_count : id % grid.partition_count;
    };
    const auto inner = [&](int64_t id) {
      return by_replica ? id % grid.partition_count : id / grid.partition_count;
    };
    std::vector<int64_t> ids;
    for (int64_t id : group) {
      if (outer(id) != outer(group.front())) return std::nullopt;
      ids.push_back(inner(id));
    }
    split[outer(group.front())].push_back(std::move(ids));
  }
  return split;
}

// The groups every replica (partition) shares, or empty when they differ.
std::optional<std::vector<std::vector<int64_t>>> CommonGroups(
    std::map<int64_t, std::vector<std::vector<int64_t>>> split) {
  std::optional<std::vector<std::vector<int64_t>>> common;
  for (auto& [outer, groups] : split) {
    std::sort(groups.begin(), groups.end());
    if (!common) {
      common = groups;
    } else if (*common != groups) {
      return std::nullopt;
    }
  }
  return common;
}

}  // namespace

Expected<RingGroup> RingGroup::Of(const ir::Instruction& collective, const ir::DeviceGrid& grid) {
  LOOM_ASSIGN_OR_RETURN(auto groups, ir::ParticipantGroups(collective, grid));
  RingGroup ring;
  ring.size_ = groups.empty() ? 0 : static_cast<int64_t>(groups.front().size());
  for (const auto& group : groups) {
    if (static_cast<int64_t>(group.size()) != ring.size_) {
      return Error{"its replica groups differ in size"};
    }
  }
  if (ring.size_ < 2) return Error{"its group has one device: there is nothing to overlap"};
  for (bool by_replica : {true, false}) {
    auto split = SplitGroups(groups, grid, by_replica);
    if (!split) continue;
    auto common = CommonGroups(std::move(*split));
    if (!common) continue;
    ring.cross_partition_ = by_replica;
    ring.groups_ = std::move(*common);
    const int64_t ids = by_replica ? grid.partition_count : grid.replica_count;
    ring.position_.assign(static_cast<size_t>(ids), 0);
    for (const auto& group : ring.groups_) {
      for (size_t position = 0; position < group.size(); ++position) {
        ring.position_[static_cast<size_t>(group[position])] = static_cast<int64_t>(position);
      }
    }
    return ring;
  }
  return Error{
      "its groups span replicas and partitions in a way no collective-permute can express"};
}

Expected<RingGroup> RingGroups::Of(const ir::Instruction& collective) {
  const Expected<ir::GroupMode> mode = ir::CollectiveGroupMode(collective);
  if (!mode.ok()) return RingGroup::Of(collective, grid_);  // its error
  const std::optional<ir::ReplicaGroups>& groups = collective.attrs().replica_groups;
  for (const Known& known : known_) {
    if (known.mode == *mode && known.groups == groups) return known.ring;
  }
  known_.push_back({*mode, groups, RingGroup::Of(collective, grid_)});
  return known_.back().ring;
}

std::vector<std::pair<int64_t, int64_t>> RingGroup::Pairs(int64_t step) const {
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (const auto& group : groups_) {
    for (int64_t position = 0; position < size_; ++position) {
      const int64_t target = ((position + step) % size_ + size_) % size_;
      pairs.emplace_back(group[static_cast<size_t>(position)], group[static_cast<size_t>(target)]);
    }
  }
  return pairs;
}

Expected<ir::Instruction*> RingGroup::EmitPosition(ir::Builder& builder) const {
  ir::Instruction* id = cross_partition_ ? builder.PartitionId() : builder.ReplicaId();
  LOOM_ASSIGN_OR_RETURN(ir::Instruction * id_s32, builder.Convert(id, ir::PrimitiveType::kS32));
  bool identity = true;
  for (size_t i = 0; i < position_.size(); ++i) identity &= position_[i] == static_cast<int64_t>(i);
  if (identity) return id_s32;
  ir::Instruction* table = builder.S32Array(position_);
  LOOM_ASSIGN_OR_RETURN(ir::Instruction * entry, builder.DynamicSlice(table, {id_s32}, {1}));
  return builder.Reshape(entry, {});
}

Expected<ir::Instruction*> RingGroup::EmitShiftBy(ir::Builder& builder, ir::Instruction* value,
                                                  int64_t step) const {
  std::optional<int64_t> channel;
  if (cross_partition_) channel = builder.names().NextChannelId();
  return builder.CollectivePermute(value, Pairs(step), channel);
}

}  // namespace loom::pass
