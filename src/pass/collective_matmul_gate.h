// The cost-model gate of collective-matmul: for each candidate, estimate
// the original pair (the collective, then the dot) and every ring form on a
// target, and rewrite only when the best ring is faster.
//
// A ring of N steps takes, with t_c the time of one partial product and its
// merge (dynamic-update-slice, slice of the other operand, or add) and t_p
// the time of one collective-permute of a shard between ring neighbours
// (with its launch):
//
//   unidirectional:  (N-1) max(t_c, t_p) + t_c
//   bidirectional:   max(t_c, t_p2) + (a-1) max(2 t_c, t_p2) + t_last,
//                    a = ceil((N-1)/2) rounds, t_p2 both directions (at
//                    once when two permutes may be in flight: t_p on
//                    full-duplex links, twice on a bus; else one after
//                    the other),
//                    t_last the final round's one or two products
//   loop form:       plus a loop overhead (two launches) per iteration
//
// and a dot -> all-reduce pays its reduce-scatter ring plus the native
// all-gather of the result. The gate takes the fastest form; it unrolls up
// to `max_unrolled_steps` steps and uses the loop beyond, to bound code
// size. This replaces XLA's closed-form test (BRIEF section 2.5) with the
// target's own collective and permute times, which already say how many
// links the native collective uses that the ring does not.
#pragma once

#include <memory>
#include <optional>

#include "cost/target_cost_model.h"
#include "pass/collective_matmul.h"

namespace loom::pass {

struct GateOptions {
  int64_t max_unrolled_steps = 16;
  // Rewrite only when the ring saves at least this fraction of the
  // original: a margin for the model's error, so that a rewrite the
  // estimate barely favours is not made on noise.
  double min_gain = 0.02;
  // Collective-permutes the schedule keeps in flight at once. With one (the
  // schedule pass's default, like XLA's), the two directions of a
  // bidirectional ring take turns, so it pays only through its shorter
  // chain of steps; with two they overlap.
  int64_t permutes_in_flight = 1;
  // Fixed by the user; chosen by the gate when absent.
  std::optional<RingDirection> direction;
  std::optional<RingForm> form;
};

// The times the gate compares, in seconds.
struct RingEstimate {
  double collective = 0;     // the native collective
  double dot = 0;            // the whole product
  double original = 0;       // collective + dot
  double step_compute = 0;   // t_c
  double step_transfer = 0;  // t_p
  double unidirectional = 0;
  double bidirectional = 0;  // == unidirectional when N < 3
  double loop_overhead = 0;  // per loop iteration
};

RingEstimate EstimateRing(const cost::TargetCostModel& model, const Candidate& candidate,
                          int64_t permutes_in_flight = 1);

Gate MakeCostGate(std::shared_ptr<const cost::TargetCostModel> model, GateOptions options = {});

}  // namespace loom::pass
