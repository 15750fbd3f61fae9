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
//   before (examples/mlp_block_tp8_large.hlo, 8 devices on tpu-v4-2x2x2:
//   the gather feeds the only dot, nothing hides it)
//     %x.full = bf16[16384,8192] all-gather(%x), dimensions={0}, ...
//     %h = bf16[16384,4096] dot(%x.full, %w1), ...
//   after: the ring (with the reduce-scatter's), because the step with them
//   is shorter:
//     collective-matmul: rewritten %x.full / %h in mlp_block: all-gather -> dot
//       (lhs free dimension 0, N=8): bidirectional unrolled ring, as every
//       candidate: step 19.004 ms -> 13.175 ms (-30.7%) on tpu-v4-2x2x2
//
// A candidate whose collective the schedule already overlaps with
// independent work, or whose ring costs more than it hides, is declined
// (examples/mlp_block_tp4.hlo on dgx-h100): "its best ring (unidirectional
// loop ring) makes the step 76.358 us against 52.927 us without it (+44.3%;
// needs better than -0.5%)".
//
// The greedy choice can be a trap: the best rewrite alone may leave nothing
// that pays beside it where two others together pay more. When it accepted
// anything, the gate decides once more without its first move's candidate
// and keeps the better program.
//
// Copies of one computation can each gain too little: a pipeline's phase
// loops each run their own copy of a layer's body (forward_layer,
// forward_layer.1, ...), so one copy's ring moves the step by about a fifth of
// what a ring in every copy does. The gate then groups the declined
// candidates by their pair, description and the name their computations
// share without a trailing ".N", and tries each group at once, every copy
// in its own best form, keeping it where the step gains min-gain. On Llama
// 3 70B under TP8 PP4 DP2, 1F1B with two virtual stages, on dgx-h100-x8,
// no candidate passed alone (-0.3% at best) and four groups of five copies
// take the step from 82.751 s to 78.644 s (-5.0%).
//
// The estimate is one device's: transfers in flight together share its
// ports (cost/transfer_flights.h: a cached ring's permutes beside a
// reduce-scatter on one NVLink port each run at half speed), but links
// away from it are not seen. `judge=simulate` prices every trial by the
// simulator instead (every device, links shared max-min fairly): it sees
// an all-to-all's rounds contend on a torus, which the estimate does not. On the 64-way MoE layer
// of bench/moe on tpu-v4-4x4x4 the estimate declines both exchanges (-0.4%) while the simulated
// step goes from 55.27 to 49.16 ms with them (1.124x; at 256-way, 69.12 to 61.33 ms); each trial
// costs a simulation (0.84 s in all there, 0.45 s estimated).
//
// The in-flight limit belongs to the schedule pass that follows; the gate
// prices with the same one (`permutes-in-flight=N` mirrors
// `schedule{max-in-flight.collective-permute=N}`). With 2, a bidirectional
// ring's two directions fly at once where their links are disjoint (a
// wrapping torus dimension): examples/mlp_block_tp8_large.hlo on
// tpu-v4-2x2x2 then goes from 13.175 ms to 11.620 ms, both rings bidirectional.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cost/target_cost_model.h"
#include "pass/collective_matmul.h"
#include "pass/schedule.h"

namespace loom::pass {

// What prices each trial's scheduled step.
enum class StepJudge {
  kEstimate,   // the cost model's estimate (cost/step_time.h): one device, its ports shared
  kSimulator,  // the simulator (sim/simulator.h): every device, links shared
};

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
  // Chunks per ring step (GateVerdict::step_chunks; 1: whole steps); the
  // gate tries 1, 2, 4, 8 and 16 when absent.
  std::optional<int64_t> step_chunks;
  // The schedule the trials use: give the same in-flight limits as the
  // schedule pass that follows (one of each kind by default, as XLA).
  ScheduleOptions schedule;
  // The estimate by default. The simulator sees what the estimate cannot
  // (transfers of different kinds, or of one collective, sharing links:
  // an all-to-all's rounds on a torus), at the price of simulating every
  // device for every trial.
  StepJudge judge = StepJudge::kEstimate;
};

class GatedCollectiveMatmul : public Pass {
 public:
  // `matching`: which pairs are candidates (forms, other-users); its gate,
  // min_bytes, direction and form are the gate's business and ignored.
  GatedCollectiveMatmul(CollectiveMatmulOptions matching,
                        std::shared_ptr<const cost::TargetCostModel> model,
                        StepGateOptions options = {})
      : matching_(std::move(matching)), model_(std::move(model)), options_(std::move(options)) {
    // An all-gather whose users are all dots: a ring for each sends the
    // shard once per dot, a cached ring once, but the other dots wait for
    // the whole ring. Unless told, the gate tries both as forms of the first
    // dot's candidate (the cache from any dot's) and keeps the faster.
    try_both_dot_users_ = !matching_.ring_per_dot.has_value();
    // A cached ring sends the shard once, as the all-gather did; the gate
    // prices what the other users' wait for the whole ring costs.
    if (!matching_.other_users) matching_.other_users = GatherOtherUsers::kCache;
  }

  std::string_view name() const override { return "collective-matmul"; }
  Expected<bool> Run(ir::Module& module) override;
  std::vector<std::string> Explain() const override { return explanation_; }
  std::vector<Decision> Decisions() const override { return decisions_; }

 private:
  CollectiveMatmulOptions matching_;
  bool try_both_dot_users_ = false;
  std::shared_ptr<const cost::TargetCostModel> model_;
  StepGateOptions options_;
  std::vector<Decision> decisions_;
  std::vector<std::string> explanation_;
};

// The estimated step of `module` once async-collectives and schedule
// (with `schedule`) have run over a copy of it, on schedule.grid where set
// (else the verifier's).
Expected<double> ScheduledStepSeconds(const ir::Module& module, const cost::CostModel& model,
                                      const ScheduleOptions& schedule);
// The same program's simulated step on the model's target.
Expected<double> SimulatedScheduledStepSeconds(const ir::Module& module,
                                               const cost::TargetCostModel& model,
                                               const ScheduleOptions& schedule);

}  // namespace loom::pass
