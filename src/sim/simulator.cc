#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "sim/event_engine.h"
#include "sim/symmetry.h"
#include "sim/tape.h"
#include "support/saturating.h"

namespace loom::sim {

namespace {

std::string AtLeast(int64_t count, bool truncated = false) {
  return count == kSaturated || truncated ? "at least " : "";
}

// " (the while %w at line 9 runs 4096 times, with the loops around it)"
std::string LoopThatMultiplies(const ReplayCost& cost) {
  if (cost.loop == nullptr) return "";
  return fmt::format(" (the while %{} at line {} runs {}{} times, with the loops around it)",
                     cost.loop->name(), cost.loop->loc().line, AtLeast(cost.loop_trips),
                     cost.loop_trips);
}

// Refuses up front a replay that would run for hours: too many messages,
// or too many steps walked (a loop whose collectives move nothing still
// walks its steps every trip).
Status CheckReplayCost(const ir::Module& module, const ReplayCost& cost, int64_t devices,
                       const SimOptions& options) {
  if (options.max_messages > 0 && cost.messages > options.max_messages) {
    return Error{
        fmt::format("simulating module {} would move {}{} messages{}, more than the limit of {} "
                    "(--max-messages): loops that transfer are replayed trip by trip",
                    module.name(), AtLeast(cost.messages, cost.truncated), cost.messages,
                    LoopThatMultiplies(cost), options.max_messages)};
  }
  const int64_t steps = SaturatingMul(cost.steps_per_device, devices);
  if (options.max_steps > 0 && steps > options.max_steps) {
    return Error{fmt::format(
        "simulating module {} would replay {}{} steps over its {} devices{}, more than the limit "
        "of {} (--max-steps): loops that transfer are replayed trip by trip",
        module.name(), AtLeast(steps), steps, devices, LoopThatMultiplies(cost),
        options.max_steps)};
  }
  return OkStatus();
}

// One device per class of symmetric devices replays what every device of
// the class does, unless the devices differ (a straggler, a slowed link).
bool ExploitsSymmetry(const SimOptions& options) {
  if (!options.exploit_symmetry) return false;
  return std::all_of(options.compute_scale.begin(), options.compute_scale.end(),
                     [](double scale) { return scale == 1; });
}

}  // namespace

Expected<SimReport> Simulate(const ir::Module& module, const cost::Target& target,
                             const SimOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  const int64_t devices = grid.size();
  if (devices > target.device_count()) {
    return Error{
        fmt::format("module {} runs on {} devices ({} replica(s) x {} partition(s)); "
                    "target {} has {}",
                    module.name(), devices, grid.replica_count, grid.partition_count, target.name(),
                    target.device_count())};
  }
  if (module.entry() == nullptr) return Error{fmt::format("module {} has no entry", module.name())};
  for (size_t d = 0; d < options.compute_scale.size(); ++d) {
    if (!(options.compute_scale[d] > 0)) {
      return Error{fmt::format("compute scale of device {} must be positive", d)};
    }
    // Parsing fills the devices not named with 1: a scale other than 1 past
    // the module's devices names one it does not have.
    if (static_cast<int64_t>(d) >= devices && options.compute_scale[d] != 1) {
      return Error{fmt::format("a compute scale for device {}, but module {} runs on {} devices", d,
                               module.name(), devices)};
    }
  }
  LOOM_ASSIGN_OR_RETURN(const Network network, Network::Build(target, devices, options.link_scale));

  SimReport report;
  report.module = module.name();
  report.target = target.name();
  report.device_count = devices;
  report.replica_count = grid.replica_count;
  report.partition_count = grid.partition_count;
  if (static_cast<int64_t>(options.compute_scale.size()) > devices) {
    report.notes.push_back(fmt::format("compute scales past device {} ignored", devices - 1));
  }

  const cost::TargetCostModel model(target);
  report.cost_model_step_seconds =
      cost::EstimateStep(module, model, grid, cost::Contention::kNone).total_seconds;

  Symmetry symmetry = ExploitsSymmetry(options) ? Symmetry::Find(module, grid, target, network)
                                                : Symmetry::None(devices);
  auto tape = BuildTape(*module.entry(), model, grid, target, network,
                        symmetry.trivial() ? nullptr : &symmetry, options.max_messages);
  if (!tape.ok() && !symmetry.trivial()) {
    // A plan not as symmetric as its groups (or any other failure, which
    // the device-by-device tape reports itself).
    report.notes.push_back(fmt::format("every device simulated: {}", tape.error().message));
    symmetry = Symmetry::None(devices);
    tape = BuildTape(*module.entry(), model, grid, target, network, nullptr, options.max_messages);
  }
  if (!tape.ok()) return tape.error();
  report.symmetry = symmetry.description();
  report.simulated_devices = symmetry.classes();
  report.unknown_trip_counts = std::move(tape->unknown_trip_counts);
  report.collective_plans = std::move(tape->collective_plans);
  report.notes.insert(report.notes.end(), tape->notes.begin(), tape->notes.end());
  LOOM_RETURN_IF_ERROR(CheckReplayCost(module, tape->CostOfReplay(), symmetry.classes(), options));
  if (tape->truncated) return Error{"simulate: internal error: a truncated tape within budget"};
  LOOM_RETURN_IF_ERROR(ReplayTape(*tape, network, symmetry, options, &report));
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return report;
}

}  // namespace loom::sim
