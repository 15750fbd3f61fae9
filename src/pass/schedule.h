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
// The algorithm is a top-down list scheduler. It keeps an estimated clock
// (cost/step_time.h's Timeline: compute advances it; a start launches a
// transfer that finishes at max(now, the end of its kind's previous
// transfer) + TransferSeconds; a done waits for it) and, while anything is
// left, takes among the instructions whose operands and control
// predecessors are all placed:
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
// Why top-down: the paper (Wang et al., ASPLOS 2023) reports a bottom-up
// list scheduler (XLA's latency hiding scheduler works from the root
// upwards, placing dones first and starts as far up as the budget allows)
// about 5% better than a top-down one. Top-down is what this first version
// does because its clock runs forward exactly as cost/step_time.h replays a
// schedule, so the scheduler's estimate and the step estimate agree by
// construction and every decision can be explained against one timeline; a
// bottom-up variant can reuse the same ready-set machinery.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cost/cost_model.h"
#include "cost/step_time.h"
#include "ir/collective_groups.h"
#include "pass/pass.h"

namespace loom::pass {

struct ScheduleOptions {
  // Transfers of each kind (cost::TransferKind) open at once, between a
  // start and its done. XLA's latency hiding scheduler allows one of each.
  std::array<int64_t, cost::kTransferKindCount> max_in_flight = {1, 1, 1, 1, 1, 1};
  // The devices transfers are costed on; by default the verifier's grid.
  std::optional<ir::DeviceGrid> grid;

  int64_t& MaxInFlight(cost::TransferKind kind) { return max_in_flight[static_cast<size_t>(kind)]; }
  // The same limit for every kind.
  void SetMaxInFlight(int64_t limit) { max_in_flight.fill(limit); }
};

class Schedule : public Pass {
 public:
  // `model` must outlive the pass.
  explicit Schedule(const cost::CostModel& model, ScheduleOptions options = {})
      : model_(model), options_(std::move(options)) {}
  std::string_view name() const override { return "schedule"; }
  Expected<bool> Run(ir::Module& module) override;
  // Per computation: instruction count and the estimated time before and
  // after (each alone, from idle streams), and any start placed past its limit.
  std::vector<std::string> Explain() const override { return explanation_; }

 private:
  const cost::CostModel& model_;
  ScheduleOptions options_;
  std::vector<std::string> explanation_;
};

}  // namespace loom::pass
