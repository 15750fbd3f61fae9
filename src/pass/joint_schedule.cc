#include "pass/joint_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <optional>

#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "ir/async.h"
#include "ir/clone.h"
#include "ir/collective_groups.h"
#include "ir/verifier.h"
#include "sim/network.h"
#include "sim/plan.h"
#include "sim/simulator.h"
#include "support/units.h"

namespace loom::pass {

namespace {

using ir::Instruction;

// An asynchronous transfer whose start and done are in one computation,
// with every link its messages cross on any device; or a region: a while,
// call or conditional whose computations transfer (start and done are the
// instruction itself), which other transfers can be held back behind but
// which does not move.
struct Transfer {
  const Instruction* start = nullptr;
  const Instruction* done = nullptr;
  std::vector<sim::LinkId> links;  // sorted, unique
  bool region() const { return start == done; }
};

// Holding `held` back: its start moved to just after `ahead`'s done.
struct Move {
  std::string computation;
  std::string held;       // the start that moves
  std::string held_done;  // its done, which moves too when it came before `ahead`
  std::string ahead;      // the done (or region) it goes behind
  std::string held_kind, ahead_kind;
  int64_t shared_links = 0;
};

void SortUnique(std::vector<sim::LinkId>& links) {
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
}

// Whatever the transfers of `computation` and everything it calls cross
// (an async-start's own computation holds the collective it starts: its
// start counts, not the computation).
struct LinkFinder {
  const ir::DeviceGrid& grid;
  const cost::Target& target;
  const sim::Network& network;

  Status AddLinksOf(const Instruction& transfer, std::vector<sim::LinkId>& links) const {
    LOOM_ASSIGN_OR_RETURN(const sim::Plan plan, sim::BuildPlan(transfer, grid, target, network));
    links.insert(links.end(), plan.route_links.begin(), plan.route_links.end());
    return OkStatus();
  }

  Status AddLinksWithin(const ir::Computation& computation, std::vector<sim::LinkId>& links) const {
    for (const auto& instruction : computation.instructions()) {
      const cost::TransferRole role = cost::TransferRoleOf(*instruction);
      if (role == cost::TransferRole::kStart || role == cost::TransferRole::kSynchronous) {
        LOOM_RETURN_IF_ERROR(AddLinksOf(*instruction, links));
      } else if (role == cost::TransferRole::kNone) {
        for (const ir::Computation* callee : instruction->called_computations()) {
          LOOM_RETURN_IF_ERROR(AddLinksWithin(*callee, links));
        }
      }
    }
    return OkStatus();
  }
};

Expected<std::vector<Transfer>> TransfersOf(const ir::Computation& computation,
                                            const LinkFinder& finder) {
  std::vector<Transfer> transfers;
  for (const auto& instruction : computation.instructions()) {
    const cost::TransferRole role = cost::TransferRoleOf(*instruction);
    Transfer transfer;
    if (role == cost::TransferRole::kDone) {
      const Instruction* start = ir::StartOf(*instruction);
      if (start == nullptr || start->parent() != &computation) continue;
      transfer = {start, instruction.get(), {}};
      LOOM_RETURN_IF_ERROR(finder.AddLinksOf(*start, transfer.links));
    } else if (role == cost::TransferRole::kNone && !instruction->called_computations().empty()) {
      transfer = {instruction.get(), instruction.get(), {}};
      for (const ir::Computation* callee : instruction->called_computations()) {
        LOOM_RETURN_IF_ERROR(finder.AddLinksWithin(*callee, transfer.links));
      }
    } else {
      continue;
    }
    SortUnique(transfer.links);
    if (!transfer.links.empty()) transfers.push_back(std::move(transfer));
  }
  return transfers;
}

int64_t SharedLinks(const Transfer& a, const Transfer& b) {
  std::vector<sim::LinkId> shared;
  std::set_intersection(a.links.begin(), a.links.end(), b.links.begin(), b.links.end(),
                        std::back_inserter(shared));
  return static_cast<int64_t>(shared.size());
}

// "all-reduce", or for a region its opcode: "while".
std::string KindOf(const Instruction& start) {
  const std::optional<cost::TransferKind> kind = cost::TransferKindOf(start);
  return kind ? std::string(cost::TransferKindName(*kind))
              : std::string(ir::OpcodeName(start.opcode()));
}

// Every pair of transfers on a common link where the second's start comes
// before the first's done, and so can go just after it.
Expected<std::vector<Move>> CandidateMoves(const ir::Module& module, const cost::Target& target) {
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  LOOM_ASSIGN_OR_RETURN(const sim::Network network, sim::Network::Build(target, grid.size(), {}));
  std::vector<Move> moves;
  const LinkFinder finder{grid, target, network};
  for (const auto& computation : module.computations()) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<Transfer> transfers, TransfersOf(*computation, finder));
    if (transfers.size() < 2) continue;
    std::map<const Instruction*, size_t> position;
    for (const auto& instruction : computation->instructions()) {
      position.emplace(instruction.get(), position.size());
    }
    for (const Transfer& ahead : transfers) {
      for (const Transfer& held : transfers) {
        if (&ahead == &held || held.region()) continue;
        // Behind any later done on a common link, not only those in flight
        // with it now: a gradient in flight during a ring's first step goes
        // best behind its last.
        if (position[held.start] >= position[ahead.done]) continue;
        const int64_t shared = SharedLinks(ahead, held);
        if (shared == 0) continue;
        moves.push_back({computation->name(), held.start->name(), held.done->name(),
                         ahead.done->name(), KindOf(*held.start), KindOf(*ahead.start), shared});
      }
    }
  }
  return moves;
}

const Instruction* Named(const ir::Computation& computation, const std::string& name) {
  for (const auto& instruction : computation.instructions()) {
    if (instruction->name() == name) return instruction.get();
  }
  return nullptr;
}

// Whether every operand and control predecessor of each instruction in
// `order` that belongs to `computation` comes before it.
bool RespectsDependencies(const ir::Computation& computation,
                          const std::vector<const Instruction*>& order) {
  std::map<const Instruction*, size_t> position;
  for (const Instruction* instruction : order) position.emplace(instruction, position.size());
  const auto before = [&](const Instruction* value, size_t at) {
    if (value->parent() != &computation) return true;
    const auto found = position.find(value);
    return found != position.end() && found->second < at;
  };
  for (size_t at = 0; at < order.size(); ++at) {
    for (const Instruction* operand : order[at]->operands()) {
      if (!before(operand, at)) return false;
    }
    for (const Instruction* predecessor : order[at]->attrs().control_predecessors) {
      if (!before(predecessor, at)) return false;
    }
  }
  return true;
}

// `order` with `done` moved to just before its first user after `after`
// (the computation's end when it has none there).
void MoveDoneBeforeFirstUse(std::vector<const Instruction*>& order, const Instruction* done,
                            const Instruction* after) {
  order.erase(std::find(order.begin(), order.end(), done));
  auto at = std::find(order.begin(), order.end(), after) + 1;
  while (at != order.end()) {
    const auto& operands = (*at)->operands();
    const auto& predecessors = (*at)->attrs().control_predecessors;
    if (std::find(operands.begin(), operands.end(), done) != operands.end() ||
        std::find(predecessors.begin(), predecessors.end(), done) != predecessors.end()) {
      break;
    }
    ++at;
  }
  order.insert(at, done);
}

// `module` with `move` made: the held start just after the done ahead of
// it, and the held done (when it came before that) just before its first
// use. Null when that order would break a dependency.
Expected<std::unique_ptr<ir::Module>> Apply(const ir::Module& module, const Move& move) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> moved, ir::CloneModule(module));
  ir::Computation* computation = moved->FindComputation(move.computation);
  if (computation == nullptr) return Error{"joint-schedule: lost %" + move.computation};
  const Instruction* held = Named(*computation, move.held);
  const Instruction* ahead = Named(*computation, move.ahead);
  const Instruction* held_done = Named(*computation, move.held_done);
  if (held == nullptr || ahead == nullptr || held_done == nullptr) {
    return Error{fmt::format("joint-schedule: lost %{} or %{}", move.held, move.ahead)};
  }
  std::vector<const Instruction*> order;
  bool done_first = false;  // the held done comes before the done ahead
  bool passed_ahead = false;
  for (const auto& instruction : computation->instructions()) {
    if (instruction.get() == held) continue;
    if (instruction.get() == held_done && !passed_ahead) done_first = true;
    order.push_back(instruction.get());
    if (instruction.get() == ahead) {
      order.push_back(held);
      passed_ahead = true;
    }
  }
  if (done_first) MoveDoneBeforeFirstUse(order, held_done, held);
  if (!RespectsDependencies(*computation, order)) return std::unique_ptr<ir::Module>();
  if (!computation->ReorderInstructions(order)) {
    return Error{"joint-schedule: could not reorder %" + move.computation};
  }
  return moved;
}

std::string Change(double before, double after) {
  return fmt::format("{:+.1f}%", 100 * (after / before - 1));
}

}  // namespace

Expected<bool> JointSchedule::Run(ir::Module& module) {
  explanation_.clear();
  const auto simulate = [&](const ir::Module& m) -> Expected<double> {
    Expected<sim::SimReport> report = sim::Simulate(m, target_, options_.simulation);
    if (!report.ok()) {
      return Error{"joint-schedule: the simulation failed: " + report.error().message};
    }
    return report->step_seconds;
  };
  // Without a candidate there is nothing to try, nor to simulate: a module
  // of a million devices and no shared link costs no replay.
  LOOM_ASSIGN_OR_RETURN(const std::vector<Move> first_moves, CandidateMoves(module, target_));
  if (first_moves.empty()) {
    explanation_.push_back("no two transfers of one computation cross a common link");
    return false;
  }
  LOOM_ASSIGN_OR_RETURN(const double initial, simulate(module));
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  const cost::TargetCostModel model(target_);
  // What contention costs the step: the simulated step over the estimate,
  // which sees none. Holding transfers back can only recover that much;
  // below min-gain of the step there is nothing to search for.
  const double contention = std::max(
      0.0,
      initial - cost::EstimateStep(module, model, grid, cost::Contention::kNone).total_seconds);
  std::unique_ptr<ir::Module> current;
  double step = initial;
  int64_t trials = 1, kept = 0;
  bool out_of_trials = false;
  while (!out_of_trials) {
    LOOM_ASSIGN_OR_RETURN(const std::vector<Move> moves,
                          current ? CandidateMoves(*current, target_) : first_moves);
    if (kept == 0 && contention <= options_.min_gain * initial) {
      explanation_.push_back(fmt::format(
          "contention costs the step {} of {} (the simulated step over the contention-free "
          "estimate): nothing to recover above min-gain",
          FormatSeconds(contention), FormatSeconds(initial)));
      break;
    }
    std::unique_ptr<ir::Module> best;
    std::optional<Move> best_move;
    double best_step = step * (1 - options_.min_gain);
    for (const Move& move : moves) {
      if (trials >= options_.max_trials) {
        out_of_trials = true;
        break;
      }
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ir::Module> trial,
                            Apply(current ? *current : module, move));
      if (!trial) continue;
      ++trials;
      LOOM_ASSIGN_OR_RETURN(const double seconds, simulate(*trial));
      if (seconds < best_step) {
        best_step = seconds;
        best = std::move(trial);
        best_move = move;
      }
    }
    if (!best) break;
    explanation_.push_back(fmt::format(
        "held back %{} ({}) behind %{} ({}) in {}: {} shared link(s); simulated step {} -> {} "
        "({}) on {}",
        best_move->held, best_move->held_kind, best_move->ahead, best_move->ahead_kind,
        best_move->computation, best_move->shared_links, FormatSeconds(step),
        FormatSeconds(best_step), Change(step, best_step), target_.name()));
    step = best_step;
    current = std::move(best);
    ++kept;
  }
  explanation_.push_back(fmt::format(
      "simulated step on {}: {} -> {} ({}) with {} move(s), {} simulation(s){}", target_.name(),
      FormatSeconds(initial), FormatSeconds(step), Change(initial, step), kept, trials,
      trials >= options_.max_trials ? fmt::format(" (max-trials={} reached)", options_.max_trials)
                                    : ""));
  if (!current) return false;
  // The computations of the moved clone replace the module's.
  for (const auto& computation : current->computations()) {
    ir::Computation* target_computation = module.FindComputation(computation->name());
    if (target_computation == nullptr) continue;
    std::map<std::string_view, const Instruction*> by_name;
    for (const auto& instruction : target_computation->instructions()) {
      by_name.emplace(instruction->name(), instruction.get());
    }
    std::vector<const Instruction*> order;
    for (const auto& instruction : computation->instructions()) {
      const auto original = by_name.find(instruction->name());
      if (original == by_name.end()) {
        return Error{"joint-schedule: lost %" + instruction->name()};
      }
      order.push_back(original->second);
    }
    if (!target_computation->ReorderInstructions(order)) {
      return Error{"joint-schedule: could not reorder %" + computation->name()};
    }
  }
  return true;
}

}  // namespace loom::pass
