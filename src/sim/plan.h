// Collectives as point-to-point messages: the algorithm each native
// collective runs on a topology, written out as a graph of messages between
// devices, so that the simulator (simulator.h) can put every step on the
// network as a flow and let concurrent collectives contend.
//
// The algorithms are cost/collective_algorithm.h's, the same description
// the cost model sums, so that with no contention a simulated collective
// takes exactly the cost model's time.
//
// A device sends step k+1 of a ring (or chain) once it has received step
// k from its predecessor and sent its own step k (one connection carries a
// ring's steps in order); its first send of a phase waits for everything
// it sent and received in the phase before. reduce-scatter runs the same phases in
// the reverse order (same time with no contention); all-reduce is a
// reduce-scatter then an all-gather; all-to-all is the pairwise exchange of
// cost::AllToAllRounds, a member's round-k send waiting for its round k-1
// send and receive. collective-permute is one message per (source,
// target) pair. Every message also waits for both of
// its devices to have reached the collective (a rendezvous).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/collective_groups.h"
#include "ir/instruction.h"
#include "sim/network.h"
#include "sim/symmetry.h"
#include "support/status.h"

namespace loom::sim {

struct Message {
  int32_t source = 0;
  int32_t target = 0;
  double bytes = 0;
  double latency_seconds = 0;
  int32_t route_begin = 0;  // into Plan::route_links
  int32_t route_size = 0;
  // Messages that must have arrived (or been sent) before this one starts,
  // not counting the two devices joining.
  int32_t dependencies = 0;
  int32_t dependents_begin = 0;  // into Plan::dependents
  int32_t dependents_size = 0;
};

// One collective instruction on every device of a run.
struct Plan {
  std::vector<Message> messages;
  std::vector<LinkId> route_links;
  // Parallel to route_links, or empty (all 1): how many flows of its class
  // a message stands for on each link (a plan over classes, symmetry.h).
  std::vector<double> route_weights;
  std::vector<int32_t> dependents;
  // Per device, the messages it sends or receives (device_begin has
  // devices + 1 entries): its part of the collective is done when all of
  // them are.
  std::vector<int32_t> device_begin;
  std::vector<int32_t> device_messages;
  // "all-gather: 512 groups of 4, bidirectional chain over x".
  std::string description;
  // Not made, only counted (CountPlanMessages): `counted` messages, or at
  // least that many where the count stopped at its cap.
  bool truncated = false;
  int64_t counted = 0;

  int64_t MessageCount() const {
    return truncated ? counted : static_cast<int64_t>(messages.size());
  }

  int32_t MessageCountOf(int64_t device) const {
    return device_begin[static_cast<size_t>(device) + 1] -
           device_begin[static_cast<size_t>(device)];
  }
};

// Who takes part in a collective, as its plan reads it: its synchronous
// opcode, and its groups (all-gather, reduce-scatter, all-reduce,
// all-to-all; each in ring order) or its pairs (collective-permute); neither
// for an op not modelled. What the plan of one byte depends on, beside the
// opcode: the tape shares plans by it, and symmetry.h checks it.
struct CollectiveParticipants {
  ir::Opcode opcode = ir::Opcode::kAllReduce;
  std::vector<std::vector<int64_t>> groups;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  auto operator<=>(const CollectiveParticipants&) const = default;
};
Expected<CollectiveParticipants> ParticipantsOf(const ir::Instruction& op,
                                                const ir::DeviceGrid& grid);

// The plan of `op` (a collective, or the -start of one: what
// cost::TransferOp would return) on `grid`'s devices over `network`.
// Ops the cost model gives no time (collective-broadcast,
// ragged-all-to-all) get an empty plan: they complete at once.
//
// With a `symmetry` (not trivial) the plan is over its classes: a Message's
// source and target are class numbers, each message one a representative
// sends, standing for its image at every device of its class (symmetry.h).
// Fails then when a message waits for one whose image no representative
// sends.
//
// With `per_byte`, the plan of an operand of one byte (messages' bytes are
// linear in the operand's: the tape shares one plan among collectives of a
// kind over the same devices).
Expected<Plan> BuildPlan(const ir::Instruction& op, const CollectiveParticipants& participants,
                         const ir::DeviceGrid& grid, const cost::Target& target,
                         const Network& network, const Symmetry* symmetry, bool per_byte);
Expected<Plan> BuildPlan(const ir::Instruction& op, const ir::DeviceGrid& grid,
                         const cost::Target& target, const Network& network);

// How many messages BuildPlan would make, counted no further than past
// `cap`: the count alone, at the cost of walking the algorithm's steps (a
// collective over thousands of devices can plan gigabytes before a budget
// is checked).
int64_t CountPlanMessages(const CollectiveParticipants& participants, const ir::DeviceGrid& grid,
                          const cost::Target& target, const Network& network,
                          const Symmetry* symmetry, int64_t cap);

// The building blocks, for tests: an all-gather, reduce-scatter or
// all-reduce of `bytes` (as the cost model counts them) over `groups` of
// target device ids (each in ring order), on `devices` devices.
enum class CollectiveAlgorithm { kAllGather, kReduceScatter, kAllReduce };
Plan BuildCollectivePlan(CollectiveAlgorithm algorithm,
                         const std::vector<std::vector<int64_t>>& groups, double bytes,
                         int64_t devices, const cost::Target& target, const Network& network);
Plan BuildPermutePlan(const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes,
                      int64_t devices, const Network& network);

}  // namespace loom::sim
