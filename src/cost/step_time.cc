#include "cost/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "analysis/while_loop.h"
#include "ir/async.h"
#include "ir/verifier.h"
#include "support/units.h"

namespace loom::cost {

using ir::Instruction;
using ir::Opcode;

namespace {

constexpr std::string_view kKindNames[kTransferKindCount] = {
    "collective-permute", "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "other"};

std::optional<TransferKind> KindOfCollective(Opcode opcode) {
  switch (opcode) {
    case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
    case Opcode::kCollectivePermuteDone:
      return TransferKind::kCollectivePermute;
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
    case Opcode::kAllGatherDone:
      return TransferKind::kAllGather;
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
    case Opcode::kAllReduceDone:
      return TransferKind::kAllReduce;
    case Opcode::kReduceScatter:
      return TransferKind::kReduceScatter;
    case Opcode::kAllToAll:
    case Opcode::kRaggedAllToAll:
      return TransferKind::kAllToAll;
    case Opcode::kCollectiveBroadcast:
      return TransferKind::kOther;
    default:
      return std::nullopt;
  }
}

// Equal up to rounding: the loop extrapolation compares clocks that went
// through many additions.
bool Close(double a, double b) {
  return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-18;
}

}  // namespace

std::string_view TransferKindName(TransferKind kind) { return kKindNames[static_cast<int>(kind)]; }

std::optional<TransferKind> ParseTransferKind(std::string_view name) {
  for (int i = 0; i < kTransferKindCount; ++i) {
    if (kKindNames[i] == name) return static_cast<TransferKind>(i);
  }
  return std::nullopt;
}

TransferRole TransferRoleOf(const Instruction& instruction) {
  switch (instruction.opcode()) {
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduceStart:
    case Opcode::kCollectivePermuteStart:
      return TransferRole::kStart;
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
    case Opcode::kCollectivePermuteDone:
      return TransferRole::kDone;
    case Opcode::kAsyncStart:
      return ir::WrappedCollective(instruction) ? TransferRole::kStart : TransferRole::kNone;
    case Opcode::kAsyncDone: {
      const Instruction* start = ir::StartOf(instruction);
      return start && TransferRoleOf(*start) == TransferRole::kStart ? TransferRole::kDone
                                                                     : TransferRole::kNone;
    }
    default:
      return ir::IsCollective(instruction.opcode()) ? TransferRole::kSynchronous
                                                    : TransferRole::kNone;
  }
}

std::optional<TransferKind> TransferKindOf(const Instruction& instruction) {
  switch (TransferRoleOf(instruction)) {
    case TransferRole::kNone:
      return std::nullopt;
    case TransferRole::kSynchronous:
      return KindOfCollective(instruction.opcode());
    case TransferRole::kStart:
      if (instruction.opcode() == Opcode::kAsyncStart) {
        return KindOfCollective(ir::WrappedCollective(instruction)->opcode());
      }
      return KindOfCollective(instruction.opcode());
    case TransferRole::kDone: {
      const Instruction* start = ir::StartOf(instruction);
      if (start && TransferRoleOf(*start) == TransferRole::kStart) return TransferKindOf(*start);
      return KindOfCollective(instruction.opcode());
    }
  }
  return std::nullopt;
}

std::string StepEstimate::ToString() const {
  std::string text =
      fmt::format("{} (compute {}, transfer {}, exposed {})", FormatSeconds(total_seconds),
                  FormatSeconds(compute_seconds), FormatSeconds(transfer_seconds),
                  FormatSeconds(exposed_transfer_seconds));
  if (!unknown_trip_counts.empty()) {
    text += fmt::format("; counted once, trip count unknown: %{}", unknown_trip_counts[0]);
    for (size_t i = 1; i < unknown_trip_counts.size(); ++i) {
      text += fmt::format(", %{}", unknown_trip_counts[i]);
    }
  }
  return text;
}

// --- the replay ----------------------------------------------------------------

const std::vector<double>& TransferTimes::Of(const Instruction& instruction) {
  auto it = times_.find(&instruction);
  if (it == times_.end()) {
    it = times_.emplace(&instruction, model_->TransferSecondsByDevice(instruction, grid_)).first;
  }
  return it->second;
}

const std::vector<int64_t>& TransferTimes::LinksOf(const Instruction& instruction) {
  auto it = links_.find(&instruction);
  if (it == links_.end()) {
    it = links_.emplace(&instruction, model_->TransferLinks(instruction, grid_)).first;
  }
  return it->second;
}

std::vector<int64_t> Timeline::TransferLinksOf(const Instruction& instruction) const {
  if (times_ != nullptr) return times_->LinksOf(instruction);
  auto it = links_.find(&instruction);
  if (it == links_.end()) {
    it = links_.emplace(&instruction, model_->TransferLinks(instruction, grid_)).first;
  }
  return it->second;
}

double Timeline::TransferBegin(int kind, const std::vector<int64_t>& links) {
  auto& flights = flights_[static_cast<size_t>(kind)];
  std::erase_if(flights, [&](const Flight& flight) { return flight.end <= now_; });
  double begin = std::max(now_, last_begin_[static_cast<size_t>(kind)]);
  for (const Flight& flight : flights) {
    if (!LinksDisjoint(flight.links, links)) begin = std::max(begin, flight.end);
  }
  return begin;
}

std::array<double, kTransferKindCount> Timeline::Backlog() const {
  std::array<double, kTransferKindCount> backlog{};
  for (size_t k = 0; k < flights_.size(); ++k) {
    for (const Flight& flight : flights_[k]) {
      backlog[k] = std::max(backlog[k], flight.end - now_);
    }
  }
  return backlog;
}

void Timeline::DelayTransfers(double seconds) {
  for (size_t k = 0; k < flights_.size(); ++k) {
    for (Flight& flight : flights_[k]) {
      if (flight.end > now_) flight.end += seconds;
    }
    if (last_begin_[k] > now_) last_begin_[k] += seconds;
  }
  for (auto& [start, end] : in_flight_) {
    if (end > now_) end += seconds;
  }
}

double Timeline::TransferSecondsOf(const Instruction& instruction) const {
  if (times_ == nullptr || device_ < 0) {
    auto it = seconds_.find(&instruction);
    if (it == seconds_.end()) {
      it = seconds_.emplace(&instruction, model_->TransferSeconds(instruction, grid_)).first;
    }
    return it->second;
  }
  const std::vector<double>& times = times_->Of(instruction);
  return device_ < static_cast<int64_t>(times.size()) ? times[static_cast<size_t>(device_)] : 0;
}

std::optional<double> Timeline::TransferFinish(const Instruction& start) const {
  auto it = in_flight_.find(&start);
  if (it == in_flight_.end()) return std::nullopt;
  return it->second;
}

StepEstimate Timeline::estimate() const {
  StepEstimate estimate = totals_;
  estimate.total_seconds = now_;
  return estimate;
}

void Timeline::RunComputation(const ir::Computation& computation) {
  for (const auto& instruction : computation.instructions()) Run(*instruction);
}

void Timeline::Run(const Instruction& instruction) {
  const double compute = compute_.Of(instruction);
  totals_.compute_seconds += compute;
  now_ += compute;
  switch (TransferRoleOf(instruction)) {
    case TransferRole::kSynchronous:
    case TransferRole::kStart: {
      const auto kind = static_cast<int>(*TransferKindOf(instruction));
      const double transfer = TransferSecondsOf(instruction);
      totals_.transfer_seconds += transfer;
      std::vector<int64_t> links = TransferLinksOf(instruction);
      const double begin = TransferBegin(kind, links);
      const double end = begin + transfer;
      last_begin_[static_cast<size_t>(kind)] = begin;
      flights_[static_cast<size_t>(kind)].push_back(Flight{end, std::move(links)});
      if (TransferRoleOf(instruction) == TransferRole::kStart) {
        in_flight_[&instruction] = end;
      } else {
        totals_.exposed_transfer_seconds += end - now_;
        now_ = end;
      }
      return;
    }
    case TransferRole::kDone: {
      auto it = in_flight_.find(ir::StartOf(instruction));
      if (it == in_flight_.end()) return;  // its start ran elsewhere: nothing to wait for
      if (it->second > now_) {
        totals_.exposed_transfer_seconds += it->second - now_;
        now_ = it->second;
      }
      in_flight_.erase(it);
      return;
    }
    case TransferRole::kNone:
      break;
  }
  switch (instruction.opcode()) {
    case Opcode::kWhile:
      return RunWhile(instruction);
    case Opcode::kConditional:
      return RunConditional(instruction);
    case Opcode::kCall:
      if (const ir::Computation* callee = instruction.called("to_apply")) RunComputation(*callee);
      return;
    case Opcode::kAsyncStart:
      // Not a collective: its computation runs on the compute stream.
      if (const ir::Computation* callee = instruction.called("calls")) RunComputation(*callee);
      return;
    default:
      return;
  }
}

void Timeline::NoteUnknownTripCount(const std::string& name) {
  auto& names = totals_.unknown_trip_counts;
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

// Each iteration replays the condition and the body. Once an iteration
// starts from the same state as the one before (the streams' backlog
// relative to the clock; transfers the body starts it also completes),
// every later one repeats it exactly, so the rest
// are added up instead of replayed: a loop of a million trips costs a few
// replays. A loop that never settles is replayed in full up to kMaxReplays
// iterations, and the rest take the last one's time.
void Timeline::RunWhile(const Instruction& instruction) {
  const ir::Computation* condition = instruction.called("condition");
  const ir::Computation* body = instruction.called("body");
  if (condition == nullptr || body == nullptr) return;
  std::optional<int64_t> trips = analysis::KnownTripCount(instruction);
  if (!trips) {
    NoteUnknownTripCount(instruction.name());
    trips = 1;
  }
  struct State {
    double now, compute, transfer, exposed;
    std::array<double, kTransferKindCount> backlog;
  };
  auto state = [&] {
    return State{now_, totals_.compute_seconds, totals_.transfer_seconds,
                 totals_.exposed_transfer_seconds, Backlog()};
  };
  constexpr int64_t kMaxReplays = 64;
  State before = state();
  for (int64_t i = 0; i < *trips; ++i) {
    RunComputation(*condition);
    RunComputation(*body);
    const State after = state();
    const int64_t left = *trips - i - 1;
    bool settled = true;
    for (int k = 0; k < kTransferKindCount && settled; ++k) {
      settled = Close(before.backlog[k], after.backlog[k]);
    }
    if (left > 0 && (settled || i + 1 >= kMaxReplays)) {
      const double n = static_cast<double>(left);
      const double skipped = n * (after.now - before.now);
      DelayTransfers(skipped);
      now_ += skipped;
      totals_.compute_seconds += n * (after.compute - before.compute);
      totals_.transfer_seconds += n * (after.transfer - before.transfer);
      totals_.exposed_transfer_seconds += n * (after.exposed - before.exposed);
      break;
    }
    before = after;
  }
  RunComputation(*condition);
}

// Every branch runs from the same state; the slowest one's state goes on.
void Timeline::RunConditional(const Instruction& instruction) {
  std::optional<Timeline> slowest;
  for (const ir::Computation* branch : instruction.called_computations()) {
    if (branch == nullptr) continue;
    Timeline copy = *this;
    copy.RunComputation(*branch);
    if (!slowest || copy.now_ > slowest->now_) slowest = std::move(copy);
  }
  if (slowest) *this = std::move(*slowest);
}

// --- whole programs --------------------------------------------------------------

StepEstimate EstimateStep(const ir::Module& module, const CostModel& model,
                          const ir::DeviceGrid& grid) {
  if (module.entry() == nullptr) return Timeline(model, grid).estimate();
  // The classes of devices whose every transfer takes the same time.
  TransferTimes times(model, grid);
  const auto devices = static_cast<size_t>(std::max<int64_t>(grid.size(), 1));
  std::vector<std::vector<double>> rows(devices);
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      const TransferRole role = TransferRoleOf(*instruction);
      if (role != TransferRole::kSynchronous && role != TransferRole::kStart) continue;
      const std::vector<double>& by_device = times.Of(*instruction);
      for (size_t d = 0; d < devices; ++d) {
        rows[d].push_back(d < by_device.size() ? by_device[d] : 0);
      }
    }
  }
  std::map<std::vector<double>, int64_t> representatives;
  for (size_t d = 0; d < devices; ++d) {
    representatives.try_emplace(rows[d], static_cast<int64_t>(d));
  }
  std::optional<StepEstimate> slowest;
  for (const auto& [row, device] : representatives) {
    Timeline timeline(model, grid, times, device);
    timeline.RunComputation(*module.entry());
    StepEstimate estimate = timeline.estimate();
    if (!slowest || estimate.total_seconds > slowest->total_seconds) slowest = std::move(estimate);
  }
  return *slowest;
}

Expected<StepEstimate> EstimateStep(const ir::Module& module, const CostModel& model) {
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  return EstimateStep(module, model, grid);
}

double IsolatedSeconds(const Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid) {
  return IsolatedSeconds(instruction, model, grid, ComputeTimes(model));
}

double IsolatedSeconds(const Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid, const ComputeTimes& compute) {
  switch (TransferRoleOf(instruction)) {
    case TransferRole::kSynchronous:
    case TransferRole::kStart:
      return compute.Of(instruction) + model.TransferSeconds(instruction, grid);
    case TransferRole::kDone:
      return compute.Of(instruction);
    case TransferRole::kNone:
      break;
  }
  Timeline timeline(model, grid, compute);
  timeline.Run(instruction);
  return timeline.now();
}

}  // namespace loom::cost
