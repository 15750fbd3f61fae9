#include "cost/collective_algorithm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

namespace loom::cost {

namespace {

constexpr const char* kAxisNames = "xyzwuv";

std::string AxisName(size_t dim) {
  return dim < 6 ? std::string(1, kAxisNames[dim]) : fmt::format("d{}", dim);
}

std::vector<CollectivePhase> TorusPhases(const TorusTopology& torus,
                                         const std::vector<int64_t>& group, double bytes,
                                         const Target& target) {
  std::vector<CollectivePhase> phases;
  const auto n = static_cast<double>(group.size());
  const size_t rank = torus.dims.size();
  std::vector<std::set<int64_t>> spans(rank);
  std::vector<std::vector<int64_t>> coords;
  coords.reserve(group.size());
  for (int64_t device : group) {
    coords.push_back(target.Coordinates(device));
    for (size_t d = 0; d < rank; ++d) spans[d].insert(coords.back()[d]);
  }
  double box = 1;
  bool contiguous = true;
  for (size_t d = 0; d < rank; ++d) {
    box *= static_cast<double>(spans[d].size());
    contiguous &=
        *spans[d].rbegin() - *spans[d].begin() + 1 == static_cast<int64_t>(spans[d].size());
  }
  if (box != n || !contiguous) {
    // A ring in group order over routes, as slow as its longest one.
    CollectivePhase phase;
    phase.kind = CollectivePhase::Kind::kRing;
    phase.routed = true;
    phase.bytes = bytes / n;
    phase.lines = {group};
    phase.steps = static_cast<int64_t>(group.size()) - 1;
    phase.hops = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      phase.hops = std::max(phase.hops, TorusHops(target, group[i], group[(i + 1) % group.size()]));
    }
    phase.link = torus.link;
    phase.name = fmt::format("ring of {} in group order (routed)", group.size());
    phases.push_back(std::move(phase));
    return phases;
  }
  double gathered = 1;
  for (size_t d = 0; d < rank; ++d) {
    const auto size = static_cast<int64_t>(spans[d].size());
    if (size < 2) continue;
    CollectivePhase phase;
    phase.dim = d;
    const bool wraps = torus.wraparound[d] && size == torus.dims[d];
    phase.kind = wraps ? CollectivePhase::Kind::kBidirectionalRing : CollectivePhase::Kind::kLine;
    const double shard = bytes * gathered / n;
    phase.bytes = wraps ? shard / 2 : shard;
    gathered *= static_cast<double>(size);
    // The lines along d: members that agree on every other coordinate,
    // ordered by their coordinate along d.
    std::map<std::vector<int64_t>, std::vector<std::pair<int64_t, int64_t>>> lines;
    for (size_t i = 0; i < group.size(); ++i) {
      std::vector<int64_t> key = coords[i];
      key[d] = 0;
      lines[key].emplace_back(coords[i][d], group[i]);
    }
    for (auto& [key, line] : lines) {
      std::sort(line.begin(), line.end());
      std::vector<int64_t> members;
      for (const auto& [coord, device] : line) members.push_back(device);
      phase.lines.push_back(std::move(members));
    }
    phase.steps = size - 1;
    phase.link = torus.link;
    phase.name = fmt::format("{} {} over {}", wraps ? "bidirectional ring" : "bidirectional chain",
                             size, AxisName(d));
    phases.push_back(std::move(phase));
  }
  return phases;
}

std::vector<CollectivePhase> SwitchedPhases(const SwitchedTopology& switched,
                                            const std::vector<int64_t>& group, double bytes) {
  std::vector<CollectivePhase> phases;
  const int64_t per_node = std::max<int64_t>(1, switched.devices_per_node);
  std::map<int64_t, std::vector<int64_t>> by_node;
  for (int64_t device : group) by_node[device / per_node].push_back(device);
  size_t local = 0;
  for (const auto& [node, members] : by_node) local = std::max(local, members.size());
  const auto nodes = static_cast<int64_t>(by_node.size());
  const double shard = bytes / static_cast<double>(nodes * static_cast<int64_t>(local));
  // Across nodes first (shards, one NIC per device), then inside each node
  // (blocks grown to B/local).
  if (nodes >= 2) {
    CollectivePhase phase;
    phase.routed = true;
    phase.bytes = shard;
    for (size_t rank = 0; rank < local; ++rank) {
      std::vector<int64_t> members;
      for (const auto& [node, node_members] : by_node) {
        if (rank < node_members.size()) members.push_back(node_members[rank]);
      }
      phase.lines.push_back(std::move(members));
    }
    phase.steps = nodes - 1;
    phase.link = switched.inter_node;
    phase.name = fmt::format("ring of {} across nodes", nodes);
    phases.push_back(std::move(phase));
  }
  if (local >= 2) {
    CollectivePhase phase;
    phase.routed = true;
    phase.bytes = shard * static_cast<double>(nodes);
    for (const auto& [node, members] : by_node) phase.lines.push_back(members);
    phase.steps = static_cast<int64_t>(local) - 1;
    phase.link = switched.intra_node;
    phase.name = fmt::format("ring of {} in each node", local);
    phases.push_back(std::move(phase));
  }
  return phases;
}

}  // namespace

double CollectivePhase::Seconds() const {
  return static_cast<double>(steps) * (static_cast<double>(hops) * link.latency_seconds +
                                       sharing * bytes / link.bytes_per_second);
}

int64_t TorusHops(const Target& target, int64_t a, int64_t b) {
  // Decoded dimension by dimension, without the vectors of Coordinates: an
  // all-to-all's rounds price N^2 pairs.
  const auto& torus = std::get<TorusTopology>(target.topology());
  int64_t pa = target.TorusPosition(a), pb = target.TorusPosition(b);
  int64_t hops = 0;
  for (size_t d = 0; d < torus.dims.size(); ++d) {
    const int64_t n = torus.dims[d];
    const int64_t straight = std::abs(pa % n - pb % n);
    pa /= n;
    pb /= n;
    hops += torus.wraparound[d] ? std::min(straight, n - straight) : straight;
  }
  return hops;
}

int64_t TorusLinkId(const Target& target, int64_t position, size_t dim, int direction) {
  const auto rank = static_cast<int64_t>(std::get<TorusTopology>(target.topology()).dims.size());
  return (position * rank + static_cast<int64_t>(dim)) * 2 + (direction > 0 ? 0 : 1);
}

std::vector<int64_t> RouteLinks(const Target& target, int64_t from, int64_t to) {
  std::vector<int64_t> links;
  ForEachRouteLink(target, from, to, [&](int64_t link) { links.push_back(link); });
  return links;
}

int64_t LinkCount(const Target& target) {
  if (std::holds_alternative<SwitchedTopology>(target.topology())) {
    return 4 * target.device_count();
  }
  if (std::holds_alternative<TorusTopology>(target.topology())) return TorusLinkCount(target);
  return 1;
}

int64_t TorusLinkCount(const Target& target) {
  const auto& torus = std::get<TorusTopology>(target.topology());
  int64_t positions = 1;
  for (int64_t n : torus.dims) positions *= n;
  return positions * static_cast<int64_t>(torus.dims.size()) * 2;
}

std::vector<std::vector<CollectivePhase>> AllGatherPhasesOfGroups(
    const std::vector<std::vector<int64_t>>& groups, const std::vector<double>& bytes,
    const Target& target) {
  std::vector<std::vector<CollectivePhase>> phases;
  phases.reserve(groups.size());
  size_t most_phases = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    phases.push_back(AllGatherPhases(groups[g], g < bytes.size() ? bytes[g] : 0, target));
    most_phases = std::max(most_phases, phases.back().size());
  }
  // On a switched cluster a routed message runs from its sender's port to
  // its receiver's, and a device is in one group: nothing is shared.
  if (std::holds_alternative<SwitchedTopology>(target.topology())) return phases;
  // Phase i of every group runs at once: count its messages on each link.
  std::vector<int32_t> messages_on_link(static_cast<size_t>(LinkCount(target)), 0);
  auto for_each_link = [&](const CollectivePhase& phase, const auto& visit) {
    for (const auto& line : phase.lines) {
      if (line.size() < 2) continue;
      for (size_t m = 0; m < line.size(); ++m) {
        ForEachRouteLink(target, line[m], line[(m + 1) % line.size()], visit);
      }
    }
  };
  for (size_t i = 0; i < most_phases; ++i) {
    std::fill(messages_on_link.begin(), messages_on_link.end(), 0);
    for (const auto& group_phases : phases) {
      if (i >= group_phases.size() || !group_phases[i].routed) continue;
      for_each_link(group_phases[i],
                    [&](int64_t link) { ++messages_on_link[static_cast<size_t>(link)]; });
    }
    for (auto& group_phases : phases) {
      if (i >= group_phases.size() || !group_phases[i].routed) continue;
      CollectivePhase& phase = group_phases[i];
      for_each_link(phase, [&](int64_t link) {
        const auto messages = static_cast<double>(messages_on_link[static_cast<size_t>(link)]);
        phase.sharing = std::max(phase.sharing, messages);
      });
    }
  }
  return phases;
}

int PortOfLink(const Target& target, int64_t link) {
  int port = 0;
  if (std::holds_alternative<SwitchedTopology>(target.topology())) {
    port = static_cast<int>(link % 4);
  } else if (const auto* torus = std::get_if<TorusTopology>(&target.topology())) {
    port = static_cast<int>(link % (2 * static_cast<int64_t>(torus->dims.size())));
  }
  return std::min(port, 31);
}

PortMask PortsOfRoute(const Target& target, int64_t from, int64_t to) {
  PortMask ports = 0;
  ForEachRouteLink(target, from, to,
                   [&](int64_t link) { ports |= PortMask{1} << PortOfLink(target, link); });
  return ports;
}

std::vector<std::pair<int64_t, PortMask>> PhasePorts(const CollectivePhase& phase,
                                                     const Target& target) {
  std::vector<std::pair<int64_t, PortMask>> ports;
  const bool along_dimension = phase.kind != CollectivePhase::Kind::kRing &&
                               std::holds_alternative<TorusTopology>(target.topology());
  const int both_ways =
      along_dimension ? (3 << std::min<int>(static_cast<int>(phase.dim) * 2, 30)) : 0;
  for (const auto& line : phase.lines) {
    const size_t n = line.size();
    if (n < 2) continue;
    const size_t first = ports.size();
    for (int64_t member : line) ports.emplace_back(member, static_cast<PortMask>(both_ways));
    if (along_dimension) continue;
    for (size_t i = 0; i < n; ++i) {
      const size_t next = (i + 1) % n;
      const PortMask route = PortsOfRoute(target, line[i], line[next]);
      ports[first + i].second |= route;
      ports[first + next].second |= route;
    }
  }
  return ports;
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> AllToAllRounds(
    const std::vector<int64_t>& group) {
  const auto n = static_cast<int64_t>(group.size());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> rounds;
  for (int64_t k = 1; k < n; ++k) {
    auto& round = rounds.emplace_back();
    for (int64_t i = 0; i < n; ++i) {
      round.emplace_back(group[static_cast<size_t>(i)], group[static_cast<size_t>((i + k) % n)]);
    }
  }
  return rounds;
}

std::vector<CollectivePhase> AllGatherPhases(const std::vector<int64_t>& group, double bytes,
                                             const Target& target) {
  if (group.size() < 2) return {};
  if (const auto* torus = std::get_if<TorusTopology>(&target.topology())) {
    return TorusPhases(*torus, group, bytes, target);
  }
  if (const auto* switched = std::get_if<SwitchedTopology>(&target.topology())) {
    return SwitchedPhases(*switched, group, bytes);
  }
  const auto n = static_cast<double>(group.size());
  CollectivePhase phase;
  phase.routed = true;
  phase.bytes = bytes / n;
  phase.lines = {group};
  phase.steps = static_cast<int64_t>(group.size()) - 1;
  phase.sharing = n;  // every message of a step is on the one medium
  phase.link = std::get<BusTopology>(target.topology()).bus;
  phase.name = fmt::format("ring of {} on the bus", group.size());
  return {phase};
}

}  // namespace loom::cost
