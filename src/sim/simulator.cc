#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <tuple>
#include <unordered_map>

#include "analysis/flops.h"
#include "analysis/while_loop.h"
#include "cost/step_time.h"
#include "cost/target_cost_model.h"
#include "ir/async.h"
#include "ir/computation.h"
#include "ir/verifier.h"
#include "sim/plan.h"
#include "support/saturating.h"

namespace loom::sim {

namespace {

using ir::Instruction;
using ir::Opcode;

// --- the program every device runs, flattened ---------------------------------------

// The longest tape Compiler builds (about 2 GiB). The verifier bounds the
// instructions with calls inlined; a while loop adds two steps and compiles
// its condition twice.
constexpr size_t kMaxTapeSteps = 2 * static_cast<size_t>(ir::kMaxInlinedInstructions);

// kBlock: a while loop that makes no transfer, collapsed into one step of
// compute (Block) so that a loop of a million trips costs one step.
enum class StepKind : uint8_t { kCompute, kBlock, kSync, kStart, kDone, kLoopBegin, kLoopEnd };

struct Step {
  StepKind kind = StepKind::kCompute;
  int32_t slot = -1;   // kSync, kStart, kDone: the collective
  int32_t jump = -1;   // kLoopBegin: past the loop's end; kLoopEnd: the body's first step
  int32_t block = -1;  // kBlock: index into Compiler::blocks
  int32_t op_kind = -1;
  int64_t trips = 0;
  double seconds = 0;  // kCompute, at compute scale 1
  double flops = 0;    // dots
  double ideal = 0;    // dots: FLOPs over the peak for their element type
  const Instruction* instruction = nullptr;
};

// The compute of a collapsed loop, all its iterations: totals at compute
// scale 1, and per op kind (op kind, ops run, seconds).
struct ComputeBlock {
  double seconds = 0;
  double flops = 0;
  double ideal = 0;
  std::vector<std::tuple<int32_t, int64_t, double>> kinds;
};

// One collective instruction (a synchronous one, or a start) and its plan.
struct Slot {
  const Instruction* instruction = nullptr;
  Plan plan;
  int32_t op_kind = -1;
  int32_t stream = 0;          // the device's transfer stream: one per cost::TransferKind
  std::vector<int64_t> links;  // CostModel::TransferLinks
};

// Flattens the entry computation into one tape of steps: calls and the
// chosen branch of each conditional inlined, while loops as a begin/end
// pair around condition and body followed by the last condition.
class Compiler {
 public:
  Compiler(const cost::TargetCostModel& model, const ir::DeviceGrid& grid,
           const cost::Target& target, const Network& network, SimReport* report)
      : model_(model), grid_(grid), target_(target), network_(network), report_(report) {}

  Status Compile(const ir::Computation& computation, int depth = 0) {
    if (depth > ir::kMaxCallDepth) {
      return Error{
          fmt::format("%{}: calls nest deeper than {}", computation.name(), ir::kMaxCallDepth),
          computation.loc()};
    }
    for (const auto& owned : computation.instructions()) {
      LOOM_RETURN_IF_ERROR(CompileInstruction(*owned, depth));
      // Calls are inlined: computations that call each other twice at every
      // level would double the tape per level.
      if (tape.size() > kMaxTapeSteps) {
        return Error{fmt::format("%{}: the program inlines to more than {} steps (calls and "
                                 "conditionals are inlined), too many to simulate",
                                 owned->name(), kMaxTapeSteps),
                     owned->loc()};
      }
    }
    return OkStatus();
  }

  // The messages one replay of the tape moves, over all devices, with loops
  // replayed trip by trip (saturating), and the loop that multiplies them
  // most: what the event engine will have to process.
  struct ReplayCost {
    int64_t messages = 0;
    const Instruction* loop = nullptr;  // the loop whose trips multiply the most
    int64_t loop_trips = 1;             // its trips times those of the loops around it
  };
  ReplayCost CostOfReplay() const {
    ReplayCost cost;
    std::vector<int64_t> repeats = {1};  // the enclosing loops' trips, multiplied
    for (const Step& step : tape) {
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
          const auto messages =
              static_cast<int64_t>(slots[static_cast<size_t>(step.slot)].plan.messages.size());
          cost.messages = SaturatingAdd(cost.messages, SaturatingMul(messages, repeats.back()));
          break;
        }
        default:
          break;
      }
    }
    return cost;
  }

  int32_t OpKind(const std::string& name) {
    auto [it, inserted] = op_kind_index_.try_emplace(name, static_cast<int32_t>(op_kinds_.size()));
    if (inserted) op_kinds_.push_back(name);
    return it->second;
  }

  std::vector<Step> tape;
  std::vector<Slot> slots;
  std::vector<ComputeBlock> blocks;
  const std::vector<std::string>& op_kinds() const { return op_kinds_; }

 private:
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
        step.op_kind = slots[static_cast<size_t>(slot)].op_kind;
        step.instruction = &instruction;
        tape.push_back(step);
        return OkStatus();
      }
      case cost::TransferRole::kDone: {
        const Instruction* start = ir::StartOf(instruction);
        auto it = slot_of_.find(start);
        if (it == slot_of_.end()) {
          report_->notes.push_back(
              fmt::format("%{}: its start ran elsewhere; nothing to wait for", instruction.name()));
          return OkStatus();
        }
        Step step;
        step.kind = StepKind::kDone;
        step.slot = it->second;
        step.op_kind = slots[static_cast<size_t>(it->second)].op_kind;
        step.instruction = &instruction;
        tape.push_back(step);
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
    const double seconds = model_.ComputeSeconds(instruction);
    if (seconds <= 0) return OkStatus();
    Step step;
    step.kind = StepKind::kCompute;
    step.seconds = seconds;
    step.op_kind = OpKind(std::string(ir::OpcodeName(instruction.opcode())));
    step.instruction = &instruction;
    if (instruction.opcode() == Opcode::kDot && instruction.attrs().dot) {
      step.flops = static_cast<double>(analysis::DotFlops(instruction));
      step.ideal = step.flops / target_.compute().PeakFlops(instruction.operand(0)->shape().type());
    }
    tape.push_back(step);
    return OkStatus();
  }

  Expected<int32_t> SlotOf(const Instruction& instruction) {
    if (auto it = slot_of_.find(&instruction); it != slot_of_.end()) return it->second;
    const Instruction* op = cost::TransferOp(instruction);
    if (op == nullptr) return Error{fmt::format("%{}: calls no collective", instruction.name())};
    auto plan = BuildPlan(*op, grid_, target_, network_);
    if (!plan.ok()) {
      return Error{fmt::format("%{}: {}", instruction.name(), plan.error().message),
                   instruction.loc()};
    }
    Slot slot;
    slot.instruction = &instruction;
    slot.plan = std::move(plan).value();
    const auto kind = cost::TransferKindOf(instruction);
    slot.op_kind = OpKind(kind ? std::string(cost::TransferKindName(*kind))
                               : std::string(ir::OpcodeName(op->opcode())));
    slot.stream = static_cast<int32_t>(kind.value_or(cost::TransferKind::kOther));
    slot.links = model_.TransferLinks(instruction, grid_);
    report_->collective_plans.push_back(
        fmt::format("%{}: {}", instruction.name(), slot.plan.description));
    const auto id = static_cast<int32_t>(slots.size());
    slots.push_back(std::move(slot));
    slot_of_[&instruction] = id;
    return id;
  }

  Status CompileWhile(const Instruction& instruction, int depth) {
    const ir::Computation* condition = instruction.called("condition");
    const ir::Computation* body = instruction.called("body");
    if (condition == nullptr || body == nullptr) return OkStatus();
    std::optional<int64_t> trips = analysis::KnownTripCount(instruction);
    if (!trips) {
      if (std::find(report_->unknown_trip_counts.begin(), report_->unknown_trip_counts.end(),
                    instruction.name()) == report_->unknown_trip_counts.end()) {
        report_->unknown_trip_counts.push_back(instruction.name());
      }
      trips = 1;
    }
    const size_t begin = tape.size();
    Step loop;
    loop.kind = StepKind::kLoopBegin;
    loop.trips = *trips;
    loop.instruction = &instruction;
    tape.push_back(loop);
    LOOM_RETURN_IF_ERROR(Compile(*condition, depth + 1));
    LOOM_RETURN_IF_ERROR(Compile(*body, depth + 1));
    Step end;
    end.kind = StepKind::kLoopEnd;
    end.jump = static_cast<int32_t>(begin + 1);
    end.instruction = &instruction;
    tape.push_back(end);
    tape[begin].jump = static_cast<int32_t>(tape.size());
    LOOM_RETURN_IF_ERROR(Compile(*condition, depth + 1));
    Collapse(begin, *trips, instruction);
    return OkStatus();
  }

  // Replaces the loop compiled at tape[begin..] by one kBlock step when it
  // makes no transfer (inner loops are collapsed already): every device
  // then runs it as one stretch of compute.
  void Collapse(size_t begin, int64_t trips, const Instruction& instruction) {
    const auto end = static_cast<size_t>(tape[begin].jump);  // the last condition starts here
    for (size_t i = begin + 1; i < tape.size(); ++i) {
      if (i == end - 1) continue;  // the kLoopEnd
      if (tape[i].kind != StepKind::kCompute && tape[i].kind != StepKind::kBlock) return;
    }
    ComputeBlock block;
    std::map<int32_t, std::pair<int64_t, double>> kinds;
    const auto add = [&](size_t from, size_t to, double times) {
      for (size_t i = from; i < to; ++i) {
        const Step& step = tape[i];
        if (step.kind == StepKind::kCompute) {
          block.seconds += times * step.seconds;
          block.flops += times * step.flops;
          block.ideal += times * step.ideal;
          auto& [count, seconds] = kinds[step.op_kind];
          count += static_cast<int64_t>(times);
          seconds += times * step.seconds;
        } else {
          const ComputeBlock& inner = blocks[static_cast<size_t>(step.block)];
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
    add(end, tape.size(), 1);             // the last condition
    for (const auto& [kind, totals] : kinds) {
      block.kinds.emplace_back(kind, totals.first, totals.second);
    }
    tape.resize(begin);
    if (block.seconds <= 0) return;
    Step step;
    step.kind = StepKind::kBlock;
    step.block = static_cast<int32_t>(blocks.size());
    step.seconds = block.seconds;
    step.instruction = &instruction;
    blocks.push_back(std::move(block));
    tape.push_back(step);
  }

  Status CompileConditional(const Instruction& instruction, int depth) {
    const ir::Computation* slowest = nullptr;
    double slowest_seconds = -1;
    for (const ir::Computation* branch : instruction.called_computations()) {
      if (branch == nullptr) continue;
      cost::Timeline timeline(model_, grid_);
      timeline.RunComputation(*branch);
      if (timeline.now() > slowest_seconds) {
        slowest_seconds = timeline.now();
        slowest = branch;
      }
    }
    if (slowest == nullptr) return OkStatus();
    report_->notes.push_back(
        fmt::format("conditional %{}: every device runs branch %{} (the slowest by the cost model)",
                    instruction.name(), slowest->name()));
    return Compile(*slowest, depth + 1);
  }

  const cost::TargetCostModel& model_;
  ir::DeviceGrid grid_;
  const cost::Target& target_;
  const Network& network_;
  SimReport* report_;
  std::unordered_map<const Instruction*, int32_t> slot_of_;
  std::vector<std::string> op_kinds_;
  std::unordered_map<std::string, int32_t> op_kind_index_;
};

// --- the replay -----------------------------------------------------------------

enum class EventKind : uint8_t { kResume, kActivate, kFinish };

struct Event {
  double time;
  uint64_t sequence;
  EventKind kind;
  int32_t a;  // kResume: device; kActivate: instance; kFinish: flow
  int32_t b;  // kActivate: message
  uint32_t version;
};

struct EventLater {
  bool operator()(const Event& x, const Event& y) const {
    return x.time > y.time || (x.time == y.time && x.sequence > y.sequence);
  }
};

// One run of a collective instruction on every device.
struct Instance {
  int32_t slot = -1;
  uint64_t key = 0;
  std::vector<int32_t> pending;  // per message: what it still waits for
  std::vector<int32_t> left;     // per device: messages of its part not yet done
  int64_t devices_done = 0;
};

// A device's collective in flight, from its join to its done.
struct Open {
  int32_t slot;
  int32_t instance;
  double join;
  double done_at;
  int32_t track;  // trace tid - 1
  bool done;
};

struct DeviceState {
  int32_t pc = 0;
  std::vector<int64_t> loops;  // trips left, innermost last
  double clock = 0;
  double scale = 1;
  bool finished = false;
  bool blocked = false;
  int32_t blocked_instance = -1;
  double blocked_since = 0;
  const Instruction* blocked_on = nullptr;
  std::vector<Open> open;
  std::vector<int32_t> occurrence;  // per slot: times joined
  // Per transfer stream: the instances of this device's transfers on it,
  // and those queued behind them in program order.
  std::array<std::vector<int32_t>, cost::kTransferKindCount> stream_active;
  std::array<std::deque<int32_t>, cost::kTransferKindCount> stream_queue;
  std::vector<bool> track_busy;
  double compute = 0;
  double exposed = 0;
  double communication = 0;
  double finish = 0;
};

enum class TraceCategory : uint8_t { kCompute, kWait, kTransfer };

struct TraceRecord {
  double start;
  double end;
  int32_t device;
  int32_t tid;
  TraceCategory category;
  const Instruction* instruction;
};

class Engine {
 public:
  Engine(const Compiler& compiled, const Network& network, int64_t devices,
         const SimOptions& options, SimReport* report)
      : tape_(compiled.tape),
        slots_(compiled.slots),
        blocks_(compiled.blocks),
        op_kinds_(compiled.op_kinds()),
        network_(network.capacities()),
        devices_(static_cast<size_t>(devices)),
        options_(options),
        report_(report),
        kind_count_(op_kinds_.size(), 0),
        kind_compute_(op_kinds_.size(), 0),
        kind_exposed_(op_kinds_.size(), 0),
        kind_communication_(op_kinds_.size(), 0) {
    for (size_t d = 0; d < devices_.size(); ++d) {
      DeviceState& device = devices_[d];
      device.occurrence.assign(slots_.size(), 0);
      if (d < options.compute_scale.size()) device.scale = options.compute_scale[d];
    }
    trace_ = options.trace;
  }

  Status Run() {
    for (size_t d = 0; d < devices_.size(); ++d) Advance(static_cast<int32_t>(d), 0);
    std::vector<std::pair<int32_t, double>> changed;
    while (!queue_.empty()) {
      const double now = queue_.top().time;
      while (!queue_.empty() && queue_.top().time <= now) {
        const Event event = queue_.top();
        queue_.pop();
        Handle(event, now);
      }
      network_.Reallocate(now, &changed);
      for (const auto& [flow, finish] : changed) {
        if (std::isfinite(finish)) {
          Push(finish, EventKind::kFinish, flow, 0, network_.version(flow));
        }
      }
    }
    for (size_t d = 0; d < devices_.size(); ++d) {
      const DeviceState& device = devices_[d];
      if (device.finished) continue;
      const Instruction* at = device.blocked_on;
      return Error{
          fmt::format("deadlock: device {} waits at %{} for a collective some peer never reaches",
                      d, at ? at->name() : std::string("?"))};
    }
    return OkStatus();
  }

  void Fill() {
    SimReport& report = *report_;
    double step = last_time_;
    for (const DeviceState& device : devices_) step = std::max(step, device.finish);
    report.step_seconds = step;
    for (size_t d = 0; d < devices_.size(); ++d) {
      const DeviceState& device = devices_[d];
      DeviceReport out;
      out.device = static_cast<int64_t>(d);
      out.compute = device.compute;
      out.exposed_communication = device.exposed;
      out.finish = device.finish;
      out.idle = step - device.finish;
      out.communication = device.communication;
      out.compute_scale = device.scale;
      report.devices.push_back(out);
    }
    report.dot_flops = flops_;
    const auto n = static_cast<double>(devices_.size());
    report.mfu = step > 0 ? ideal_ / (step * n) : 0;
    for (size_t k = 0; k < op_kinds_.size(); ++k) {
      OpKindReport kind;
      kind.count = kind_count_[k];
      kind.compute_seconds = kind_compute_[k];
      kind.exposed_seconds = kind_exposed_[k];
      kind.communication_seconds = kind_communication_[k];
      report.op_kinds[op_kinds_[k]] = kind;
      report.seconds_by_op_kind[op_kinds_[k]] = (kind.compute_seconds + kind.exposed_seconds) / n;
    }
    report.events = events_;
    report.flows = flows_started_;
    report.collectives = instances_created_;
    report.max_concurrent_flows = max_concurrent_;
    report.reallocations = network_.reallocations();
    report.mean_component_links = network_.reallocations() > 0
                                      ? static_cast<double>(network_.links_recomputed()) /
                                            static_cast<double>(network_.reallocations())
                                      : 0;
    if (options_.trace) {
      report.trace_json = TraceJson();
      report.trace_truncated = trace_truncated_;
    }
  }

 private:
  void Push(double time, EventKind kind, int32_t a, int32_t b, uint32_t version = 0) {
    queue_.push(Event{time, sequence_++, kind, a, b, version});
  }

  void Handle(const Event& event, double now) {
    if (event.kind != EventKind::kFinish || event.version == network_.version(event.a)) {
      last_time_ = now;  // a superseded finish is no event at all
    }
    switch (event.kind) {
      case EventKind::kResume:
        ++events_;
        Advance(event.a, now);
        return;
      case EventKind::kActivate:
        ++events_;
        Activate(event.a, event.b, now);
        return;
      case EventKind::kFinish: {
        if (event.version != network_.version(event.a)) return;  // superseded
        ++events_;
        const int64_t tag = network_.tag(event.a);
        network_.Remove(event.a, now);
        CompleteMessage(static_cast<int32_t>(tag >> 32), static_cast<int32_t>(tag & 0xffffffff),
                        now);
        return;
      }
    }
  }

  // Runs device `d` from `now` through compute until its next transfer,
  // which it handles at its own time (an event, if later than now).
  void Advance(int32_t d, double now) {
    DeviceState& device = devices_[static_cast<size_t>(d)];
    double t = std::max(device.clock, now);
    while (true) {
      if (device.pc >= static_cast<int32_t>(tape_.size())) {
        device.finished = true;
        device.finish = t;
        device.clock = t;
        return;
      }
      const Step& step = tape_[static_cast<size_t>(device.pc)];
      switch (step.kind) {
        case StepKind::kCompute: {
          const double seconds = step.seconds * device.scale;
          Record(t, t + seconds, d, 0, TraceCategory::kCompute, step.instruction);
          t += seconds;
          device.compute += seconds;
          kind_count_[static_cast<size_t>(step.op_kind)]++;
          kind_compute_[static_cast<size_t>(step.op_kind)] += seconds;
          flops_ += step.flops;
          ideal_ += step.ideal;
          device.pc++;
          continue;
        }
        case StepKind::kBlock: {
          const ComputeBlock& block = blocks_[static_cast<size_t>(step.block)];
          const double seconds = block.seconds * device.scale;
          Record(t, t + seconds, d, 0, TraceCategory::kCompute, step.instruction);
          t += seconds;
          device.compute += seconds;
          for (const auto& [kind, count, kind_seconds] : block.kinds) {
            kind_count_[static_cast<size_t>(kind)] += count;
            kind_compute_[static_cast<size_t>(kind)] += kind_seconds * device.scale;
          }
          flops_ += block.flops;
          ideal_ += block.ideal;
          device.pc++;
          continue;
        }
        case StepKind::kLoopBegin:
          if (step.trips <= 0) {
            device.pc = step.jump;
          } else {
            device.loops.push_back(step.trips);
            device.pc++;
          }
          continue;
        case StepKind::kLoopEnd:
          if (--device.loops.back() > 0) {
            device.pc = step.jump;
          } else {
            device.loops.pop_back();
            device.pc++;
          }
          continue;
        default:
          break;
      }
      // A transfer: handled at its own time.
      if (t > now) {
        device.clock = t;
        Push(t, EventKind::kResume, d, 0);
        return;
      }
      device.clock = now;
      if (step.kind == StepKind::kSync || step.kind == StepKind::kStart) {
        kind_count_[static_cast<size_t>(step.op_kind)]++;
        const int32_t instance = Join(d, step.slot, now);
        if (step.kind == StepKind::kStart) {
          device.pc++;
          continue;
        }
        if (TakeIfDone(device, step.slot)) {
          device.pc++;
          continue;
        }
        Block(device, instance, now, step.instruction);
        return;
      }
      // A done.
      auto it = FindOpen(device, step.slot);
      if (it == device.open.end()) {
        device.pc++;
        continue;
      }
      if (it->done) {
        device.open.erase(it);
        device.pc++;
        continue;
      }
      Block(device, it->instance, now, step.instruction);
      return;
    }
  }

  static std::vector<Open>::iterator FindOpen(DeviceState& device, int32_t slot) {
    for (auto it = device.open.end(); it != device.open.begin();) {
      --it;
      if (it->slot == slot) return it;
    }
    return device.open.end();
  }

  bool TakeIfDone(DeviceState& device, int32_t slot) {
    auto it = FindOpen(device, slot);
    if (it == device.open.end() || !it->done) return false;
    device.open.erase(it);
    return true;
  }

  void Block(DeviceState& device, int32_t instance, double now, const Instruction* at) {
    device.blocked = true;
    device.blocked_instance = instance;
    device.blocked_since = now;
    device.blocked_on = at;
  }

  int32_t NewInstance(int32_t slot, uint64_t key) {
    int32_t id;
    if (!free_instances_.empty()) {
      id = free_instances_.back();
      free_instances_.pop_back();
    } else {
      id = static_cast<int32_t>(instances_.size());
      instances_.emplace_back();
    }
    Instance& instance = instances_[static_cast<size_t>(id)];
    const Plan& plan = slots_[static_cast<size_t>(slot)].plan;
    instance.slot = slot;
    instance.key = key;
    instance.devices_done = 0;
    instance.pending.resize(plan.messages.size());
    for (size_t m = 0; m < plan.messages.size(); ++m) {
      instance.pending[m] = plan.messages[m].dependencies + 2;  // + both devices joining
    }
    instance.left.resize(devices_.size());
    for (size_t d = 0; d < devices_.size(); ++d) {
      instance.left[d] = plan.MessageCountOf(static_cast<int64_t>(d));
    }
    ++instances_created_;
    return id;
  }

  int32_t Join(int32_t d, int32_t slot, double now) {
    DeviceState& device = devices_[static_cast<size_t>(d)];
    const uint64_t key = (static_cast<uint64_t>(slot) << 32) |
                         static_cast<uint32_t>(device.occurrence[static_cast<size_t>(slot)]++);
    int32_t id;
    if (auto it = instance_of_.find(key); it != instance_of_.end()) {
      id = it->second;
    } else {
      id = NewInstance(slot, key);
      instance_of_[key] = id;
    }
    // A trace track free for the whole of this transfer.
    int32_t track = 0;
    while (static_cast<size_t>(track) < device.track_busy.size() &&
           device.track_busy[static_cast<size_t>(track)]) {
      ++track;
    }
    if (static_cast<size_t>(track) == device.track_busy.size()) device.track_busy.push_back(false);
    device.track_busy[static_cast<size_t>(track)] = true;
    device.open.push_back(Open{slot, id, now, 0, track, false});
    // Transfers of one kind take the device's stream for that kind in
    // program order, one at a time unless their links are disjoint: the
    // step estimate's rule (cost/step_time.h).
    const auto stream = static_cast<size_t>(slots_[static_cast<size_t>(slot)].stream);
    device.stream_queue[stream].push_back(id);
    EnterQueued(d, stream, now);
    return id;
  }

  // Puts the device's queued transfers of `stream` on it while the first
  // may run beside those already on it.
  void EnterQueued(int32_t d, size_t stream, double now) {
    DeviceState& device = devices_[static_cast<size_t>(d)];
    auto& queue = device.stream_queue[stream];
    while (!queue.empty()) {
      const int32_t next = queue.front();
      const auto& links =
          slots_[static_cast<size_t>(instances_[static_cast<size_t>(next)].slot)].links;
      for (int32_t active : device.stream_active[stream]) {
        const int32_t slot = instances_[static_cast<size_t>(active)].slot;
        if (!cost::LinksDisjoint(slots_[static_cast<size_t>(slot)].links, links)) return;
      }
      queue.pop_front();
      device.stream_active[stream].push_back(next);
      Enter(d, next, now);
    }
  }

  // Device `d` puts its part of instance `id` on the network.
  void Enter(int32_t d, int32_t id, double now) {
    const int32_t slot = instances_[static_cast<size_t>(id)].slot;
    const Plan& plan = slots_[static_cast<size_t>(slot)].plan;
    Instance& instance = instances_[static_cast<size_t>(id)];
    const int32_t begin = plan.device_begin[static_cast<size_t>(d)];
    const int32_t end = plan.device_begin[static_cast<size_t>(d) + 1];
    for (int32_t i = begin; i < end; ++i) {
      const int32_t m = plan.device_messages[static_cast<size_t>(i)];
      if (--instance.pending[static_cast<size_t>(m)] == 0) StartMessage(id, m, now);
    }
    if (begin == end) PartDone(id, d, now);
  }

  void StartMessage(int32_t instance, int32_t m, double now) {
    const Plan& plan =
        slots_[static_cast<size_t>(instances_[static_cast<size_t>(instance)].slot)].plan;
    Push(now + plan.messages[static_cast<size_t>(m)].latency_seconds, EventKind::kActivate,
         instance, m);
  }

  void Activate(int32_t instance, int32_t m, double now) {
    const Plan& plan =
        slots_[static_cast<size_t>(instances_[static_cast<size_t>(instance)].slot)].plan;
    const Message& message = plan.messages[static_cast<size_t>(m)];
    ++flows_started_;
    if (message.bytes <= 0 || message.route_size == 0) {
      CompleteMessage(instance, m, now);
      return;
    }
    network_.Add(plan.route_links.data() + message.route_begin, message.route_size, message.bytes,
                 now, (static_cast<int64_t>(instance) << 32) | static_cast<uint32_t>(m));
    max_concurrent_ = std::max(max_concurrent_, network_.active_flows());
  }

  void CompleteMessage(int32_t id, int32_t m, double now) {
    Instance& instance = instances_[static_cast<size_t>(id)];
    const Plan& plan = slots_[static_cast<size_t>(instance.slot)].plan;
    const Message& message = plan.messages[static_cast<size_t>(m)];
    for (int32_t i = 0; i < message.dependents_size; ++i) {
      const int32_t next = plan.dependents[static_cast<size_t>(message.dependents_begin + i)];
      if (--instance.pending[static_cast<size_t>(next)] == 0) StartMessage(id, next, now);
    }
    for (int32_t device : {message.source, message.target}) {
      if (--instance.left[static_cast<size_t>(device)] == 0) PartDone(id, device, now);
    }
  }

  // Device `d` has done its part of instance `id`.
  void PartDone(int32_t id, int32_t d, double now) {
    Instance& instance = instances_[static_cast<size_t>(id)];
    DeviceState& device = devices_[static_cast<size_t>(d)];
    const int32_t op_kind = slots_[static_cast<size_t>(instance.slot)].op_kind;
    for (Open& open : device.open) {
      if (open.instance != id || open.done) continue;
      open.done = true;
      open.done_at = now;
      device.communication += now - open.join;
      kind_communication_[static_cast<size_t>(op_kind)] += now - open.join;
      device.track_busy[static_cast<size_t>(open.track)] = false;
      Record(open.join, now, d, open.track + 1, TraceCategory::kTransfer,
             slots_[static_cast<size_t>(instance.slot)].instruction);
      break;
    }
    if (device.blocked && device.blocked_instance == id) {
      device.blocked = false;
      device.exposed += now - device.blocked_since;
      kind_exposed_[static_cast<size_t>(op_kind)] += now - device.blocked_since;
      Record(device.blocked_since, now, d, 0, TraceCategory::kWait, device.blocked_on);
      TakeIfDone(device, instance.slot);
      device.blocked_on = nullptr;
      device.pc++;
      device.clock = now;
      Push(now, EventKind::kResume, d, 0);
    }
    const auto stream = static_cast<size_t>(slots_[static_cast<size_t>(instance.slot)].stream);
    if (++instance.devices_done == static_cast<int64_t>(devices_.size())) {
      instance_of_.erase(instance.key);
      free_instances_.push_back(id);
    }
    std::erase(device.stream_active[stream], id);
    EnterQueued(d, stream, now);
  }

  void Record(double start, double end, int32_t device, int32_t tid, TraceCategory category,
              const Instruction* instruction) {
    if (!trace_ || device >= options_.trace_devices || end <= start) return;
    if (static_cast<int64_t>(trace_records_.size()) >= options_.max_trace_events) {
      trace_truncated_ = true;
      return;
    }
    trace_records_.push_back(TraceRecord{start, end, device, tid, category, instruction});
  }

  std::string TraceJson() const;

  const std::vector<Step>& tape_;
  const std::vector<Slot>& slots_;
  const std::vector<ComputeBlock>& blocks_;
  const std::vector<std::string>& op_kinds_;
  FairShareNetwork network_;
  std::vector<DeviceState> devices_;
  const SimOptions& options_;
  SimReport* report_;

  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t sequence_ = 0;
  double last_time_ = 0;
  std::vector<Instance> instances_;
  std::vector<int32_t> free_instances_;
  std::unordered_map<uint64_t, int32_t> instance_of_;

  std::vector<int64_t> kind_count_;
  std::vector<double> kind_compute_;
  std::vector<double> kind_exposed_;
  std::vector<double> kind_communication_;
  double flops_ = 0;
  double ideal_ = 0;
  int64_t events_ = 0;
  int64_t flows_started_ = 0;
  int64_t instances_created_ = 0;
  int64_t max_concurrent_ = 0;

  bool trace_ = false;
  bool trace_truncated_ = false;
  std::vector<TraceRecord> trace_records_;
};

// --- trace JSON ---------------------------------------------------------------------

void AppendEscaped(std::string& out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
}

// Whole picoseconds printed as microseconds: exact, so that an event that
// starts where another ends never appears to overlap it.
void AppendMicros(std::string& out, int64_t picoseconds) {
  out += fmt::format("{}.{:06}", picoseconds / 1000000, picoseconds % 1000000);
}

std::string Engine::TraceJson() const {
  std::string out;
  out.reserve(trace_records_.size() * 128 + 1024);
  out += "{\"traceEvents\":[";
  bool first = true;
  auto separator = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  const int64_t traced =
      std::min<int64_t>(options_.trace_devices, static_cast<int64_t>(devices_.size()));
  for (int64_t d = 0; d < traced; ++d) {
    separator();
    out += fmt::format(
        R"({{"name":"process_name","ph":"M","pid":{},"args":{{"name":"device {}"}}}})", d, d);
    separator();
    out += fmt::format(
        R"({{"name":"process_sort_index","ph":"M","pid":{},"args":{{"sort_index":{}}}}})", d, d);
    separator();
    out += fmt::format(
        R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"compute"}}}})", d);
    for (size_t track = 0; track < devices_[static_cast<size_t>(d)].track_busy.size(); ++track) {
      separator();
      out += fmt::format(
          R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},"args":{{"name":"transfers {}"}}}})",
          d, track + 1, track + 1);
    }
  }
  for (const TraceRecord& record : trace_records_) {
    separator();
    const auto start = static_cast<int64_t>(std::llround(record.start * 1e12));
    const auto end = static_cast<int64_t>(std::llround(record.end * 1e12));
    out += "{\"name\":\"";
    AppendEscaped(out, record.instruction ? record.instruction->name() : "?");
    out += "\",\"cat\":\"";
    switch (record.category) {
      case TraceCategory::kCompute:
        out += ir::OpcodeName(record.instruction->opcode());
        break;
      case TraceCategory::kWait:
        out += "wait";
        break;
      case TraceCategory::kTransfer:
        out += "transfer";
        break;
    }
    out += fmt::format("\",\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":", record.device, record.tid);
    AppendMicros(out, start);
    out += ",\"dur\":";
    AppendMicros(out, end - start);
    if (record.instruction != nullptr) {
      out += ",\"args\":{\"op\":\"";
      out += ir::OpcodeName(record.instruction->opcode());
      out += "\"}";
    }
    out += "}";
  }
  out += "],\"displayTimeUnit\":\"ns\"}\n";
  return out;
}

Expected<double> ParseNumber(std::string_view text, std::string_view what) {
  double value = 0;
  const std::string copy(text);
  char* end = nullptr;
  value = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value)) {
    return Error{fmt::format("{}: '{}' is not a number", what, text)};
  }
  return value;
}

Expected<int64_t> ParseDevice(std::string_view text, std::string_view what) {
  int64_t value = 0;
  const auto [ptr, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || ptr != text.data() + text.size() || value < 0) {
    return Error{fmt::format("{}: '{}' is not a device id", what, text)};
  }
  return value;
}

}  // namespace

// --- options --------------------------------------------------------------------------

Status ParseComputeScale(std::string_view spec, SimOptions* options) {
  const std::string what = fmt::format("compute scale '{}' (want DEVICE=SCALE)", spec);
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) return Error{what};
  LOOM_ASSIGN_OR_RETURN(const int64_t device, ParseDevice(spec.substr(0, eq), what));
  LOOM_ASSIGN_OR_RETURN(const double scale, ParseNumber(spec.substr(eq + 1), what));
  if (!(scale > 0)) return Error{fmt::format("{}: the scale must be positive", what)};
  if (device > (1 << 24)) return Error{fmt::format("{}: device id too large", what)};
  auto& scales = options->compute_scale;
  if (scales.size() <= static_cast<size_t>(device))
    scales.resize(static_cast<size_t>(device) + 1, 1);
  scales[static_cast<size_t>(device)] = scale;
  return OkStatus();
}

Status ParseLinkScale(std::string_view spec, SimOptions* options) {
  const std::string what = fmt::format("link scale '{}' (want A-B=SCALE or A>B=SCALE)", spec);
  const size_t eq = spec.find('=');
  if (eq == std::string_view::npos) return Error{what};
  const std::string_view link = spec.substr(0, eq);
  const size_t dash = link.find_first_of("->");
  if (dash == std::string_view::npos) return Error{what};
  const bool both = link[dash] == '-';
  LOOM_ASSIGN_OR_RETURN(const int64_t a, ParseDevice(link.substr(0, dash), what));
  LOOM_ASSIGN_OR_RETURN(const int64_t b, ParseDevice(link.substr(dash + 1), what));
  LOOM_ASSIGN_OR_RETURN(const double scale, ParseNumber(spec.substr(eq + 1), what));
  if (!(scale > 0)) return Error{fmt::format("{}: the scale must be positive", what)};
  if (a == b) return Error{fmt::format("{}: a link joins two different devices", what)};
  options->link_scale[{a, b}] = scale;
  if (both) options->link_scale[{b, a}] = scale;
  return OkStatus();
}

// --- Simulate -----------------------------------------------------------------------

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
  report.cost_model_step_seconds = cost::EstimateStep(module, model, grid).total_seconds;

  Compiler compiler(model, grid, target, network, &report);
  LOOM_RETURN_IF_ERROR(compiler.Compile(*module.entry()));
  if (const Compiler::ReplayCost cost = compiler.CostOfReplay();
      options.max_messages > 0 && cost.messages > options.max_messages) {
    std::string loop;
    if (cost.loop != nullptr) {
      loop = fmt::format(" (the while %{} at line {} runs {}{} times, with the loops around it)",
                         cost.loop->name(), cost.loop->loc().line,
                         cost.loop_trips == kSaturated ? "at least " : "", cost.loop_trips);
    }
    return Error{
        fmt::format("simulating module {} would move {}{} messages{}, more than the limit of {} "
                    "(--max-messages): loops that transfer are replayed trip by trip",
                    module.name(), cost.messages == kSaturated ? "at least " : "", cost.messages,
                    loop, options.max_messages)};
  }

  Engine engine(compiler, network, devices, options, &report);
  LOOM_RETURN_IF_ERROR(engine.Run());
  engine.Fill();
  report.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return report;
}

}  // namespace loom::sim
