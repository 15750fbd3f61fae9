#include "cost/step_time.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

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

// The segments of the device whose transfer takes longest.
std::vector<TransferSegment> SlowestRow(const TransferSegmentTable& table) {
  const std::vector<TransferSegment>* slowest = nullptr;
  double longest = -1;
  for (const auto& row : table.distinct) {
    double sum = 0;
    for (const TransferSegment& segment : row) sum += segment.seconds;
    if (sum > longest) {
      longest = sum;
      slowest = &row;
    }
  }
  return slowest ? *slowest : std::vector<TransferSegment>{};
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

const TransferSegmentTable& TransferTimes::SegmentsOf(const Instruction& instruction) {
  auto it = segments_.find(&instruction);
  if (it == segments_.end()) {
    it =
        segments_.emplace(&instruction, model_->TransferSegmentsByDevice(instruction, grid_)).first;
  }
  return it->second;
}

double TransferTimes::SlowestOf(const Instruction& instruction) {
  auto it = slowest_.find(&instruction);
  if (it == slowest_.end()) {
    const std::vector<double>& by_device = Of(instruction);
    const double slowest =
        by_device.empty() ? 0 : *std::max_element(by_device.begin(), by_device.end());
    it = slowest_.emplace(&instruction, slowest).first;
  }
  return it->second;
}

const std::vector<TransferSegment>& TransferTimes::SlowestSegmentsOf(
    const Instruction& instruction) {
  auto it = slowest_segments_.find(&instruction);
  if (it == slowest_segments_.end()) {
    it = slowest_segments_.emplace(&instruction, SlowestRow(SegmentsOf(instruction))).first;
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

double Timeline::TransferBegin(int kind, const std::vector<int64_t>& links) const {
  return std::max(last_begin_[static_cast<size_t>(kind)],
                  flights_.LatestEndOfKind(kind, links, now_));
}

std::array<double, kTransferKindCount> Timeline::Backlog() const { return flights_.Backlog(now_); }

void Timeline::DelayTransfers(double seconds) {
  flights_.Delay(now_, seconds);
  for (double& begin : last_begin_) {
    if (begin > now_) begin += seconds;
  }
}

double Timeline::TransferSecondsOf(const Instruction& instruction) const {
  if (times_ != nullptr && device_ < 0 && grid_.size() > 0) return times_->SlowestOf(instruction);
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

std::vector<TransferSegment> Timeline::TransferSegmentsOf(const Instruction& instruction) const {
  auto cached = segments_.find(&instruction);
  if (cached != segments_.end()) return cached->second;
  std::vector<TransferSegment> segments;
  if (contention_ == Contention::kNone) {
    // One stretch on no port: shares nothing.
  } else if (times_ != nullptr) {
    segments = device_ >= 0 ? times_->SegmentsOf(instruction).Of(device_)
                            : times_->SlowestSegmentsOf(instruction);
  } else {
    // The slowest device's, as TransferSeconds is.
    segments = SlowestRow(model_->TransferSegmentsByDevice(instruction, grid_));
  }
  // Made to add up to the transfer's time exactly: a device outside a
  // phase's lines spends the rest of its group's time on no port.
  const double total = TransferSecondsOf(instruction);
  double sum = 0;
  for (const TransferSegment& segment : segments) sum += segment.seconds;
  if (total <= 0) {
    segments.clear();
  } else if (sum <= 0) {
    segments = {TransferSegment{total, 0, 1}};
  } else if (sum > total) {
    for (TransferSegment& segment : segments) segment.seconds *= total / sum;
  } else if (sum < total) {
    segments.push_back(TransferSegment{total - sum, 0, 1});
  }
  return segments_.emplace(&instruction, std::move(segments)).first->second;
}

std::optional<double> Timeline::TransferFinish(const Instruction& start) const {
  auto it = in_flight_.find(&start);
  if (it == in_flight_.end()) return std::nullopt;
  return flights_.End(it->second);
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
      last_begin_[static_cast<size_t>(kind)] = begin;
      const TransferFlights::Id id =
          flights_.Launch(now_, begin, kind, std::move(links), TransferSegmentsOf(instruction));
      if (TransferRoleOf(instruction) == TransferRole::kStart) {
        // A start launched again before its done (a loop whose done runs
        // elsewhere) lets go of the older transfer's end.
        auto [it, inserted] = in_flight_.try_emplace(&instruction, id);
        if (!inserted) {
          flights_.Release(it->second);
          it->second = id;
        }
      } else {
        const double end = flights_.End(id);
        flights_.Release(id);
        totals_.exposed_transfer_seconds += end - now_;
        now_ = end;
      }
      return;
    }
    case TransferRole::kDone: {
      auto it = in_flight_.find(ir::StartOf(instruction));
      if (it == in_flight_.end()) return;  // its start ran elsewhere: nothing to wait for
      const double end = flights_.End(it->second);
      if (end > now_) {
        totals_.exposed_transfer_seconds += end - now_;
        now_ = end;
      }
      flights_.Release(it->second);
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
                          const ir::DeviceGrid& grid, Contention contention) {
  if (module.entry() == nullptr) return Timeline(model, grid).estimate();
  // The classes of devices whose every transfer takes the same time (and,
  // with contention, the same segments): refined transfer by transfer, each
  // distinct column of times once (a step's hundreds of transfers run over
  // a few sets of groups).
  TransferTimes times(model, grid);
  const auto devices = static_cast<size_t>(std::max<int64_t>(grid.size(), 1));
  std::vector<int64_t> class_of(devices, 0);
  std::vector<std::pair<const std::vector<double>*, const std::vector<int32_t>*>> columns;
  static const std::vector<int32_t> kNoSegments;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      const TransferRole role = TransferRoleOf(*instruction);
      if (role != TransferRole::kSynchronous && role != TransferRole::kStart) continue;
      const std::vector<double>& by_device = times.Of(*instruction);
      const std::vector<int32_t>& segments = contention == Contention::kNone
                                                 ? kNoSegments
                                                 : times.SegmentsOf(*instruction).row_of_device;
      const bool seen = std::any_of(columns.begin(), columns.end(), [&](const auto& column) {
        return *column.first == by_device && *column.second == segments;
      });
      if (seen) continue;
      columns.emplace_back(&by_device, &segments);
      std::map<std::tuple<int64_t, double, int32_t>, int64_t> refined;
      for (size_t d = 0; d < devices; ++d) {
        const double seconds = d < by_device.size() ? by_device[d] : 0;
        const int32_t row = d < segments.size() ? segments[d] : -1;
        class_of[d] =
            refined.try_emplace({class_of[d], seconds, row}, static_cast<int64_t>(refined.size()))
                .first->second;
      }
    }
  }
  // A device of each class, the first (classes are numbered in the order
  // of their first device).
  std::vector<int64_t> representatives;
  for (size_t d = 0; d < devices; ++d) {
    if (class_of[d] == static_cast<int64_t>(representatives.size())) {
      representatives.push_back(static_cast<int64_t>(d));
    }
  }
  std::optional<StepEstimate> slowest;
  const ComputeTimes compute(model);  // one fusion plan per computation for every class
  for (const int64_t device : representatives) {
    Timeline timeline(model, grid, compute, times, device, contention);
    timeline.RunComputation(*module.entry());
    StepEstimate estimate = timeline.estimate();
    if (!slowest || estimate.total_seconds > slowest->total_seconds) slowest = std::move(estimate);
  }
  return *slowest;
}

Expected<StepEstimate> EstimateStep(const ir::Module& module, const CostModel& model,
                                    Contention contention) {
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module));
  return EstimateStep(module, model, grid, contention);
}

double IsolatedSeconds(const Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid) {
  return IsolatedSeconds(instruction, model, grid, ComputeTimes(model));
}

double IsolatedSeconds(const Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid, const ComputeTimes& compute) {
  TransferTimes transfers(model, grid);
  return IsolatedSeconds(instruction, model, grid, compute, transfers);
}

double IsolatedSeconds(const Instruction& instruction, const CostModel& model,
                       const ir::DeviceGrid& grid, const ComputeTimes& compute,
                       TransferTimes& transfers) {
  switch (TransferRoleOf(instruction)) {
    case TransferRole::kSynchronous:
    case TransferRole::kStart:
      return compute.Of(instruction) + transfers.SlowestOf(instruction);
    case TransferRole::kDone:
      return compute.Of(instruction);
    case TransferRole::kNone:
      break;
  }
  Timeline timeline(model, grid, compute, transfers);
  timeline.Run(instruction);
  return timeline.now();
}

}  // namespace loom::cost
