// collective-matmul with a target: which candidates to rewrite, and with
// which ring (direction, loop or unrolled), decided by the estimated step of
// the whole scheduled program with and without each rewrite. The estimate is
// the one `loom opt --estimate` prints after async-collectives and schedule
// (cost/step_time.h), so it prices everything a ring adds (a launch, slices
// and updates per step, the whole-output accumulation of a contracting ring,
// the loop's own ops) and, above all, it sees what the schedule does without
// any rewrite: a collective that independent work already hides gains
// nothing from a ring, and one that stays exposed does.
//
// The baseline is the program as given, with async-collectives and schedule
// (XLA's latency-hiding scheduler does as much without decomposing
// anything). Candidates interact (two of them may share a dot; a split
// all-reduce makes a new all-gather candidate of the dot that consumes it;
// one ring's transfers take the stream another would have used), so the
// gate decides greedily by gain: it estimates every candidate in every ring
// form on the program as rewritten so far, accepts the best if it makes the
// step faster by more than `min_gain`, and repeats (lazily: an estimate made
// before the last acceptance is redone before it is trusted). It then also
// tries every candidate rewritten in one form (what collective-matmul does
// without a target) and keeps that instead when it is better still.
//
//   before (4 devices, the gather feeds the only dot: nothing hides it)
//     %g = f32[256,128] all-gather(%x), dimensions={0}, ...
//     %y = f32[256,96] dot(%g, %w), ...
//   after: the ring, because the step with it is shorter:
//     collective-matmul: rewritten %g / %y in %main: all-gather -> dot (...):
//       unidirectional unrolled ring: step 21.4 us -> 16.0 us (-25%) on tpu-v4-4x4x4
//
// A candidate whose collective the schedule already overlaps with
// independent work is declined: "its best ring (...) makes the step 1.35 ms
// against 1.31 ms without it (+3.1%)".
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost/target_cost_model.h"
#include "pass/collective_matmul.h"
#include "pass/schedule.h"

namespace loom::pass {

struct StepGateOptions {
  // Rewrite only when the step gets faster by more than this fraction: the
  // model's margin, so that a rewrite the estimate barely favours is not
  // made on noise.
  double min_gain = 0.005;
  // Rings of more steps than this are emitted only as loops, to bound code
  // size; shorter ones are tried both ways.
  int64_t max_unrolled_steps = 16;
  // Fixed by the user; tried both ways when absent.
  std::optional<RingDirection> direction;
  std::optional<RingForm> form;
  // The schedule the trials use: give the same in-flight limits as the
  // schedule pass that follows (one of each kind by default, as XLA).
  ScheduleOptions schedule;
};

class GatedCollectiveMatmul : public Pass {
 public:
  // `matching`: which pairs are candidates (forms, other-users); its gate,
  // min_bytes, direction and form are the gate's business and ignored.
  GatedCollectiveMatmul(CollectiveMatmulOptions matching,
                        std::shared_ptr<const cost::TargetCostModel> model,
                        StepGateOptions options = {})
      : matching_(std::move(matching)), model_(std::move(model)), options_(std::move(options)) {}

  std::string_view name() const override { return "collective-matmul"; }
  Expected<bool> Run(ir::Module& module) override;
  std::vector<std::string> Explain() const override { return explanation_; }
  const std::vector<Decision>& decisions() const { return decisions_; }

 private:
  CollectiveMatmulOptions matching_;
  std::shared_ptr<const cost::TargetCostModel> model_;
  StepGateOptions options_;
  std::vector<Decision> decisions_;
  std::vector<std::string> explanation_;
};

// The estimated step of `module` once async-collectives and schedule
// (with `schedule`) have run over a copy of it.
Expected<double> ScheduledStepSeconds(const ir::Module& module, const cost::CostModel& model,
                                      const ScheduleOptions& schedule);

}  // namespace loom::pass
