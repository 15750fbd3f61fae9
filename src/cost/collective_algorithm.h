// How each native collective runs on each kind of topology: the one
// description the cost model sums (target_cost_model.h) and the simulator
// writes out as messages (sim/plan.h), so that the two cannot drift. For an
// all-gather of B bytes (the gathered result) over a group of N devices:
//
//   torus, group a sub-box of the torus: one phase per dimension the group
//     spans (sizes n_1..n_k), in dimension order; phase i moves shards of
//     s_i = B n_1...n_{i-1} / N along lines of that dimension:
//       a wrapping dimension spanned whole: a bidirectional ring, half of
//         each shard each way, n_i - 1 steps of s_i / 2;
//       otherwise (a line): a bidirectional chain, each device forwarding
//         to the right what came from the left and to the left what came
//         from the right, n_i - 1 steps of whole shards;
//   torus, any other group: a unidirectional ring in group order over
//     dimension-ordered routes, N - 1 steps of B/N, each as slow as the
//     longest route (h hops);
//   switched: across nodes first, a ring among the devices with the same
//     rank in their node, each through its own NIC, steps of B/(nodes x L)
//     (L: the most devices of the group in one node); then a ring in each
//     node over NVSwitch, steps of B/L;
//   bus: a ring in group order whose N messages of every step share the
//     one medium: N - 1 steps of B/N, each taking N (B/N) / bw.
//
// With no contention a phase takes steps x (hops x latency + sharing x
// bytes / bandwidth): the cost model's closed forms
//   torus box:   sum_i (n_i-1) a + (n_i-1)/n_i * B_i / (w_i bw), w_i = 2 with
//                wraparound, 1 without, B_i = B n_1...n_i / N;
//   torus other: (N-1) (h a + B/N / bw);
//   switched:    (nodes-1) a_ib + (nodes-1)/nodes * (B/L) / bw_ib
//                + (L-1) a_nv + (L-1)/L * B / bw_nv;
//   bus:         (N-1) a + (N-1) B / bw.
// A reduce-scatter runs the same phases in reverse order (the same time),
// an all-reduce a reduce-scatter then an all-gather. A collective's groups
// run at once: a routed phase's `sharing` counts every group's messages on
// its busiest link (AllGatherPhasesOfGroups).
//
// An all-to-all of B bytes per device is a pairwise exchange (what the
// executor runs and NCCL's grouped sends amount to): N-1 rounds, round k
// sending B/N from member i to member (i+k) mod N, one round after another
// on each device; every round is a collective-permute and takes what one
// takes. Unlike an all-gather's, its bytes are all distinct: across nodes
// a device's NIC carries B (nodes-1)/nodes, not B/L of it, and on a torus
// each round crosses k hops of the ring.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cost/cost_model.h"
#include "cost/target.h"

namespace loom::cost {

struct CollectivePhase {
  enum class Kind {
    kRing,               // one way round each line, `bytes` per step
    kBidirectionalRing,  // both ways round each line, `bytes` each way per step
    kLine,               // a bidirectional chain along each line
  };
  Kind kind = Kind::kRing;
  // Each a ring or a chain of target device ids, in order.
  std::vector<std::vector<int64_t>> lines;
  double bytes = 0;  // per message
  // Torus phases along one dimension: that dimension, and a message is one
  // hop; routed phases (`routed`) send along dimension-ordered (or switch
  // port) routes.
  size_t dim = 0;
  bool routed = false;
  // The timing, with no contention: steps x (hops x link.latency + sharing x
  // bytes / link.bandwidth).
  int64_t steps = 0;
  int64_t hops = 1;
  double sharing = 1;  // messages of one step on the same medium
  Link link;
  std::string name;  // "bidirectional ring 4 over x"

  double Seconds() const;
};

// The phases of an all-gather of `bytes` (the gathered result) over `group`
// (target device ids in ring order) on `target`.
std::vector<CollectivePhase> AllGatherPhases(const std::vector<int64_t>& group, double bytes,
                                             const Target& target);

// The phases of the all-gathers of one collective over each of `groups`,
// `bytes[i]` the gathered result of group i, all running at once. A routed
// phase's messages cross links that other groups' messages of the same
// step cross too (two rings of every other chip along one torus line; all
// groups on a bus), so its `sharing` is the most messages of that step, of
// every group, on any link of its routes: what max-min sharing gives the
// slowest of them.
std::vector<std::vector<CollectivePhase>> AllGatherPhasesOfGroups(
    const std::vector<std::vector<int64_t>>& groups, const std::vector<double>& bytes,
    const Target& target);

// The rounds of an all-to-all over `group` (device ids, in group order):
// rounds[k-1] holds round k's (source, target) pairs, k = 1 .. N-1.
std::vector<std::vector<std::pair<int64_t, int64_t>>> AllToAllRounds(
    const std::vector<int64_t>& group);

// Hops between two devices of a torus by dimension-ordered routing (the
// shorter way round a wrapping dimension).
int64_t TorusHops(const Target& target, int64_t a, int64_t b);

// The links of `target`, each a number, and the route a message takes
// over them: the network facts the simulator's links are made of
// (sim/network.h) and the cost model's concurrency rule uses
// (CostModel::TransferLinks).
//   torus     (position x rank + dim) x 2 + (0 going +, 1 going -), the
//             position a chip's place with x varying fastest; a route is
//             dimension-ordered (x, then y, ...), each dimension the
//             shorter way round where it wraps, a tie the positive way;
//   switched  device x 4 + 0 NVLink egress, 1 NVLink ingress, 2 NIC egress,
//             3 NIC ingress; a route is the sender's egress and the
//             receiver's ingress port (NVLink inside a node, NIC across);
//   bus       0, the one medium.
int64_t TorusLinkId(const Target& target, int64_t position, size_t dim, int direction);
std::vector<int64_t> RouteLinks(const Target& target, int64_t from, int64_t to);

// How many link ids a torus target has (TorusLinkId is below it).
int64_t TorusLinkCount(const Target& target);

// The port a link occupies at the devices it joins, as the step estimate
// counts them (CostModel::TransferSegmentsByDevice): torus, its dimension
// and direction (dim x 2 + (0 going +, 1 going -)), wherever the chip is;
// switched, its kind (0 NVLink egress, 1 NVLink ingress, 2 NIC egress, 3 NIC
// ingress); bus, 0. Ports past the 32nd share the last bit.
int PortOfLink(const Target& target, int64_t link);
// The ports of every link of the route from `from` to `to`; both ends count
// them all (on a torus, a route's later hops run over links of the same
// kinds near its ends in any shift-invariant pattern).
PortMask PortsOfRoute(const Target& target, int64_t from, int64_t to);
// Per member of `phase`'s lines, the ports its messages use: a ring's
// routes to its successor and from its predecessor, a bidirectional ring's
// or chain's two directions along the phase's dimension.
std::vector<std::pair<int64_t, PortMask>> PhasePorts(const CollectivePhase& phase,
                                                     const Target& target);

// Calls `visit(link)` for each link of the torus route from `from` to `to`,
// in order, as RouteLinks lists them, without allocating: a permute's
// pricing walks every pair's route.
template <typename Visit>
void ForEachTorusRouteLink(const Target& target, int64_t from, int64_t to, Visit&& visit) {
  const auto& torus = std::get<TorusTopology>(target.topology());
  if (from == to) return;
  const int64_t goal = target.TorusPosition(to);
  int64_t position = target.TorusPosition(from);
  int64_t stride = 1;
  for (size_t d = 0; d < torus.dims.size(); ++d) {
    const int64_t n = torus.dims[d];
    const int64_t a = position / stride % n, b = goal / stride % n;
    if (a != b) {
      int direction = b > a ? +1 : -1;
      int64_t hops = b > a ? b - a : a - b;
      if (d < torus.wraparound.size() && torus.wraparound[d]) {
        const int64_t forward = ((b - a) % n + n) % n;
        direction = forward <= n - forward ? +1 : -1;
        hops = std::min(forward, n - forward);
      }
      int64_t coord = a;
      for (int64_t h = 0; h < hops; ++h) {
        visit(TorusLinkId(target, position, d, direction));
        const int64_t next = ((coord + direction) % n + n) % n;
        position += (next - coord) * stride;
        coord = next;
      }
    }
    stride *= n;
  }
}

// RouteLinks without the vector: `visit(link)` for every link of the route.
template <typename Visit>
void ForEachRouteLink(const Target& target, int64_t from, int64_t to, Visit&& visit) {
  if (from == to) return;
  if (const auto* switched = std::get_if<SwitchedTopology>(&target.topology())) {
    const int64_t per_node = std::max<int64_t>(1, switched->devices_per_node);
    const bool inter = from / per_node != to / per_node;
    visit(from * 4 + (inter ? 2 : 0));
    visit(to * 4 + (inter ? 3 : 1));
  } else if (std::holds_alternative<TorusTopology>(target.topology())) {
    ForEachTorusRouteLink(target, from, to, visit);
  } else {
    visit(int64_t{0});
  }
}

// How many link ids RouteLinks numbers on `target`.
int64_t LinkCount(const Target& target);

}  // namespace loom::cost
