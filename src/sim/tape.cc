#include "sim/tape.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>

#include "analysis/flops.h"
#include "analysis/while_loop.h"
#include "cost/step_time.h"
#include "ir/async.h"
#include "ir/verifier.h"
#include "support/saturating.h"

namespace loom::sim {
namespace {

using ir::Instruction;
using ir::Opcode;

class TapeBuilder {
 public:
  TapeBuilder(const cost::TargetCostModel& model, const ir::DeviceGrid& grid,
              const cost::Target& target, const Network& network, const Symmetry* symmetry,
              int64_t max_messages, bool counting)
      : model_(model),
        grid_(grid),
        target_(target),
        network_(network),
        compute_(model),
        symmetry_(symmetry),
        max_messages_(max_messages),
        counting_(counting) {}

  Status Compile(const ir::Computation& computation, int depth = 0) {
    if (depth > ir::kMaxCallDepth) {
      return Error{
          fmt::format("%{}: calls nest deeper than {}", computation.name(), ir::kMaxCallDepth),
          computation.loc()};
    }
    for (const auto& owned : computation.instructions()) {
      LOOM_RETURN_IF_ERROR(CompileInstruction(*owned, depth));
      // Calls are inlined: computations that call each other twice at every
      // level would double the tape_.steps per level.
      if (tape_.steps.size() > kMaxTapeSteps) {
        return Error{fmt::format("%{}: the program inlines to more than {} steps (calls and "
                                 "conditionals are inlined), too many to simulate",
                                 owned->name(), kMaxTapeSteps),
                     owned->loc()};
      }
    }
    return OkStatus();
  }

  Tape Finish() && { return std::move(tape_); }
  bool truncated() const { return tape_.truncated; }

 private:
  int32_t OpKind(const std::string& name) {
    auto [it, inserted] =
        op_kind_index_.try_emplace(name, static_cast<int32_t>(tape_.op_kinds.size()));
    if (inserted) tape_.op_kinds.push_back(name);
    return it->second;
  }

  Status CompileInstruction(const Instruction& instruction, int depth) {
    switch (cost::TransferRoleOf(instruction)) {
      case cost::TransferRole::kSynchronous:
      case cost::TransferRole::kStart: {
        LOOM_ASSIGN_OR_RETURN(const int32_t slot, SlotOf(instruction));
        Step step;
        step.kind = cost::TransferRoleOf(instruction) == cost::TransferRole::kStart
                        ? StepKind::kStart
                        : StepKind::kSync;
        step.slot = slot;
        step.op_kind = tape_.slots[static_cast<size_t>(slot)].op_kind;
        step.instruction = &instruction;
        tape_.steps.push_back(step);
        return CountMessages(tape_.slots[static_cast<size_t>(slot)].plan->MessageCount());
      }
      case cost::TransferRole::kDone: {
        const Instruction* start = ir::StartOf(instruction);
        auto it = slot_of_.find(start);
        if (it == slot_of_.end()) {
          tape_.notes.push_back(
              fmt::format("%{}: its start ran elsewhere; nothing to wait for", instruction.name()));
          return OkStatus();
        }
        Step step;
        step.kind = StepKind::kDone;
        step.slot = it->second;
        step.op_kind = tape_.slots[static_cast<size_t>(it->second)].op_kind;
        step.instruction = &instruction;
        tape_.steps.push_back(step);
        return OkStatus();
      }
      case cost::TransferRole::kNone:
        break;
    }
    switch (instruction.opcode()) {
      case Opcode::kWhile:
        return CompileWhile(instruction, depth);
      case Opcode::kCall:
        if (const ir::Computation* callee = instruction.called("to_apply")) {
          return Compile(*callee, depth + 1);
        }
        return OkStatus();
      case Opcode::kConditional:
        return CompileConditional(instruction, depth);
      case Opcode::kAsyncStart:
        // Not a collective (ir::WrappedCollective): its computation runs on
        // the compute stream, as the step estimate runs it.
        if (const ir::Computation* callee = ir::AsyncCallee(instruction)) {
          return Compile(*callee, depth + 1);
        }
        return OkStatus();
      default:
        break;
    }
    const double seconds = compute_.Of(instruction);
    if (seconds <= 0) return OkStatus();
    Step step;
    step.kind = StepKind::kCompute;
    step.seconds = seconds;
    // A dot (or the dot an add sums in its kernel), or a fused kernel's
    // dots (flash attention's).
    const Instruction& product = compute_.KernelProduct(instruction);
    step.op_kind = OpKind(std::string(ir::OpcodeName(product.opcode())));
    step.instruction = &instruction;
    if (const analysis::KernelDots dots = analysis::KernelDotsOf(product); dots.type) {
      step.flops = static_cast<double>(dots.flops);
      step.ideal = step.flops / target_.compute().PeakFlops(*dots.type);
    }
    tape_.steps.push_back(step);
    return OkStatus();
  }

  // Counts a transfer's messages once per trip of the loops around it;
  // past the budget, marks the tape truncated and stops the compilation.
  Status CountMessages(int64_t messages) {
    messages_ = SaturatingAdd(messages_, SaturatingMul(messages, repeats_.back()));
    if (max_messages_ > 0 && messages_ > max_messages_) {
      tape_.truncated = true;
      return Error{"the replay's message budget is spent"};
    }
    return OkStatus();
  }

  Expected<int32_t> SlotOf(const Instruction& instruction) {
    if (auto it = slot_of_.find(&instruction); it != slot_of_.end()) return it->second;
    const Instruction* op = cost::TransferOp(instruction);
    if (op == nullptr) return Error{fmt::format("%{}: calls no collective", instruction.name())};
    // What is left of the replay's budget for one run of this plan.
    const int64_t left = max_messages_ > 0 ? std::max<int64_t>(0, max_messages_ - messages_) /
                                                     std::max<int64_t>(1, repeats_.back()) +
                                                 1
                                           : 0;
    auto plan = SharedPlan(*op, left);
    if (!plan.ok()) {
      return Error{fmt::format("%{}: {}", instruction.name(), plan.error().message),
                   instruction.loc()};
    }
    Slot slot;
    slot.instruction = &instruction;
    slot.plan = std::move(plan).value();
    slot.bytes = cost::OperandBytes(*op);
    const auto kind = cost::TransferKindOf(instruction);
    slot.op_kind = OpKind(kind ? std::string(cost::TransferKindName(*kind))
                               : std::string(ir::OpcodeName(op->opcode())));
    slot.stream = static_cast<int32_t>(kind.value_or(cost::TransferKind::kOther));
    slot.links = model_.TransferLinks(instruction, grid_);
    tape_.collective_plans.push_back(
        fmt::format("%{}: {}", instruction.name(), slot.plan->description));
    const auto id = static_cast<int32_t>(tape_.slots.size());
    tape_.slots.push_back(std::move(slot));
    slot_of_[&instruction] = id;
    return id;
  }

  // The plan of `op` for one byte, made once for every collective of its
  // kind over the same devices; when counting_, only counted (past `left`
  // the count stops, and is not kept: a later use may have more budget).
  // A tape that makes plans comes after a counting one that kept within
  // the budget (BuildTape), so it makes each plan whole.
  Expected<std::shared_ptr<const Plan>> SharedPlan(const Instruction& op, int64_t left) {
    LOOM_ASSIGN_OR_RETURN(CollectiveParticipants key, ParticipantsOf(op, grid_));
    if (auto it = plans_.find(key); it != plans_.end()) return it->second;
    Plan plan;
    if (counting_) {
      plan.truncated = true;
      plan.counted = CountPlanMessages(key, grid_, target_, network_, symmetry_, left);
    } else {
      LOOM_ASSIGN_OR_RETURN(plan, BuildPlan(op, key, grid_, target_, network_, symmetry_, true));
    }
    auto shared = std::make_shared<const Plan>(std::move(plan));
    if (!shared->truncated || shared->counted <= left) plans_.emplace(std::move(key), shared);
    return shared;
  }

  Status CompileWhile(const Instruction& instruction, int depth) {
    const ir::Computation* condition = instruction.called("condition");
    const ir::Computation* body = instruction.called("body");
    if (condition == nullptr || body == nullptr) return OkStatus();
    std::optional<int64_t> trips = analysis::KnownTripCount(instruction);
    if (!trips) {
      if (std::find(tape_.unknown_trip_counts.begin(), tape_.unknown_trip_counts.end(),
                    instruction.name()) == tape_.unknown_trip_counts.end()) {
        tape_.unknown_trip_counts.push_back(instruction.name());
      }
      trips = 1;
    }
    const size_t begin = tape_.steps.size();
    Step loop;
    loop.kind = StepKind::kLoopBegin;
    loop.trips = *trips;
    loop.instruction = &instruction;
    tape_.steps.push_back(loop);
    repeats_.push_back(SaturatingMul(repeats_.back(), std::max<int64_t>(*trips, 0)));
    LOOM_RETURN_IF_ERROR(Compile(*condition, depth + 1));
    LOOM_RETURN_IF_ERROR(Compile(*body, depth + 1));
    repeats_.pop_back();
    Step end;
    end.kind = StepKind::kLoopEnd;
    end.jump = static_cast<int32_t>(begin + 1);
    end.instruction = &instruction;
    tape_.steps.push_back(end);
    tape_.steps[begin].jump = static_cast<int32_t>(tape_.steps.size());
    LOOM_RETURN_IF_ERROR(Compile(*condition, depth + 1));
    Collapse(begin, *trips, instruction);
    return OkStatus();
  }

  // Replaces the loop compiled at tape_.steps[begin..] by one kBlock step when it
  // makes no transfer (inner loops are collapsed already): every device
  // then runs it as one stretch of compute.
  void Collapse(size_t begin, int64_t trips, const Instruction& instruction) {
    const auto end =
        static_cast<size_t>(tape_.steps[begin].jump);  // the last condition starts here
    for (size_t i = begin + 1; i < tape_.steps.size(); ++i) {
      if (i == end - 1) continue;  // the kLoopEnd
      if (tape_.steps[i].kind != StepKind::kCompute && tape_.steps[i].kind != StepKind::kBlock)
        return;
    }
    ComputeBlock block;
    std::map<int32_t, std::pair<int64_t, double>> kinds;
    const auto add = [&](size_t from, size_t to, double times) {
      for (size_t i = from; i < to; ++i) {
        const Step& step = tape_.steps[i];
        if (step.kind == StepKind::kCompute) {
          block.seconds += times * step.seconds;
          block.flops += times * step.flops;
          block.ideal += times * step.ideal;
          auto& [count, seconds] = kinds[step.op_kind];
          count += static_cast<int64_t>(times);
          seconds += times * step.seconds;
        } else {
          const ComputeBlock& inner = tape_.blocks[static_cast<size_t>(step.block)];
          block.seconds += times * inner.seconds;
          block.flops += times * inner.flops;
          block.ideal += times * inner.ideal;
          for (const auto& [kind, count, seconds] : inner.kinds) {
            auto& [total_count, total_seconds] = kinds[kind];
            total_count += static_cast<int64_t>(times) * count;
            total_seconds += times * seconds;
          }
        }
      }
    };
    const auto trip_count = static_cast<double>(std::max<int64_t>(0, trips));
    add(begin + 1, end - 1, trip_count);  // condition and body, every trip
    add(end, tape_.steps.size(), 1);      // the last condition
    for (const auto& [kind, totals] : kinds) {
      block.kinds.emplace_back(kind, totals.first, totals.second);
    }
    tape_.steps.resize(begin);
    if (block.seconds <= 0) return;
    Step step;
    step.kind = StepKind::kBlock;
    step.block = static_cast<int32_t>(tape_.blocks.size());
    step.seconds = block.seconds;
    step.instruction = &instruction;
    tape_.blocks.push_back(std::move(block));
    tape_.steps.push_back(step);
  }

  Status CompileConditional(const Instruction& instruction, int depth) {
    const ir::Computation* slowest = nullptr;
    double slowest_seconds = -1;
    for (const ir::Computation* branch : instruction.called_computations()) {
      if (branch == nullptr) continue;
      cost::Timeline timeline(model_, grid_, compute_);
      timeline.RunComputation(*branch);
      if (timeline.now() > slowest_seconds) {
        slowest_seconds = timeline.now();
        slowest = branch;
      }
    }
    if (slowest == nullptr) return OkStatus();
    tape_.notes.push_back(
        fmt::format("conditional %{}: every device runs branch %{} (the slowest by the cost model)",
                    instruction.name(), slowest->name()));
    return Compile(*slowest, depth + 1);
  }

  const cost::TargetCostModel& model_;
  ir::DeviceGrid grid_;
  const cost::Target& target_;
  const Network& network_;
  cost::ComputeTimes compute_;  // the module does not change while it compiles
  const Symmetry* symmetry_;
  const int64_t max_messages_;
  const bool counting_;  // plans are only counted
  std::map<CollectiveParticipants, std::shared_ptr<const Plan>> plans_;
  int64_t messages_ = 0;                // a replay's, so far
  std::vector<int64_t> repeats_ = {1};  // the trips of the loops being compiled, multiplied
  Tape tape_;
  std::unordered_map<const Instruction*, int32_t> slot_of_;
  std::unordered_map<std::string, int32_t> op_kind_index_;
};

}  // namespace

ReplayCost Tape::CostOfReplay() const {
  ReplayCost cost;
  cost.truncated = truncated;
  std::vector<int64_t> repeats = {1};  // the enclosing loops' trips, multiplied
  for (const Step& step : steps) {
    // A loop's begin is walked once per entry and its end once per trip.
    cost.steps_per_device = SaturatingAdd(cost.steps_per_device, repeats.back());
    switch (step.kind) {
      case StepKind::kLoopBegin:
        repeats.push_back(SaturatingMul(repeats.back(), std::max<int64_t>(step.trips, 0)));
        if (repeats.back() > cost.loop_trips) {
          cost.loop = step.instruction;
          cost.loop_trips = repeats.back();
        }
        break;
      case StepKind::kLoopEnd:
        repeats.pop_back();
        break;
      case StepKind::kSync:
      case StepKind::kStart: {
        const int64_t messages = slots[static_cast<size_t>(step.slot)].plan->MessageCount();
        cost.messages = SaturatingAdd(cost.messages, SaturatingMul(messages, repeats.back()));
        break;
      }
      default:
        break;
    }
  }
  return cost;
}

Expected<Tape> BuildTape(const ir::Computation& entry, const cost::TargetCostModel& model,
                         const ir::DeviceGrid& grid, const cost::Target& target,
                         const Network& network, const Symmetry* symmetry, int64_t max_messages) {
  // With a budget, the program is first compiled with its plans only
  // counted: a refused replay makes no plan (a collective over thousands
  // of devices can take gigabytes), and one that fits makes each once.
  if (max_messages > 0) {
    TapeBuilder counter(model, grid, target, network, symmetry, max_messages, true);
    Status counted = counter.Compile(entry);
    if (!counted.ok() && !counter.truncated()) return counted.error();
    if (counter.truncated()) return std::move(counter).Finish();
  }
  TapeBuilder builder(model, grid, target, network, symmetry, max_messages, false);
  Status compiled = builder.Compile(entry);
  if (!compiled.ok() && !builder.truncated()) return compiled.error();
  return std::move(builder).Finish();
}

}  // namespace loom::sim
