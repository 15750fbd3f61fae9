// joint-schedule: orders transfers of different collectives that share
// links against each other, by the simulator's model of link contention,
// after schedule has placed them.
//
// schedule prices each transfer kind on a stream of its own, and transfers
// in flight together share only each device's ports (cost/step_time.h): a
// tensor-parallel ring's permutes and a data-parallel gradient all-reduce
// on one NVLink port each get half of it, which schedule sees and orders
// by. What it cannot see is where routes cross away from the device: on a
// torus the gradient's pairs 4 hops apart run over every link of the
// ring's line, four flows on each. Where routes cross the same links they
// share them (max-min fairly in the simulator, and on the machine), and
// when the ring is on the critical path (a dot waits for each of its
// steps) the sharing lengthens the step while the gradient, needed only at
// the end, gains nothing by going early.
//
// The pass simulates the module on the target (sim/simulator.h). For every
// asynchronous transfer of a computation and every later done in it (of a
// transfer, or a while, call or conditional whose computations transfer)
// whose messages cross a link the first one's cross too (sim::BuildPlan's
// routes on every device), it tries holding the first back: its start
// moved to just after that done, and its done, if it came before, to just
// before its first use. Not only the transfers in flight with it now: a
// gradient in flight during a ring's first step goes best behind the last.
// It keeps the move that shortens the simulated step the most, by more
// than min-gain, and repeats while a move helps and the trial budget
// (max-trials simulations) lasts. What it can recover is at most what
// contention costs: the simulated step over the cost model's
// contention-free estimate (cost::Contention::kNone); when that is below
// min-gain of the step it tries no move
// (corpus 35, the 405B step on 128 TPU v4 chips: none, one simulation). A move that would put an
// instruction before an operand or control predecessor is not tried; nothing but the order changes.
//
//   before (schedule's order; the all-reduce goes first, its operand a
//   parameter, and shares each device's links with the ring):
//     %g-start = all-reduce-start(%grad), replica_groups={{0,4},{1,5},...}
//     %p1 = collective-permute-start(%x), source_target_pairs={{0,1},...}
//     %d0 = dot(%x, %w)
//     %x1 = collective-permute-done(%p1)
//     ...                                  // the ring's last step
//     %y = dot(%h, %w2)
//     %g = all-reduce-done(%g-start)
//   after (held back behind the ring's last step, it overlaps %y alone):
//     %p1 = collective-permute-start(%x), ...
//     ...
//     %x3 = collective-permute-done(%p3)
//     %g-start = all-reduce-start(%grad), ...
//     %y = dot(%h, %w2)
//     %g = all-reduce-done(%g-start)
//
// examples/two_axes_tp4_dp2.hlo is that case (bench/joint/run.sh): on a
// TPU v4 ring of 8 chips the step goes from 5.816 to 5.421 ms (1.073x); on
// a DGX H100 node schedule already keeps the gradient off the ring's port
// (500.0 us, the contention-free estimate; before the estimate shared
// ports, joint-schedule moved it there from 559.4 us); on tpu-v4:4x2x1 the
// two axes use different torus dimensions and nothing moves.
//
// Not done: splitting a transfer to fill the gaps between a ring's steps,
// or routing it over links the ring does not use (the simulator's routes
// are fixed: dimension-ordered on a torus).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cost/target.h"
#include "pass/pass.h"
#include "sim/options.h"

namespace loom::pass {

struct JointScheduleOptions {
  // A move is kept only when it makes the simulated step shorter by more
  // than this fraction.
  double min_gain = 0.005;
  // Simulations the pass may run in all (the first, of the module as
  // given, included).
  int64_t max_trials = 200;
  // How each is run: its bounds on messages and steps (a module past them
  // is an error, as for `loom simulate`).
  sim::SimOptions simulation;
};

class JointSchedule : public Pass {
 public:
  JointSchedule(cost::Target target, JointScheduleOptions options = {})
      : target_(std::move(target)), options_(options) {}
  std::string_view name() const override { return "joint-schedule"; }
  Expected<bool> Run(ir::Module& module) override;
  // Each move kept (which start, behind which done, the links they share,
  // the simulated step before and after), then the whole step and the
  // trials run.
  std::vector<std::string> Explain() const override { return explanation_; }

 private:
  cost::Target target_;
  JointScheduleOptions options_;
  std::vector<std::string> explanation_;
};

}  // namespace loom::pass
