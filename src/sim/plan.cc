#include "sim/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>
#include <variant>

#include "cost/collective_algorithm.h"
#include "cost/cost_model.h"
#include "ir/async.h"
#include "ir/computation.h"

namespace loom::sim {

namespace {

using ir::Opcode;

// A message by name: its phase in the plan of its group, its direction
// there, its step and the device that sends it. The name of a message's
// image under a translation of symmetry.h is its own with the source
// moved (a move maps each ring onto a ring and each chain onto a chain,
// step for step), so a plan over classes names what a representative's
// message waits for by the name of its image at a representative.
uint64_t MessageName(size_t phase, int direction, int64_t step, int64_t source) {
  // Devices and steps are fewer than 2^21 (ir::VerifyModule allows 2^20
  // devices), phases far fewer than 2^16.
  return ((((static_cast<uint64_t>(phase) << 1) | (direction > 0 ? 0u : 1u)) << 21 |
           static_cast<uint64_t>(step))
          << 21) |
         static_cast<uint64_t>(source);
}
constexpr uint64_t kSourceBits = (uint64_t{1} << 21) - 1;

// A message, by name and, where this plan made it, by id; or no message.
constexpr uint64_t kNoMessage = ~uint64_t{0};
struct Ref {
  uint64_t name = kNoMessage;
  int32_t id = -1;
};

// Each device's messages of one phase, sent or received: what its first
// send of the next phase waits for (the data it forwards, and its links
// free of the phase before).
using Received = std::vector<std::vector<Ref>>;
using RouteFn = std::function<Route(int64_t from, int64_t to)>;

// Makes a plan's messages and their dependencies: every device's, or with
// a symmetry (not trivial) those representatives send, between classes.
class Builder {
 public:
  // With `max_messages` > 0 the builder only counts the messages, until
  // there are more than that: what BuildPlan checks before it makes any.
  Builder(int64_t devices, const Symmetry* symmetry, int64_t max_messages = 0)
      : devices_(symmetry != nullptr ? symmetry->classes() : devices),
        symmetry_(symmetry),
        max_messages_(max_messages) {}

  bool counting() const { return max_messages_ > 0; }
  // Counted past max_messages: the loops that make the plan stop early.
  bool full() const { return counting() && counted_ > max_messages_; }

  // Whether the plan holds what `device` sends and waits for.
  bool Makes(int64_t device) const {
    return symmetry_ == nullptr || symmetry_->IsRepresentative(device);
  }

  // The message `name` from `source` (Makes(source)) to `target`.
  Ref Add(uint64_t name, int64_t source, int64_t target, double bytes, const Route& route) {
    if (counting()) {
      ++counted_;
      return Ref{name, -1};
    }
    Message message;
    message.bytes = bytes;
    message.latency_seconds = route.latency_seconds;
    message.route_begin = static_cast<int32_t>(plan_.route_links.size());
    if (symmetry_ == nullptr) {
      message.source = static_cast<int32_t>(source);
      message.target = static_cast<int32_t>(target);
      plan_.route_links.insert(plan_.route_links.end(), route.links.begin(), route.links.end());
    } else {
      message.source = static_cast<int32_t>(symmetry_->ClassOf(source));
      message.target = static_cast<int32_t>(symmetry_->ClassOf(target));
      AddClassRoute(route);
    }
    message.route_size = static_cast<int32_t>(plan_.route_links.size()) - message.route_begin;
    plan_.messages.push_back(message);
    const auto id = static_cast<int32_t>(plan_.messages.size() - 1);
    if (symmetry_ != nullptr) made_[name] = id;
    return Ref{name, id};
  }

  // `after` (made here) starts only once `before` has arrived: itself, or
  // over classes its image at a representative.
  void Depend(const Ref& before, const Ref& after) {
    if (before.name == kNoMessage || counting()) return;
    if (before.id >= 0) {
      edges_.emplace_back(before.id, after.id);
    } else if (symmetry_ != nullptr) {
      const auto source = static_cast<int64_t>(before.name & kSourceBits);
      const auto representative =
          static_cast<uint64_t>(symmetry_->Representative(symmetry_->ClassOf(source)));
      named_edges_.emplace_back((before.name & ~kSourceBits) | representative, after.id);
    }
  }

  Expected<Plan> Finish(std::string description) {
    if (counting()) {
      plan_.truncated = full();
      plan_.counted = counted_;
      plan_.description = std::move(description);
      return std::move(plan_);
    }
    for (const auto& [name, after] : named_edges_) {
      const auto it = made_.find(name);
      if (it == made_.end()) {
        return Error{fmt::format("a message of device {} waits for one no representative sends",
                                 plan_.messages[static_cast<size_t>(after)].source)};
      }
      edges_.emplace_back(it->second, after);
    }
    auto& messages = plan_.messages;
    // Each message's dependents, bucketed by a counting sort; an edge made
    // twice (two dependencies whose images are one message) counts once.
    std::vector<int32_t> begin(messages.size() + 1, 0);
    for (const auto& [before, after] : edges_) begin[static_cast<size_t>(before) + 1]++;
    for (size_t m = 0; m < messages.size(); ++m) begin[m + 1] += begin[m];
    std::vector<int32_t> bucketed(edges_.size());
    std::vector<int32_t> fill_edges(begin.begin(), begin.end() - 1);
    for (const auto& [before, after] : edges_) {
      bucketed[static_cast<size_t>(fill_edges[static_cast<size_t>(before)]++)] = after;
    }
    edges_.clear();
    edges_.shrink_to_fit();
    plan_.dependents.reserve(bucketed.size());
    for (size_t m = 0; m < messages.size(); ++m) {
      messages[m].dependents_begin = static_cast<int32_t>(plan_.dependents.size());
      for (int32_t e = begin[m]; e < begin[m + 1]; ++e) {
        const int32_t after = bucketed[static_cast<size_t>(e)];
        const auto first = plan_.dependents.begin() + messages[m].dependents_begin;
        if (std::find(first, plan_.dependents.end(), after) != plan_.dependents.end()) continue;
        plan_.dependents.push_back(after);
        messages[static_cast<size_t>(after)].dependencies++;
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
  // The route's links as their orbits' links at representatives, each
  // once, weighted by the flows of the message's class that cross it.
  void AddClassRoute(const Route& route) {
    scratch_.clear();
    for (LinkId link : route.links) scratch_.push_back(symmetry_->CanonicalLink(link));
    std::sort(scratch_.begin(), scratch_.end());
    for (size_t i = 0; i < scratch_.size(); ++i) {
      if (i > 0 && scratch_[i] == scratch_[i - 1]) {
        plan_.route_weights.back() += symmetry_->LinkWeight();
      } else {
        plan_.route_links.push_back(scratch_[i]);
        plan_.route_weights.push_back(symmetry_->LinkWeight());
      }
    }
  }

  int64_t devices_;  // or classes
  const Symmetry* symmetry_;
  int64_t max_messages_;
  int64_t counted_ = 0;
  Plan plan_;
  std::vector<std::pair<int32_t, int32_t>> edges_;
  std::vector<std::pair<uint64_t, int32_t>> named_edges_;
  std::unordered_map<uint64_t, int32_t> made_;
  std::vector<LinkId> scratch_;
};

// Sends `name` from `from` to `to` where the plan holds `from`'s messages,
// waiting for `waits` (the message's dependencies, none made yet), and
// lists it among both devices' messages of the phase where the plan holds
// their lists. Returns the message, made or only named.
template <class Waits>
Ref Send(Builder& builder, uint64_t name, int64_t from, int64_t to, double bytes,
         const std::function<Route()>& route, const Waits& waits, Received& received) {
  Ref ref{name, -1};
  if (builder.counting()) {
    if (builder.Makes(from)) builder.Add(name, from, to, bytes, Route{});
    return ref;
  }
  if (builder.Makes(from)) {
    ref = builder.Add(name, from, to, bytes, route());
    waits([&](const Ref& before) { builder.Depend(before, ref); });
    received[static_cast<size_t>(from)].push_back(ref);
  }
  if (builder.Makes(to)) received[static_cast<size_t>(to)].push_back(ref);
  return ref;
}

// A unidirectional ring over `members` (each sends to the next in
// `direction`), n - 1 steps of `bytes`.
void AddRing(Builder& builder, size_t phase, const std::vector<int64_t>& members, int direction,
             double bytes, const RouteFn& route, const Received& entry, Received& received) {
  const auto n = static_cast<int64_t>(members.size());
  if (n < 2) return;
  const auto at = [&](int64_t i) { return members[static_cast<size_t>(((i % n) + n) % n)]; };
  std::vector<Ref> previous(static_cast<size_t>(n));
  std::vector<Ref> current(static_cast<size_t>(n));
  for (int64_t k = 0; k + 1 < n && !builder.full(); ++k) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t from = at(i);
      const int64_t to = at(i + direction);
      current[static_cast<size_t>(i)] = Send(
          builder, MessageName(phase, direction, k, from), from, to, bytes,
          [&] { return route(from, to); },
          [&](const auto& depend) {
            if (k == 0) {
              for (const Ref& before : entry[static_cast<size_t>(from)]) depend(before);
            } else {
              depend(previous[static_cast<size_t>(((i - direction) % n + n) % n)]);
              depend(previous[static_cast<size_t>(i)]);
            }
          },
          received);
    }
    std::swap(previous, current);
  }
}

// A bidirectional chain over `members` (a line: neighbours one hop apart,
// no wraparound): each device forwards to the right what it received from
// the left, and to the left what it received from the right, n - 1 steps
// of `bytes`.
void AddLine(Builder& builder, size_t phase, const std::vector<int64_t>& members, double bytes,
             const std::function<Route(int64_t from, int direction)>& hop, const Received& entry,
             Received& received) {
  const auto n = static_cast<int64_t>(members.size());
  if (n < 2) return;
  for (int direction : {+1, -1}) {
    std::vector<Ref> previous(static_cast<size_t>(n));
    std::vector<Ref> current(static_cast<size_t>(n));
    for (int64_t k = 0; k + 1 < n && !builder.full(); ++k) {
      // Rightwards, device i sends shard i - k (for k <= i <= n - 2);
      // leftwards, shard i + k (for 1 <= i <= n - 1 - k).
      const int64_t first = direction > 0 ? k : 1;
      const int64_t last = direction > 0 ? n - 2 : n - 1 - k;
      for (int64_t i = first; i <= last; ++i) {
        const int64_t from = members[static_cast<size_t>(i)];
        const int64_t to = members[static_cast<size_t>(i + direction)];
        current[static_cast<size_t>(i)] = Send(
            builder, MessageName(phase, direction, k, from), from, to, bytes,
            [&] { return hop(from, direction); },
            [&](const auto& depend) {
              if (k == 0) {
                for (const Ref& before : entry[static_cast<size_t>(from)]) depend(before);
              } else {
                depend(previous[static_cast<size_t>(i - direction)]);
                depend(previous[static_cast<size_t>(i)]);
              }
            },
            received);
      }
      std::swap(previous, current);
      std::fill(current.begin(), current.end(), Ref{});
    }
  }
}

using Phase = cost::CollectivePhase;

std::string Join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(separator) : "") + parts[i];
  return out;
}

void AddPhase(Builder& builder, size_t index, const Phase& phase, const Network& network,
              const Received& entry, Received& received) {
  const RouteFn routed = [&](int64_t from, int64_t to) { return network.RouteBetween(from, to); };
  for (const auto& line : phase.lines) {
    switch (phase.kind) {
      case Phase::Kind::kRing:
        AddRing(builder, index, line, +1, phase.bytes, routed, entry, received);
        break;
      case Phase::Kind::kBidirectionalRing:
        for (int direction : {+1, -1}) {
          const RouteFn hop = [&, direction](int64_t from, int64_t) {
            return network.Hop(from, phase.dim, direction);
          };
          AddRing(builder, index, line, direction, phase.bytes, hop, entry, received);
        }
        break;
      case Phase::Kind::kLine:
        AddLine(
            builder, index, line, phase.bytes,
            [&](int64_t from, int direction) { return network.Hop(from, phase.dim, direction); },
            entry, received);
        break;
    }
  }
}

// The groups a plan over classes needs: those with a representative in
// them. Every other group is the image of one of these.
std::vector<std::vector<int64_t>> GroupsOfRepresentatives(
    const std::vector<std::vector<int64_t>>& groups, const Symmetry* symmetry) {
  if (symmetry == nullptr) return groups;
  std::vector<std::vector<int64_t>> kept;
  for (const auto& group : groups) {
    if (std::any_of(group.begin(), group.end(),
                    [&](int64_t device) { return symmetry->IsRepresentative(device); })) {
      kept.push_back(group);
    }
  }
  return kept;
}

// The plan of `groups` (with a symmetry, over its classes: only the groups
// with a representative are planned, and `group_count` is the
// collective's, for the description).
Expected<Plan> BuildPlanForGroups(CollectiveAlgorithm algorithm,
                                  const std::vector<std::vector<int64_t>>& all_groups,
                                  const std::function<double(size_t)>& bytes_of_group,
                                  int64_t devices, const cost::Target& target,
                                  const Network& network, const Symmetry* symmetry,
                                  int64_t max_messages) {
  Builder builder(devices, symmetry, max_messages);
  const std::vector<std::vector<int64_t>> groups = GroupsOfRepresentatives(all_groups, symmetry);
  std::vector<std::string> described;
  Received entry(static_cast<size_t>(devices));
  Received received(static_cast<size_t>(devices));
  for (const auto& group : groups) {
    if (builder.full()) break;
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
    for (size_t p = 0; p < phases.size(); ++p) {
      AddPhase(builder, p, phases[p], network, entry, received);
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
  const size_t group_size = all_groups.empty() ? 0 : all_groups.front().size();
  return builder.Finish(fmt::format(
      "{}: {} group(s) of {}{}{}", kNames[static_cast<int>(algorithm)], all_groups.size(),
      group_size, described.empty() ? "" : ", ", described.empty() ? "" : described.front()));
}

}  // namespace

Plan BuildCollectivePlan(CollectiveAlgorithm algorithm,
                         const std::vector<std::vector<int64_t>>& groups, double bytes,
                         int64_t devices, const cost::Target& target, const Network& network) {
  // Every device's plan names nothing it does not make: it cannot fail.
  return *BuildPlanForGroups(
      algorithm, groups, [bytes](size_t) { return bytes; }, devices, target, network, nullptr, 0);
}

namespace {

// The pairwise exchange of cost::AllToAllRounds: in round k member i sends
// to member (i + k) mod n, and its send waits for its own send of round
// k-1 and for what it received then (from member i - k + 1). Written out
// by that rule rather than from the rounds' list, which holds n^2 pairs.
Expected<Plan> BuildAllToAllPlan(const std::vector<std::vector<int64_t>>& all_groups, double bytes,
                                 int64_t devices, const Network& network, const Symmetry* symmetry,
                                 int64_t max_messages) {
  Builder builder(devices, symmetry, max_messages);
  Received unused(static_cast<size_t>(devices));
  for (const auto& group : GroupsOfRepresentatives(all_groups, symmetry)) {
    const auto n = static_cast<int64_t>(group.size());
    const double block = bytes / static_cast<double>(std::max<int64_t>(n, 1));
    std::vector<int64_t> senders;  // the members whose sends the plan holds
    for (int64_t i = 0; i < n; ++i) {
      if (builder.Makes(group[static_cast<size_t>(i)])) senders.push_back(i);
    }
    // sent[i]: member i's message of the previous round.
    std::vector<Ref> sent(static_cast<size_t>(n)), now_sent(static_cast<size_t>(n));
    for (int64_t k = 1; k < n && !builder.full(); ++k) {
      for (int64_t i : senders) {
        const int64_t source = group[static_cast<size_t>(i)];
        const int64_t target = group[static_cast<size_t>((i + k) % n)];
        const int64_t sender_before = ((i - (k - 1)) % n + n) % n;
        const Ref received_before =
            k == 1 ? Ref{}
                   : Ref{MessageName(0, +1, k - 2, group[static_cast<size_t>(sender_before)]),
                         sent[static_cast<size_t>(sender_before)].id};
        now_sent[static_cast<size_t>(i)] = Send(
            builder, MessageName(0, +1, k - 1, source), source, target, block,
            [&] { return network.RouteBetween(source, target); },
            [&](const auto& depend) {
              depend(sent[static_cast<size_t>(i)]);
              depend(received_before);
            },
            unused);
      }
      std::swap(sent, now_sent);
      for (auto& list : unused) list.clear();
    }
  }
  const size_t group_size = all_groups.empty() ? 0 : all_groups.front().size();
  return builder.Finish(fmt::format("all-to-all: {} group(s) of {}, pairwise exchange of {} rounds",
                                    all_groups.size(), group_size,
                                    group_size == 0 ? 0 : group_size - 1));
}

int64_t MovingPairs(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  return std::count_if(pairs.begin(), pairs.end(),
                       [](const auto& pair) { return pair.first != pair.second; });
}

Expected<Plan> BuildPermutePlanOver(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                    double bytes, int64_t devices, const Network& network,
                                    const Symmetry* symmetry, int64_t max_messages) {
  Builder builder(devices, symmetry, max_messages);
  for (const auto& [source, target] : pairs) {
    if (builder.full()) break;
    if (source == target || !builder.Makes(source)) continue;
    builder.Add(MessageName(0, +1, 0, source), source, target, bytes,
                network.RouteBetween(source, target));
  }
  return builder.Finish(fmt::format("collective-permute: {} pair(s)", MovingPairs(pairs)));
}

// The plan of a collective (its opcode and participants) whose operand is
// `bytes`, or, with `max_messages` > 0, only its count (Builder).
Expected<Plan> BuildPlanOver(const CollectiveParticipants& participants, double bytes,
                             const ir::DeviceGrid& grid, const cost::Target& target,
                             const Network& network, const Symmetry* symmetry,
                             int64_t max_messages) {
  const int64_t devices = grid.size();
  CollectiveAlgorithm algorithm;
  bool per_member = false;
  switch (participants.opcode) {
    case Opcode::kCollectivePermute:
      return BuildPermutePlanOver(participants.pairs, bytes, devices, network, symmetry,
                                  max_messages);
    case Opcode::kAllToAll:
      return BuildAllToAllPlan(participants.groups, bytes, devices, network, symmetry,
                               max_messages);
    case Opcode::kAllGather:
      algorithm = CollectiveAlgorithm::kAllGather;
      per_member = true;
      break;
    case Opcode::kReduceScatter:
      algorithm = CollectiveAlgorithm::kReduceScatter;
      break;
    case Opcode::kAllReduce:
      algorithm = CollectiveAlgorithm::kAllReduce;
      break;
    default:
      return Builder(devices, symmetry)
          .Finish(
              fmt::format("{}: not modelled, takes no time", ir::OpcodeName(participants.opcode)));
  }
  // An all-gather's B is the gathered result: group size x the operand.
  return BuildPlanForGroups(
      algorithm, participants.groups,
      [&](size_t size) { return per_member ? bytes * static_cast<double>(size) : bytes; }, devices,
      target, network, symmetry, max_messages);
}

}  // namespace

Plan BuildPermutePlan(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                      int64_t devices, const Network& network) {
  return *BuildPermutePlanOver(pairs, bytes, devices, network, nullptr, 0);
}

Expected<CollectiveParticipants> ParticipantsOf(const ir::Instruction& op,
                                                const ir::DeviceGrid& grid) {
  CollectiveParticipants participants;
  participants.opcode = ir::SynchronousOpcode(op.opcode());
  switch (participants.opcode) {
    case Opcode::kCollectivePermute: {
      LOOM_ASSIGN_OR_RETURN(participants.pairs, ir::GlobalSourceTargetPairs(op, grid));
      break;
    }
    case Opcode::kAllGather:
    case Opcode::kReduceScatter:
    case Opcode::kAllReduce:
    case Opcode::kAllToAll: {
      LOOM_ASSIGN_OR_RETURN(participants.groups, ir::ParticipantGroups(op, grid));
      break;
    }
    default:
      break;
  }
  return participants;
}

int64_t CountPlanMessages(const CollectiveParticipants& participants, const ir::DeviceGrid& grid,
                          const cost::Target& target, const Network& network,
                          const Symmetry* symmetry, int64_t cap) {
  if (symmetry != nullptr && symmetry->trivial()) symmetry = nullptr;
  // Counting names no message, so it cannot fail.
  return BuildPlanOver(participants, 0, grid, target, network, symmetry, std::max<int64_t>(cap, 1))
      ->counted;
}

Expected<Plan> BuildPlan(const ir::Instruction& op, const CollectiveParticipants& participants,
                         const ir::DeviceGrid& grid, const cost::Target& target,
                         const Network& network, const Symmetry* symmetry, bool per_byte) {
  if (symmetry != nullptr && symmetry->trivial()) symmetry = nullptr;
  auto plan = BuildPlanOver(participants, per_byte ? 1.0 : cost::OperandBytes(op), grid, target,
                            network, symmetry, 0);
  if (!plan.ok() && symmetry != nullptr) {
    return Error{fmt::format("%{} is not symmetric under {}: {}", op.name(),
                             symmetry->description(), plan.error().message)};
  }
  return plan;
}

Expected<Plan> BuildPlan(const ir::Instruction& op, const ir::DeviceGrid& grid,
                         const cost::Target& target, const Network& network) {
  LOOM_ASSIGN_OR_RETURN(const CollectiveParticipants participants, ParticipantsOf(op, grid));
  return BuildPlan(op, participants, grid, target, network, nullptr, false);
}

}  // namespace loom::sim
