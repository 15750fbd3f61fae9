// schedule: orders the instructions of every computation (the entry and
// everything it calls, while bodies included; not the computations of
// fusions and async ops) so that transfers overlap compute, by list
// scheduling against a cost model. The text order of the result is the
// schedule, and the module is marked is_scheduled=true.
//
// Only data edges (operands) and control_predecessors constrain the order:
// the scheduler adds no dependency of its own, so an op unrelated to a
// pending transfer never has to wait for it. Parameters stay first, in
// their order, and the root last (unless something in the computation uses
// it).
//
// Two list schedulers order each computation; by default both run and the
// order with the shorter estimate (cost/step_time.h's Timeline, the
// computation alone from idle streams) is kept, a tie going to top-down.
// `order=top-down|bottom-up` runs just one.
//
// Top-down keeps an estimated clock (the Timeline: compute advances it; a
// start launches a transfer that begins when its kind's stream lets it and
// takes TransferSeconds; a done waits for it) and, while anything is left,
// takes among the instructions whose operands and control predecessors are
// all placed:
//
//   1. a start whose kind has fewer than max_in_flight transfers open
//      (between a start and its done), the longest critical path first:
//      starts go as early as their operands allow;
//   2. else a done whose transfer has already finished (by the clock) and
//      whose kind has a start waiting for room: it costs nothing and lets
//      that start go;
//   3. else, among the compute ops and the dones whose transfer has already
//      finished, the one with the longest critical path (the longest
//      remaining path to the end, weighing ops by ComputeSeconds and
//      transfers by TransferSeconds): an already-finished done competes on
//      the same terms as compute, so a ring's chain (done -> add -> next
//      start) is not starved by independent dots;
//   4. else the done whose transfer finishes first: a done waits only when
//      nothing else can run, so dones go as late as their users allow.
//   5. (never expected: only starts without room are ready) the start with
//      the longest critical path, past the limit; Explain says so.
//
// Rules 2 and 3 refine the plain "start, else compute, else done" order:
// with it, a done already finished would wait behind every independent op,
// holding back the start after it. Ties go to the earlier instruction of
// the original order, so a module already in a good order keeps it.
//
// Bottom-up (the paper's, Wang et al., ASPLOS 2023, which reports it about
// 5% better; XLA's latency hiding scheduler works the same way) places
// from the root upwards, with a clock that counts time from the end, and
// takes among the instructions whose users are all placed:
//
//   1. a done whose kind has room: dones go as late as their users allow,
//      and open their transfer;
//   2. else a start whose transfer the ops placed since its done already
//      cover (TransferSeconds of clock since the done): it goes just early
//      enough, keeping its buffer short-lived and its slot free above;
//   3. else a compute op, the deepest first (the longest path from the
//      start of the computation), ties to the later instruction;
//   4. else the start closest to being covered; the clock takes the part of
//      its transfer nothing covered;
//   5. else (only dones without room) the deepest done, past the limit.
//
// Neither dominates: top-down starts a transfer the moment its operand
// exists even when it is needed only at the end, and takes the slot a
// later, more urgent one wanted; bottom-up can push an independent op to
// the very end where nothing overlaps it. schedule_test.cc has a closed-form
// case of each. With async-collectives then schedule over the corpus and
// the examples on TPU v4 and DGX H100 targets sized to each (76 pairs),
// bottom-up alone gives the shorter step in 8, by up to 17% (corpus 02 on
// TPU v4), top-down alone in 3; the choice per computation beats both on
// the 405B step on TPU v4 (112.7 s against 113.8 and 115.1).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "cost/step_time.h"
#include "ir/collective_groups.h"
#include "pass/pass.h"

namespace loom::pass {

// Which list scheduler orders each computation (see above).
enum class ScheduleOrder {
  kBest,  // both; the one with the shorter estimate (a tie: top-down)
  kTopDown,
  kBottomUp,
};

struct ScheduleOptions {
  // Transfers of each kind (cost::TransferKind) open at once, between a
  // start and its done. XLA's latency hiding scheduler allows one of each.
  std::array<int64_t, cost::kTransferKindCount> max_in_flight = {1, 1, 1, 1, 1, 1};
  // The devices transfers are costed on; by default the verifier's grid.
  std::optional<ir::DeviceGrid> grid;
  ScheduleOrder order = ScheduleOrder::kBest;

  int64_t& MaxInFlight(cost::TransferKind kind) { return max_in_flight[static_cast<size_t>(kind)]; }
  // The same limit for every kind.
  void SetMaxInFlight(int64_t limit) { max_in_flight.fill(limit); }
};

class Schedule : public Pass {
 public:
  // `model` must outlive the pass.
  explicit Schedule(const cost::CostModel& model, ScheduleOptions options = {})
      : model_(model), options_(std::move(options)) {}
  // Shares `model` (passes made by name live as long as their pipeline).
  explicit Schedule(std::shared_ptr<const cost::CostModel> model, ScheduleOptions options = {})
      : shared_model_(std::move(model)), model_(*shared_model_), options_(std::move(options)) {}
  std::string_view name() const override { return "schedule"; }
  Expected<bool> Run(ir::Module& module) override;
  // Per computation: instruction count and the estimated time before and
  // after (each alone, from idle streams), and any start placed past its limit.
  std::vector<std::string> Explain() const override { return explanation_; }

 private:
  std::shared_ptr<const cost::CostModel> shared_model_;  // before model_: it may refer to it
  const cost::CostModel& model_;
  ScheduleOptions options_;
  std::vector<std::string> explanation_;
};

}  // namespace loom::pass
