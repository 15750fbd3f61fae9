#include "sim/event_engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <variant>

#include "cost/step_time.h"
#include "sim/statistics.h"
#include "trace/chrome_trace.h"

namespace loom::sim {
namespace {

using ir::Instruction;

// --- events ---------------------------------------------------------------------

// Each 8-byte aligned, so that an Event is two whole 16-byte halves: the
// queue moves events all the time, and copies of a 12-byte tail stall on
// store forwarding (13% of a replay's time, measured).
struct alignas(8) ResumeDevice {
  int32_t device;
};
struct alignas(8) MessageStarts {
  int32_t instance;
  int32_t message;  // into its plan
};
struct alignas(8) FlowArrives {
  int32_t flow;
  uint32_t version;  // the flow's version when queued; stale once its rate changed
};

struct Event {
  double time;
  uint64_t sequence;  // ties at one time run in the order queued
  std::variant<ResumeDevice, MessageStarts, FlowArrives> what;
};
static_assert(sizeof(Event) == 32);

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
  bool done;
};

// A first-in first-out queue that allocates nothing until something is
// queued: a std::deque allocates a node when it is made, and a module of a
// million devices made six per device (gigabytes before the first event).
class TransferQueue {
 public:
  bool empty() const { return head_ == items_.size(); }
  int32_t front() const { return items_[head_]; }
  void push_back(int32_t instance) { items_.push_back(instance); }
  void pop_front() {
    if (++head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    }
  }

 private:
  std::vector<int32_t> items_;
  size_t head_ = 0;
};

struct TransferStream {
  std::vector<int32_t> active;
  TransferQueue queued;
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
  double compute = 0;
  double exposed = 0;
  double communication = 0;
  double finish = 0;

  // The device's transfers of one kind: the instances on its stream, and
  // those queued behind them in program order. Made at its first transfer,
  // so that the idle devices of a big grid cost no more than their clocks.
  TransferStream& Stream(size_t kind) {
    if (streams_.empty()) streams_.resize(cost::kTransferKindCount);
    return streams_[kind];
  }

 private:
  std::vector<TransferStream> streams_;
};

// What the trace shows, recorded as the replay goes: the first
// trace_devices devices replayed (with classes of symmetric devices, the
// representatives of the first classes, each a row under its own id), at
// most max_trace_events slices and link samples together. A link's occupancy (the fraction of its
// bandwidth its flows use) is sampled whenever it changes, as a counter track of the device the
// link leaves or enters.
class TraceLog {
 public:
  TraceLog(const SimOptions& options, const Network& network, const Symmetry& symmetry)
      : enabled_(options.trace),
        devices_(options.trace_devices),
        max_slices_(options.max_trace_events),
        network_(network),
        symmetry_(symmetry) {
    if (enabled_) {
      link_names_.resize(static_cast<size_t>(network.link_count()));
      link_busy_.assign(static_cast<size_t>(network.link_count()), 0);
    }
  }

  bool enabled() const { return enabled_; }
  void LinkLoad(double now, LinkId link, double bytes_per_second) {
    const int64_t device = network_.LinkDevice(link);
    if (!enabled_ || device < 0 || symmetry_.ClassOf(device) >= devices_) return;
    const double busy = std::min(1.0, bytes_per_second / network_.capacity(link));
    double& last = link_busy_[static_cast<size_t>(link)];
    if (busy == last) return;
    if (Full()) return;
    last = busy;
    std::string& name = link_names_[static_cast<size_t>(link)];
    if (name.empty()) name = "link " + network_.LinkName(link);
    counters_.push_back({.device = device,
                         .track = name,
                         .series = "busy",
                         .time_ps = trace::PicosecondsFromSeconds(now),
                         .value = busy});
  }

  void Compute(double start, double end, int32_t device, const Instruction& instruction) {
    if (!enabled_) return;
    const std::string_view op = ir::OpcodeName(instruction.opcode());
    Add(start, end, device, trace::Lane::kCompute, op, instruction, op);
  }
  void Wait(double start, double end, int32_t device, const Instruction* at) {
    if (at != nullptr) Add(start, end, device, trace::Lane::kCompute, "wait", *at, {});
  }
  void Transfer(double start, double end, int32_t device, const Instruction& instruction) {
    if (!enabled_) return;
    Add(start, end, device, trace::Lane::kTransfers, "transfer", instruction,
        ir::OpcodeName(instruction.opcode()));
  }

  bool truncated() const { return truncated_; }
  std::string Json() const {
    trace::Timeline timeline;
    for (int64_t c = 0; c < std::min(devices_, symmetry_.classes()); ++c) {
      timeline.devices.push_back(symmetry_.Representative(c));
    }
    timeline.slices = slices_;
    timeline.counters = counters_;
    return trace::ChromeTraceJson(timeline);
  }

 private:
  bool Full() {
    if (static_cast<int64_t>(slices_.size() + counters_.size()) < max_slices_) return false;
    truncated_ = true;
    return true;
  }

  void Add(double start, double end, int32_t device, trace::Lane lane, std::string_view category,
           const Instruction& instruction, std::string_view op) {
    if (!enabled_ || device >= devices_ || end <= start) return;
    if (Full()) return;
    slices_.push_back({.device = symmetry_.Representative(device),
                       .lane = lane,
                       .name = instruction.name(),
                       .category = category,
                       .op = op,
                       .start_ps = trace::PicosecondsFromSeconds(start),
                       .end_ps = trace::PicosecondsFromSeconds(end)});
  }

  bool enabled_;
  int64_t devices_;
  int64_t max_slices_;
  bool truncated_ = false;
  std::vector<trace::Slice> slices_;
  const Network& network_;
  const Symmetry& symmetry_;
  // Per link: its counter track's name (made at its first sample; the
  // vector is never resized, so the views into it stay valid) and the last
  // occupancy sampled.
  std::vector<std::string> link_names_;
  std::vector<double> link_busy_;
  std::vector<trace::CounterSample> counters_;
};

// --- the replay -----------------------------------------------------------------

class Engine {
 public:
  Engine(const Tape& tape, const Network& network, const Symmetry& symmetry,
         const SimOptions& options)
      : tape_(tape.steps),
        slots_(tape.slots),
        blocks_(tape.blocks),
        network_(network.capacities()),
        symmetry_(symmetry),
        devices_(static_cast<size_t>(symmetry.classes())),
        statistics_(tape.op_kinds.size()),
        trace_(options, network, symmetry) {
    for (size_t d = 0; d < devices_.size(); ++d) {
      DeviceState& device = devices_[d];
      device.occurrence.assign(slots_.size(), 0);
      if (d < options.compute_scale.size()) device.scale = options.compute_scale[d];
    }
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
          Push(finish, FlowArrives{flow, network_.version(flow)});
        }
      }
      if (trace_.enabled()) {
        for (LinkId link : network_.recomputed_links())
          trace_.LinkLoad(now, link, network_.Load(link));
      }
    }
    for (size_t d = 0; d < devices_.size(); ++d) {
      const DeviceState& device = devices_[d];
      if (device.finished) continue;
      const Instruction* at = device.blocked_on;
      return Error{fmt::format(
          "deadlock: device {} waits at %{} for a collective some peer never reaches",
          symmetry_.Representative(static_cast<int64_t>(d)), at ? at->name() : std::string("?"))};
    }
    return OkStatus();
  }

  void Fill(const std::vector<std::string>& op_kinds, bool with_trace, SimReport* report) const {
    double step = last_time_;
    for (const DeviceState& device : devices_) step = std::max(step, device.finish);
    report->step_seconds = step;
    // Every device does what its class's representative does.
    report->devices.reserve(static_cast<size_t>(symmetry_.devices()));
    for (int64_t id = 0; id < symmetry_.devices(); ++id) {
      const DeviceState& device = devices_[static_cast<size_t>(symmetry_.ClassOf(id))];
      DeviceReport out;
      out.device = id;
      out.compute = device.compute;
      out.exposed_communication = device.exposed;
      out.finish = device.finish;
      out.idle = step - device.finish;
      out.communication = device.communication;
      out.compute_scale = device.scale;
      report->devices.push_back(out);
    }
    statistics_.Fill(op_kinds, symmetry_.devices(), symmetry_.order(), step, report);
    report->reallocations = network_.reallocations();
    report->mean_component_links = network_.reallocations() > 0
                                       ? static_cast<double>(network_.links_recomputed()) /
                                             static_cast<double>(network_.reallocations())
                                       : 0;
    if (with_trace) {
      report->trace_json = trace_.Json();
      report->trace_truncated = trace_.truncated();
    }
  }

 private:
  template <class What>
  void Push(double time, What what) {
    queue_.push(Event{time, sequence_++, what});
  }

  void Handle(const Event& event, double now) {
    if (const auto* resume = std::get_if<ResumeDevice>(&event.what)) {
      Happened(now);
      Advance(resume->device, now);
    } else if (const auto* start = std::get_if<MessageStarts>(&event.what)) {
      Happened(now);
      Activate(start->instance, start->message, now);
    } else if (const auto* arrival = std::get_if<FlowArrives>(&event.what)) {
      // A superseded arrival is no event at all.
      if (arrival->version != network_.version(arrival->flow)) return;
      Happened(now);
      const int64_t tag = network_.tag(arrival->flow);
      network_.Remove(arrival->flow, now);
      CompleteMessage(static_cast<int32_t>(tag >> 32), static_cast<int32_t>(tag & 0xffffffff), now);
    }
  }

  void Happened(double now) {
    last_time_ = now;
    statistics_.Event();
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
          trace_.Compute(t, t + seconds, d, *step.instruction);
          t += seconds;
          device.compute += seconds;
          statistics_.Ran(step.op_kind);
          statistics_.Computed(step.op_kind, seconds);
          statistics_.Dots(step.flops, step.ideal);
          device.pc++;
          continue;
        }
        case StepKind::kBlock: {
          const ComputeBlock& block = blocks_[static_cast<size_t>(step.block)];
          const double seconds = block.seconds * device.scale;
          trace_.Compute(t, t + seconds, d, *step.instruction);
          t += seconds;
          device.compute += seconds;
          for (const auto& [kind, count, kind_seconds] : block.kinds) {
            statistics_.Ran(kind, count);
            statistics_.Computed(kind, kind_seconds * device.scale);
          }
          statistics_.Dots(block.flops, block.ideal);
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
        Push(t, ResumeDevice{d});
        return;
      }
      device.clock = now;
      if (step.kind == StepKind::kSync || step.kind == StepKind::kStart) {
        statistics_.Ran(step.op_kind);
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
    const Plan& plan = *slots_[static_cast<size_t>(slot)].plan;
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
    statistics_.Collective();
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
    device.open.push_back(Open{slot, id, now, false});
    // Transfers of one kind take the device's stream for that kind in
    // program order, one at a time unless their links are disjoint: the
    // step estimate's rule (cost/step_time.h).
    const auto stream = static_cast<size_t>(slots_[static_cast<size_t>(slot)].stream);
    device.Stream(stream).queued.push_back(id);
    EnterQueued(d, stream, now);
    return id;
  }

  // Puts the device's queued transfers of `stream` on it while the first
  // may run beside those already on it.
  void EnterQueued(int32_t d, size_t stream, double now) {
    DeviceState& device = devices_[static_cast<size_t>(d)];
    TransferStream& transfers = device.Stream(stream);
    TransferQueue& queue = transfers.queued;
    while (!queue.empty()) {
      const int32_t next = queue.front();
      const auto& links =
          slots_[static_cast<size_t>(instances_[static_cast<size_t>(next)].slot)].links;
      for (int32_t active : transfers.active) {
        const int32_t slot = instances_[static_cast<size_t>(active)].slot;
        if (!cost::LinksDisjoint(slots_[static_cast<size_t>(slot)].links, links)) return;
      }
      queue.pop_front();
      transfers.active.push_back(next);
      Enter(d, next, now);
    }
  }

  // Device `d` puts its part of instance `id` on the network.
  void Enter(int32_t d, int32_t id, double now) {
    const int32_t slot = instances_[static_cast<size_t>(id)].slot;
    const Plan& plan = *slots_[static_cast<size_t>(slot)].plan;
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
        *slots_[static_cast<size_t>(instances_[static_cast<size_t>(instance)].slot)].plan;
    Push(now + plan.messages[static_cast<size_t>(m)].latency_seconds, MessageStarts{instance, m});
  }

  void Activate(int32_t instance, int32_t m, double now) {
    const Slot& slot = slots_[static_cast<size_t>(instances_[static_cast<size_t>(instance)].slot)];
    const Plan& plan = *slot.plan;
    const Message& message = plan.messages[static_cast<size_t>(m)];
    const double bytes = message.bytes * slot.bytes;
    statistics_.Flow();
    if (bytes <= 0 || message.route_size == 0) {
      CompleteMessage(instance, m, now);
      return;
    }
    network_.Add(
        plan.route_links.data() + message.route_begin,
        plan.route_weights.empty() ? nullptr : plan.route_weights.data() + message.route_begin,
        message.route_size, bytes, now,
        (static_cast<int64_t>(instance) << 32) | static_cast<uint32_t>(m));
    statistics_.ConcurrentFlows(network_.active_flows());
  }

  void CompleteMessage(int32_t id, int32_t m, double now) {
    Instance& instance = instances_[static_cast<size_t>(id)];
    const Plan& plan = *slots_[static_cast<size_t>(instance.slot)].plan;
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
      device.communication += now - open.join;
      statistics_.InFlight(op_kind, now - open.join);
      trace_.Transfer(open.join, now, d, *slots_[static_cast<size_t>(instance.slot)].instruction);
      break;
    }
    if (device.blocked && device.blocked_instance == id) {
      device.blocked = false;
      device.exposed += now - device.blocked_since;
      statistics_.Blocked(op_kind, now - device.blocked_since);
      trace_.Wait(device.blocked_since, now, d, device.blocked_on);
      TakeIfDone(device, instance.slot);
      device.blocked_on = nullptr;
      device.pc++;
      device.clock = now;
      Push(now, ResumeDevice{d});
    }
    const auto stream = static_cast<size_t>(slots_[static_cast<size_t>(instance.slot)].stream);
    if (++instance.devices_done == static_cast<int64_t>(devices_.size())) {
      instance_of_.erase(instance.key);
      free_instances_.push_back(id);
    }
    std::erase(device.Stream(stream).active, id);
    EnterQueued(d, stream, now);
  }

  const std::vector<Step>& tape_;
  const std::vector<Slot>& slots_;
  const std::vector<ComputeBlock>& blocks_;
  FairShareNetwork network_;
  const Symmetry& symmetry_;
  std::vector<DeviceState> devices_;  // one per class of symmetric devices

  std::priority_queue<Event, std::vector<Event>, EventLater> queue_;
  uint64_t sequence_ = 0;
  double last_time_ = 0;
  std::vector<Instance> instances_;
  std::vector<int32_t> free_instances_;
  std::unordered_map<uint64_t, int32_t> instance_of_;

  StepStatistics statistics_;
  TraceLog trace_;
};

}  // namespace

Status ReplayTape(const Tape& tape, const Network& network, const Symmetry& symmetry,
                  const SimOptions& options, SimReport* report) {
  Engine engine(tape, network, symmetry, options);
  LOOM_RETURN_IF_ERROR(engine.Run());
  engine.Fill(tape.op_kinds, options.trace, report);
  return OkStatus();
}

}  // namespace loom::sim
