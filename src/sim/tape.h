// The program every device replays (event_engine.h), flattened into one
// tape of steps: calls and the chosen branch of each conditional inlined,
// while loops as a begin/end pair around condition and body followed by
// the last condition, and each collective instruction given its plan of
// messages (plan.h).
//
// Compute is priced here, once, by the cost model; a while loop that makes
// no transfer is collapsed into one step of compute (kBlock) so that a loop
// of a million trips costs one step to replay.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cost/target.h"
#include "cost/target_cost_model.h"
#include "ir/collective_groups.h"
#include "ir/computation.h"
#include "ir/verifier.h"
#include "sim/network.h"
#include "sim/plan.h"
#include "support/status.h"

namespace loom::sim {

// kCompute: one op on the compute stream. kBlock: a collapsed loop.
// kSync: a synchronous collective; kStart / kDone: an asynchronous one.
// kLoopBegin / kLoopEnd: a while loop that transfers, replayed trip by trip.
enum class StepKind : uint8_t { kCompute, kBlock, kSync, kStart, kDone, kLoopBegin, kLoopEnd };

struct Step {
  StepKind kind = StepKind::kCompute;
  int32_t slot = -1;   // kSync, kStart, kDone: the collective (Tape::slots)
  int32_t jump = -1;   // kLoopBegin: past the loop's end; kLoopEnd: the body's first step
  int32_t block = -1;  // kBlock: index into Tape::blocks
  int32_t op_kind = -1;
  int64_t trips = 0;
  double seconds = 0;  // kCompute, at compute scale 1
  double flops = 0;    // dots
  double ideal = 0;    // dots: FLOPs over the peak for their element type
  const ir::Instruction* instruction = nullptr;
};

// The compute of a collapsed loop, all its iterations: totals at compute
// scale 1, and per op kind (op kind, ops run, seconds).
struct ComputeBlock {
  double seconds = 0;
  double flops = 0;
  double ideal = 0;
  std::vector<std::tuple<int32_t, int64_t, double>> kinds;
};

// One collective instruction (a synchronous one, or a start) and its plan.
struct Slot {
  const ir::Instruction* instruction = nullptr;
  // Collectives of one kind over the same devices share a plan made for
  // one byte of operand: a message moves its plan's bytes times `bytes`
  // (a plan's bytes are linear in its operand's).
  std::shared_ptr<const Plan> plan;
  double bytes = 1;
  int32_t op_kind = -1;
  int32_t stream = 0;          // the device's transfer stream: one per cost::TransferKind
  std::vector<int64_t> links;  // CostModel::TransferLinks
};

// What one replay of the tape costs the event engine, with loops replayed
// trip by trip (saturating): the messages it moves over all devices, the
// steps one device walks through (a loop whose collectives move nothing,
// such as a collective-permute with no pairs, still costs its steps every
// trip), and the loop that multiplies them most.
struct ReplayCost {
  int64_t messages = 0;
  bool truncated = false;  // the tape stopped at its message budget: at least `messages`
  int64_t steps_per_device = 0;
  const ir::Instruction* loop = nullptr;  // the loop whose trips multiply the most
  int64_t loop_trips = 1;                 // its trips times those of the loops around it
};

struct Tape {
  std::vector<Step> steps;
  std::vector<Slot> slots;
  std::vector<ComputeBlock> blocks;
  std::vector<std::string> op_kinds;  // Step::op_kind and Slot::op_kind index this

  // What the report should say about how the program was flattened.
  std::vector<std::string> unknown_trip_counts;  // loops counted once
  std::vector<std::string> notes;
  std::vector<std::string> collective_plans;  // one line per collective instruction
  // BuildTape stopped compiling once the messages a replay would move passed
  // its budget: the tape is a prefix, good only for CostOfReplay.
  bool truncated = false;

  ReplayCost CostOfReplay() const;
};

// The longest tape BuildTape makes (about 2 GiB). The verifier bounds the
// instructions with calls inlined; a while loop adds two steps and compiles
// its condition twice.
inline constexpr size_t kMaxTapeSteps = 2 * static_cast<size_t>(ir::kMaxInlinedInstructions);

// Fails when a collective has no plan on this network, calls nest too
// deep, or the tape would exceed kMaxTapeSteps. With `max_messages` > 0 it
// first compiles the program with its plans only counted, and stops,
// truncated and with no plan made, as soon as a replay would move more
// messages than that (with the loops' trips): on thousands of devices the
// plans alone can take gigabytes. With a `symmetry` the plans are over its
// classes (plan.h), for a replay of one device per class.
Expected<Tape> BuildTape(const ir::Computation& entry, const cost::TargetCostModel& model,
                         const ir::DeviceGrid& grid, const cost::Target& target,
                         const Network& network, const Symmetry* symmetry = nullptr,
                         int64_t max_messages = 0);

}  // namespace loom::sim
