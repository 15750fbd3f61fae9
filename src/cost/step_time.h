// How long one step of a scheduled per-device program takes, by the cost
// model, on one device: the text order of the entry computation is the
// schedule, replayed on one compute stream and one transfer stream per kind
// of collective.
//
//   - a compute op occupies the compute stream for ComputeSeconds;
//   - a synchronous collective waits until its kind's stream lets it begin
//     (below), then blocks the compute stream for its TransferSeconds;
//   - a -start (all-gather-start, all-reduce-start, collective-permute-start,
//     async-start wrapping a collective) launches its transfer, which begins
//     when its kind's stream lets it and takes TransferSeconds; the compute
//     stream goes on at once;
//   - the matching -done waits until that transfer has finished;
//   - a while runs its condition and body KnownTripCount times, then the
//     condition once more; a loop whose trip count is unknown runs once and
//     is named in StepEstimate::unknown_trip_counts;
//   - a call runs its callee, a conditional its slowest branch; a fusion (or
//     any other op that calls a computation) is costed as one op.
//
// For example, with dots of 1 us and transfers of 2 us:
//
//   %s = collective-permute-start(%x)      transfer 0..2 us
//   %d = dot(%a, %b)                       compute  0..1 us
//   %r = collective-permute-done(%s)       waits    1..2 us (exposed 1 us)
//
// takes 2 us, 1 of them exposed transfer; with the dot after the done it
// takes 3 us, 2 exposed.
//
// Transfers of one kind share one stream: each begins no earlier than the
// one issued before it, and not before every earlier one of its kind has
// finished, unless the two use disjoint links (CostModel::TransferLinks: a
// bidirectional ring's two directions on a torus run at once). Transfers in
// flight at once (of different kinds, or of one kind on disjoint links)
// share the device's ports (cost/transfer_flights.h): a ring of
// collective-permutes and a reduce-scatter over the same NVLink ports each
// run at half speed while both run, which is what the gate must see to
// price a ring against the collectives beside it. The simulator follows
// the same stream rule and shares every link max-min fairly across all the
// devices' flows, adding the waits for peers.
//
// With the dots above and a 2 us all-gather started just after the
// permute on the same ports, each moves at half speed while both run: the
// permute ends at 4 us, the all-gather at 4 us, and the done waits 3 us.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cost/cost_model.h"
#include "cost/transfer_flights.h"
#include "ir/collective_groups.h"
#include "ir/module.h"
#include "support/status.h"

namespace loom::cost {

// The kinds of transfer that get a stream (and an in-flight limit) each.
// kOther: collective-broadcast.
enum class TransferKind {
  kCollectivePermute,
  kAllGather,
  kAllReduce,
  kReduceScatter,
  kAllToAll,
  kOther,
};
inline constexpr int kTransferKindCount = 6;
static_assert(kTransferKindCount == TransferFlights::kKinds);
// "collective-permute", "all-gather", "all-reduce", "reduce-scatter",
// "all-to-all", "other".
std::string_view TransferKindName(TransferKind kind);
std::optional<TransferKind> ParseTransferKind(std::string_view name);

// What an instruction does to a transfer stream.
enum class TransferRole {
  kNone,         // not a transfer (compute, aliasing, control flow, ...)
  kSynchronous,  // all-gather, all-reduce, ..., collective-permute
  kStart,        // *-start, or an async-start wrapping a collective (ir/async.h)
  kDone,         // *-done, or the async-done of such an async-start
};
TransferRole TransferRoleOf(const ir::Instruction& instruction);
// The kind of transfer a collective, start or done makes; nullopt when its
// role is kNone.
std::optional<TransferKind> TransferKindOf(const ir::Instruction& instruction);

// Whether transfers in flight at once share the device's ports (the
// estimate the gate, the scheduler and `loom opt --estimate` use), or each
// runs as if alone: the contention-free bound that the simulator's report
// and joint-schedule measure contention against.
enum class Contention { kSharedPorts, kNone };

struct StepEstimate {
  double total_seconds = 0;
  // Sum of ComputeSeconds over every op run.
  double compute_seconds = 0;
  // Sum of TransferSeconds over every transfer made.
  double transfer_seconds = 0;
  // Time the compute stream spent waiting on transfers: in synchronous
  // collectives and in -dones whose transfer had not finished.
  double exposed_transfer_seconds = 0;
  // While loops (by instruction name) whose trip count is unknown; each
  // was counted as running once.
  std::vector<std::string> unknown_trip_counts;

  // "12.0 us (compute 10.0 us, transfer 4.0 us, exposed 2.0 us)", plus the
  // loops of unknown trip count when there are any.
  std::string ToString() const;
};

// Every transfer's time on each device (CostModel::TransferSecondsByDevice),
// computed once per instruction.
class TransferTimes {
 public:
  TransferTimes(const CostModel& model, const ir::DeviceGrid& grid) : model_(&model), grid_(grid) {}
  const std::vector<double>& Of(const ir::Instruction& instruction);
  // Its CostModel::TransferLinks.
  const std::vector<int64_t>& LinksOf(const ir::Instruction& instruction);
  // Its CostModel::TransferSegmentsByDevice.
  const TransferSegmentTable& SegmentsOf(const ir::Instruction& instruction);
  // The slowest device's time (CostModel::TransferSeconds) and segments.
  double SlowestOf(const ir::Instruction& instruction);
  const std::vector<TransferSegment>& SlowestSegmentsOf(const ir::Instruction& instruction);

 private:
  const CostModel* model_;
  ir::DeviceGrid grid_;
  std::unordered_map<const ir::Instruction*, std::vector<double>> times_;
  std::unordered_map<const ir::Instruction*, double> slowest_;  // a replay asks at every run
  std::unordered_map<const ir::Instruction*, std::vector<int64_t>> links_;
  std::unordered_map<const ir::Instruction*, TransferSegmentTable> segments_;
  std::unordered_map<const ir::Instruction*, std::vector<TransferSegment>> slowest_segments_;
};

// The replay itself, one instruction at a time; the scheduler drives it
// while it picks an order, EstimateStep over a whole entry computation.
class Timeline {
 public:
  // Transfers take CostModel::TransferSeconds: the slowest group's time.
  // Compute takes `compute` (the fusion plans it has made so far shared).
  Timeline(const CostModel& model, const ir::DeviceGrid& grid)
      : Timeline(model, grid, ComputeTimes(model)) {}
  Timeline(const CostModel& model, const ir::DeviceGrid& grid, ComputeTimes compute)
      : model_(&model), grid_(grid), compute_(std::move(compute)) {}
  // Transfers take CostModel::TransferSeconds, priced once in `times` for
  // every timeline that shares it (a scheduler's several replays).
  Timeline(const CostModel& model, const ir::DeviceGrid& grid, ComputeTimes compute,
           TransferTimes& times)
      : model_(&model), grid_(grid), compute_(std::move(compute)), times_(&times) {}
  // Transfers take `device`'s own time (its group, its pairs).
  Timeline(const CostModel& model, const ir::DeviceGrid& grid, TransferTimes& times, int64_t device,
           Contention contention = Contention::kSharedPorts)
      : Timeline(model, grid, ComputeTimes(model), times, device, contention) {}
  Timeline(const CostModel& model, const ir::DeviceGrid& grid, ComputeTimes compute,
           TransferTimes& times, int64_t device, Contention contention)
      : model_(&model),
        grid_(grid),
        compute_(std::move(compute)),
        times_(&times),
        device_(device),
        contention_(contention) {}

  // Runs `instruction` after everything run so far (its callees too).
  void Run(const ir::Instruction& instruction);
  // Runs every instruction of `computation` in text order.
  void RunComputation(const ir::Computation& computation);

  // The compute stream's clock.
  double now() const { return now_; }
  // When the transfer `start` launched finishes; nullopt when it has not
  // been launched (or its done has run).
  std::optional<double> TransferFinish(const ir::Instruction& start) const;
  // The totals so far (total_seconds is now()).
  StepEstimate estimate() const;

 private:
  void RunWhile(const ir::Instruction& instruction);
  void RunConditional(const ir::Instruction& instruction);
  void NoteUnknownTripCount(const std::string& name);

  double TransferSecondsOf(const ir::Instruction& instruction) const;
  std::vector<int64_t> TransferLinksOf(const ir::Instruction& instruction) const;
  // The segments of this device (without one, of the slowest device),
  // adding up to TransferSecondsOf.
  std::vector<TransferSegment> TransferSegmentsOf(const ir::Instruction& instruction) const;
  // When a transfer of `kind` with `links` issued now may begin.
  double TransferBegin(int kind, const std::vector<int64_t>& links) const;
  // How long after now each kind's last transfer ends (0 when none).
  std::array<double, kTransferKindCount> Backlog() const;
  // Moves every transfer still in flight `seconds` later.
  void DelayTransfers(double seconds);

  const CostModel* model_;
  ir::DeviceGrid grid_;
  ComputeTimes compute_;
  TransferTimes* times_ = nullptr;
  int64_t device_ = -1;
  Contention contention_ = Contention::kSharedPorts;
  // Without `times_`: each transfer's time and links, priced once (a
  // scheduler runs the same transfer many times; an all-to-all's price is
  // N^2 pairs).
  mutable std::unordered_map<const ir::Instruction*, double> seconds_;
  mutable std::unordered_map<const ir::Instruction*, std::vector<int64_t>> links_;
  mutable std::unordered_map<const ir::Instruction*, std::vector<TransferSegment>> segments_;
  double now_ = 0;
  // The transfers in flight, and per kind when the last one began (the
  // next begins no earlier: program order).
  TransferFlights flights_;
  std::array<double, kTransferKindCount> last_begin_{};
  std::unordered_map<const ir::Instruction*, TransferFlights::Id> in_flight_;
  StepEstimate totals_;
};

// The estimate of the entry computation on the grid the verifier finds
// (fails when the module does not verify), or on `grid`: the slowest
// device's. Devices whose transfers all take the same times and segments
// (the same group times, the same pairs' times, on the same kinds of port)
// replay alike, so one of each such class is replayed. The simulator adds
// the waits for peers and the contention of links away from the device,
// and shares a link max-min fairly where the estimate gives each transfer
// its smallest share of a port, so it usually finds a longer step; not
// always (a transfer whose port-mate is held back by a busier port gets
// only its equal share here, where max-min sharing would give it the rest).
Expected<StepEstimate> EstimateStep(const ir::Module& module, const CostModel& model,
                                    Contention contention = Contention::kSharedPorts);
StepEstimate EstimateStep(const ir::Module& module, const CostModel& model,
                          const ir::DeviceGrid& grid,
                          Contention contention = Contention::kSharedPorts);

// How long `instruction` keeps the compute stream of an idle device:
// ComputeSeconds, the transfer time of a synchronous collective or a start,
// and for a while, call or conditional the time of what it calls.
double IsolatedSeconds(const ir::Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid);
// The same with `compute`'s compute times (and the fusion plans it holds).
double IsolatedSeconds(const ir::Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid, const ComputeTimes& compute);
// And with the transfers priced once in `transfers` (a scheduler's).
double IsolatedSeconds(const ir::Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid, const ComputeTimes& compute,
                       TransferTimes& transfers);

}  // namespace loom::cost
