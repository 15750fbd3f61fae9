#include "sim/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <variant>

#include "cost/collective_algorithm.h"
#include "cost/cost_model.h"
#include "ir/async.h"
#include "ir/computation.h"

namespace loom::sim {

namespace {

using ir::Opcode;

// Each device's messages of one phase, sent or received: what its first
// send of the next phase waits for (the data it forwards, and its links
// free of the phase before).
using Received = std::vector<std::vector<int32_t>>;
using RouteFn = std::function<Route(int64_t from, int64_t to)>;

class Builder {
 public:
  explicit Builder(int64_t devices) : devices_(devices) {}

  int32_t Add(int64_t source, int64_t target, double bytes, const Route& route) {
    Message message;
    message.source = static_cast<int32_t>(source);
    message.target = static_cast<int32_t>(target);
    message.bytes = bytes;
    message.latency_seconds = route.latency_seconds;
    message.route_begin = static_cast<int32_t>(plan_.route_links.size());
    message.route_size = static_cast<int32_t>(route.links.size());
    plan_.route_links.insert(plan_.route_links.end(), route.links.begin(), route.links.end());
    plan_.messages.push_back(message);
    return static_cast<int32_t>(plan_.messages.size() - 1);
  }

  // `after` starts only once `before` has arrived.
  void Depend(int32_t before, int32_t after) {
    if (before >= 0 && after >= 0) edges_.emplace_back(before, after);
  }

  Plan Finish(std::string description) {
    auto& messages = plan_.messages;
    std::sort(edges_.begin(), edges_.end());
    edges_.erase(std::unique(edges_.begin(), edges_.end()), edges_.end());
    plan_.dependents.reserve(edges_.size());
    size_t e = 0;
    for (size_t m = 0; m < messages.size(); ++m) {
      messages[m].dependents_begin = static_cast<int32_t>(plan_.dependents.size());
      for (; e < edges_.size() && edges_[e].first == static_cast<int32_t>(m); ++e) {
        plan_.dependents.push_back(edges_[e].second);
        messages[static_cast<size_t>(edges_[e].second)].dependencies++;
      }
      messages[m].dependents_size =
          static_cast<int32_t>(plan_.dependents.size()) - messages[m].dependents_begin;
    }
    plan_.device_begin.assign(static_cast<size_t>(devices_) + 1, 0);
    for (const Message& message : messages) {
      plan_.device_begin[static_cast<size_t>(message.source) + 1]++;
      plan_.device_begin[static_cast<size_t>(message.target) + 1]++;
    }
    for (size_t d = 0; d < static_cast<size_t>(devices_); ++d) {
      plan_.device_begin[d + 1] += plan_.device_begin[d];
    }
    plan_.device_messages.resize(messages.size() * 2);
    std::vector<int32_t> fill(plan_.device_begin.begin(), plan_.device_begin.end() - 1);
    for (size_t m = 0; m < messages.size(); ++m) {
      plan_.device_messages[static_cast<size_t>(fill[static_cast<size_t>(messages[m].source)]++)] =
          static_cast<int32_t>(m);
      plan_.device_messages[static_cast<size_t>(fill[static_cast<size_t>(messages[m].target)]++)] =
          static_cast<int32_t>(m);
    }
    plan_.description = std::move(description);
    return std::move(plan_);
  }

 private:
  int64_t devices_;
  Plan plan_;
  std::vector<std::pair<int32_t, int32_t>> edges_;
};

// A unidirectional ring over `members` (each sends to the next in
// `direction`), n - 1 steps of `bytes`.
void AddRing(Builder& builder, const std::vector<int64_t>& members, int direction, double bytes,
             const RouteFn& route, const Received& entry, Received& received) {
  const auto n = static_cast<int64_t>(members.size());
  if (n < 2) return;
  std::vector<Route> routes(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    routes[static_cast<size_t>(i)] =
        route(members[static_cast<size_t>(i)],
              members[static_cast<size_t>(((i + direction) % n + n) % n)]);
  }
  std::vector<int32_t> previous(static_cast<size_t>(n), -1);
  std::vector<int32_t> current(static_cast<size_t>(n), -1);
  for (int64_t k = 0; k + 1 < n; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t from = members[static_cast<size_t>(i)];
      const int64_t to = members[static_cast<size_t>(((i + direction) % n + n) % n)];
      const int32_t id = builder.Add(from, to, bytes, routes[static_cast<size_t>(i)]);
      if (k == 0) {
        for (int32_t before : entry[static_cast<size_t>(from)]) builder.Depend(before, id);
      } else {
        builder.Depend(previous[static_cast<size_t>(((i - direction) % n + n) % n)], id);
        builder.Depend(previous[static_cast<size_t>(i)], id);
      }
      received[static_cast<size_t>(to)].push_back(id);
      received[static_cast<size_t>(from)].push_back(id);
      current[static_cast<size_t>(i)] = id;
    }
    std::swap(previous, current);
  }
}

// A bidirectional chain over `members` (a line: neighbours one hop apart,
// no wraparound): each device forwards to the right what it received from
// the left, and to the left what it received from the right, n - 1 steps
// of `bytes`.
void AddLine(Builder& builder, const std::vector<int64_t>& members, double bytes,
             const std::function<Route(int64_t from, int direction)>& hop, const Received& entry,
             Received& received) {
  const auto n = static_cast<int64_t>(members.size());
  if (n < 2) return;
  for (int direction : {+1, -1}) {
    std::vector<int32_t> previous(static_cast<size_t>(n), -1);
    std::vector<int32_t> current(static_cast<size_t>(n), -1);
    std::vector<Route> routes(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (i + direction >= 0 && i + direction < n) {
        routes[static_cast<size_t>(i)] = hop(members[static_cast<size_t>(i)], direction);
      }
    }
    for (int64_t k = 0; k + 1 < n; ++k) {
      // Rightwards, device i sends shard i - k (for k <= i <= n - 2);
      // leftwards, shard i + k (for 1 <= i <= n - 1 - k).
      const int64_t first = direction > 0 ? k : 1;
      const int64_t last = direction > 0 ? n - 2 : n - 1 - k;
      for (int64_t i = first; i <= last; ++i) {
        const int64_t from = members[static_cast<size_t>(i)];
        const int64_t to = members[static_cast<size_t>(i + direction)];
        const int32_t id = builder.Add(from, to, bytes, routes[static_cast<size_t>(i)]);
        if (k == 0) {
          for (int32_t before : entry[static_cast<size_t>(from)]) builder.Depend(before, id);
        } else {
          builder.Depend(previous[static_cast<size_t>(i - direction)], id);
          builder.Depend(previous[static_cast<size_t>(i)], id);
        }
        received[static_cast<size_t>(to)].push_back(id);
        received[static_cast<size_t>(from)].push_back(id);
        current[static_cast<size_t>(i)] = id;
      }
      std::swap(previous, current);
      std::fill(current.begin(), current.end(), -1);
    }
  }
}

using Phase = cost::CollectivePhase;

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(separator) : "") + parts[i];
  return out;
}

void AddPhase(Builder& builder, const Phase& phase, const Network& network, const Received& entry,
              Received& received) {
  const RouteFn routed = [&](int64_t from, int64_t to) { return network.RouteBetween(from, to); };
  for (const auto& line : phase.lines) {
    switch (phase.kind) {
      case Phase::Kind::kRing:
        AddRing(builder, line, +1, phase.bytes, routed, entry, received);
        break;
      case Phase::Kind::kBidirectionalRing:
        for (int direction : {+1, -1}) {
          const RouteFn hop = [&, direction](int64_t from, int64_t) {
            return network.Hop(from, phase.dim, direction);
          };
          AddRing(builder, line, direction, phase.bytes, hop, entry, received);
        }
        break;
      case Phase::Kind::kLine:
        AddLine(
            builder, line, phase.bytes,
            [&](int64_t from, int direction) { return network.Hop(from, phase.dim, direction); },
            entry, received);
        break;
    }
  }
}

}  // namespace

namespace {

Plan BuildPlanForGroups(CollectiveAlgorithm algorithm,
                        const std::vector<std::vector<int64_t>>& groups,
                        const std::function<double(size_t)>& bytes_of_group, int64_t devices,
                        const cost::Target& target, const Network& network) {
  Builder builder(devices);
  std::vector<std::string> described;
  Received entry(static_cast<size_t>(devices));
  Received received(static_cast<size_t>(devices));
  for (const auto& group : groups) {
    std::vector<Phase> gather = cost::AllGatherPhases(group, bytes_of_group(group.size()), target);
    std::vector<Phase> phases;
    if (algorithm != CollectiveAlgorithm::kAllGather) {
      phases.assign(gather.rbegin(), gather.rend());  // reduce-scatter
    }
    if (algorithm != CollectiveAlgorithm::kReduceScatter) {
      phases.insert(phases.end(), gather.begin(), gather.end());
    }
    // Phases touch only the group's devices, so the per-device lists are
    // shared by every group and reset for each.
    for (int64_t device : group) {
      entry[static_cast<size_t>(device)].clear();
      received[static_cast<size_t>(device)].clear();
    }
    for (const Phase& phase : phases) {
      AddPhase(builder, phase, network, entry, received);
      for (int64_t device : group) {
        // A device in no ring of this phase goes on with what it had.
        auto& mine = received[static_cast<size_t>(device)];
        if (mine.empty()) mine = entry[static_cast<size_t>(device)];
        entry[static_cast<size_t>(device)].swap(mine);
        mine.clear();
      }
    }
    if (described.empty() && !phases.empty()) {
      std::vector<std::string> names;
      for (const Phase& phase : phases) names.push_back(phase.name);
      described.push_back(Join(names, ", then "));
    }
  }
  static constexpr const char* kNames[] = {"all-gather", "reduce-scatter", "all-reduce"};
  const size_t group_size = groups.empty() ? 0 : groups.front().size();
  return builder.Finish(fmt::format(
      "{}: {} group(s) of {}{}{}", kNames[static_cast<int>(algorithm)], groups.size(), group_size,
      described.empty() ? "" : ", ", described.empty() ? "" : described.front()));
}

}  // namespace

Plan BuildCollectivePlan(CollectiveAlgorithm algorithm,
                         const std::vector<std::vector<int64_t>>& groups, double bytes,
                         int64_t devices, const cost::Target& target, const Network& network) {
  return BuildPlanForGroups(
      algorithm, groups, [bytes](size_t) { return bytes; }, devices, target, network);
}

namespace {

// The pairwise exchange of cost::AllToAllRounds: a member's send of round
// k waits for its own send of round k-1 and for what it received then.
Plan BuildAllToAllPlan(const std::vector<std::vector<int64_t>>& groups, double bytes,
                       int64_t devices, const Network& network) {
  Builder builder(devices);
  for (const auto& group : groups) {
    const auto n = static_cast<int64_t>(group.size());
    const double block = bytes / static_cast<double>(std::max<int64_t>(n, 1));
    // sent[i], received[i]: member i's messages of the previous round.
    std::vector<int32_t> sent(static_cast<size_t>(n), -1), received(static_cast<size_t>(n), -1);
    const auto rounds = cost::AllToAllRounds(group);
    for (size_t r = 0; r < rounds.size(); ++r) {
      const auto k = static_cast<int64_t>(r) + 1;
      std::vector<int32_t> now_sent(static_cast<size_t>(n), -1);
      std::vector<int32_t> now_received(static_cast<size_t>(n), -1);
      for (int64_t i = 0; i < n; ++i) {
        const auto [source, target] = rounds[r][static_cast<size_t>(i)];
        const int32_t message =
            builder.Add(source, target, block, network.RouteBetween(source, target));
        builder.Depend(sent[static_cast<size_t>(i)], message);
        builder.Depend(received[static_cast<size_t>(i)], message);
        now_sent[static_cast<size_t>(i)] = message;
        now_received[static_cast<size_t>((i + k) % n)] = message;
      }
      sent = std::move(now_sent);
      received = std::move(now_received);
    }
  }
  const size_t group_size = groups.empty() ? 0 : groups.front().size();
  return builder.Finish(fmt::format("all-to-all: {} group(s) of {}, pairwise exchange of {} rounds",
                                    groups.size(), group_size,
                                    group_size == 0 ? 0 : group_size - 1));
}

}  // namespace

Plan BuildPermutePlan(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                      int64_t devices, const Network& network) {
  Builder builder(devices);
  int64_t moved = 0;
  for (const auto& [source, target] : pairs) {
    if (source == target) continue;
    builder.Add(source, target, bytes, network.RouteBetween(source, target));
    ++moved;
  }
  return builder.Finish(fmt::format("collective-permute: {} pair(s)", moved));
}

Expected<Plan> BuildPlan(const ir::Instruction& op, const ir::DeviceGrid& grid,
                         const cost::Target& target, const Network& network) {
  const Opcode opcode = ir::SynchronousOpcode(op.opcode());
  const double bytes = cost::OperandBytes(op);
  const int64_t devices = grid.size();
  if (opcode == Opcode::kCollectivePermute) {
    LOOM_ASSIGN_OR_RETURN(auto pairs, ir::GlobalSourceTargetPairs(op, grid));
    return BuildPermutePlan(pairs, bytes, devices, network);
  }
  CollectiveAlgorithm algorithm;
  bool per_member = false;
  switch (opcode) {
    case Opcode::kAllGather:
      algorithm = CollectiveAlgorithm::kAllGather;
      per_member = true;
      break;
    case Opcode::kReduceScatter:
      algorithm = CollectiveAlgorithm::kReduceScatter;
      break;
    case Opcode::kAllToAll: {
      LOOM_ASSIGN_OR_RETURN(auto groups, ir::ParticipantGroups(op, grid));
      return BuildAllToAllPlan(groups, bytes, devices, network);
    }
    case Opcode::kAllReduce:
      algorithm = CollectiveAlgorithm::kAllReduce;
      break;
    default:
      return Builder(devices).Finish(
          fmt::format("{}: not modelled, takes no time", ir::OpcodeName(op.opcode())));
  }
  LOOM_ASSIGN_OR_RETURN(auto groups, ir::ParticipantGroups(op, grid));
  // An all-gather's B is the gathered result: group size x the operand.
  Plan plan = BuildPlanForGroups(
      algorithm, groups,
      [&](size_t size) { return per_member ? bytes * static_cast<double>(size) : bytes; }, devices,
      target, network);
  return plan;
}

}  // namespace loom::sim
