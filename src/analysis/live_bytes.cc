#include "analysis/live_bytes.h"

#include <algorithm>
#include <compare>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "analysis/fusion.h"
#include "support/saturating.h"

namespace loom::analysis {
namespace {

using ir::Computation;
using ir::Instruction;
using ir::Opcode;

// Element `element` of the value that `defined_by` defines (0 for an array).
struct Buffer {
  const Instruction* defined_by = nullptr;
  int64_t element = 0;
  friend auto operator<=>(const Buffer&, const Buffer&) = default;
};

// The buffers a value refers to, one list per top-level element of its shape
// (one list for an array).
using ValueBuffers = std::vector<std::vector<Buffer>>;

int64_t TopLevelElementCount(const ir::Shape& shape) {
  return shape.IsTuple() ? shape.tuple_size() : 1;
}

int64_t TopLevelElementBytes(const ir::Shape& shape, int64_t element) {
  return shape.IsTuple() ? shape.tuple_element(element).ByteSize() : shape.ByteSize();
}

std::vector<Buffer> Flatten(const ValueBuffers& value) {
  std::vector<Buffer> buffers;
  for (const std::vector<Buffer>& element : value) {
    buffers.insert(buffers.end(), element.begin(), element.end());
  }
  return buffers;
}

// The one top-level element of `operand` that `reader` reads, when `reader` is
// a get-tuple-element; nullopt when it reads all of them.
std::optional<int64_t> SelectedElement(const Instruction& reader, const Instruction& operand) {
  const std::optional<int64_t>& index = reader.attrs().tuple_index;
  if (reader.opcode() != Opcode::kGetTupleElement || !index || !operand.shape().IsTuple() ||
      *index < 0 || *index >= operand.shape().tuple_size()) {
    return std::nullopt;
  }
  return index;
}

// Per value and top-level element: the last position in the schedule that
// reads it (its own position when nothing does; the end for the root).
using LastReads = std::unordered_map<const Instruction*, std::vector<int64_t>>;

LastReads ComputeLastReads(const Computation& computation) {
  LastReads last_reads;
  const auto& instructions = computation.instructions();
  const int64_t end = computation.instruction_count();
  for (int64_t position = 0; position < end; ++position) {
    const Instruction& instruction = *instructions[position];
    last_reads[&instruction].assign(TopLevelElementCount(instruction.shape()), position);
    for (const Instruction* operand : instruction.operands()) {
      std::vector<int64_t>& reads = last_reads[operand];
      std::optional<int64_t> selected = SelectedElement(instruction, *operand);
      for (int64_t element = 0; element < static_cast<int64_t>(reads.size()); ++element) {
        if (!selected || element == *selected) reads[element] = std::max(reads[element], position);
      }
    }
  }
  if (const Instruction* root = computation.root()) {
    for (int64_t& read : last_reads[root]) read = end;
  }
  return last_reads;
}

// One buffer's life in a schedule: defined at `defined_at` (-1: an entry
// parameter, live from the start), last read at `last_read` (the end: never
// freed).
struct BufferLife {
  Buffer buffer;
  int64_t defined_at = 0;
  int64_t last_read = 0;
  int64_t bytes = 0;
};

// What a computation's schedule allocates and frees, by position.
struct Schedule {
  int64_t start_bytes = 0;       // entry parameters: live from the start
  std::vector<int64_t> defined;  // bytes of the buffers defined at each position
  std::vector<int64_t> freed;    // bytes of the buffers last read at each position
  std::vector<BufferLife> buffers;
};

// Gives every value of one computation its buffers (new ones or those of the
// values it aliases) and finds when each buffer is last read.
class BufferAssigner {
 public:
  // `fusion`, when not null, says which instructions write no buffer.
  BufferAssigner(const Computation& computation, bool parameters_own_bytes,
                 const FusionPlan* fusion)
      : computation_(computation),
        parameters_own_bytes_(parameters_own_bytes),
        fusion_(fusion),
        end_(computation.instruction_count()),
        last_reads_(ComputeLastReads(computation)) {}

  Schedule Assign() {
    schedule_.defined.assign(end_, 0);
    schedule_.freed.assign(end_, 0);
    const auto& instructions = computation_.instructions();
    for (int64_t position = 0; position < end_; ++position) {
      const Instruction& instruction = *instructions[position];
      ValueBuffers value = BuffersOf(instruction, position);
      RecordReads(instruction, value);
      values_[&instruction] = std::move(value);
    }
    for (const auto& [buffer, last_read] : last_read_) {
      const int64_t bytes = MustFind(bytes_, buffer);
      if (last_read < end_) {
        schedule_.freed[last_read] = SaturatingAdd(schedule_.freed[last_read], bytes);
      }
      schedule_.buffers.push_back({buffer, MustFind(defined_at_, buffer), last_read, bytes});
    }
    return std::move(schedule_);
  }

 private:
  ValueBuffers BuffersOf(const Instruction& instruction, int64_t position) {
    if (IsFused(instruction)) return NameOperands(instruction);
    const Opcode opcode = instruction.opcode();
    switch (opcode) {
      case Opcode::kParameter:
        return DefineParameter(instruction, position);
      case Opcode::kGetTupleElement:
        return SelectElement(instruction);
      case Opcode::kTuple: {
        ValueBuffers value;
        for (const Instruction* operand : instruction.operands()) {
          value.push_back(Flatten(ValueOf(operand)));
        }
        return value;
      }
      case Opcode::kBitcast:
      case Opcode::kAddDependency:
      case Opcode::kOptimizationBarrier:
      case Opcode::kDomain:
      case Opcode::kWhile:
      case Opcode::kAsyncUpdate:
        return ValueOf(instruction.operand(0));
      case Opcode::kDynamicUpdateSlice:
        if (CanUpdateInPlace(instruction, position)) return ValueOf(instruction.operand(0));
        return Define(instruction, position, 0);
      case Opcode::kScatter:
        if (instruction.operand_count() == 3 && CanUpdateInPlace(instruction, position)) {
          return ValueOf(instruction.operand(0));
        }
        return Define(instruction, position, 0);
      default:
        break;
    }
    if (ir::IsAsyncDone(opcode)) return ResultOfStart(instruction);
    if (ir::IsAsyncStart(opcode) && instruction.shape().IsTuple()) {
      return DefineStart(instruction, position);
    }
    return Define(instruction, position, 0);
  }

  // New buffers for the top-level elements from `first_element` on.
  ValueBuffers Define(const Instruction& instruction, int64_t position, int64_t first_element,
                      bool own_bytes = true) {
    const ir::Shape& shape = instruction.shape();
    ValueBuffers value(TopLevelElementCount(shape));
    for (int64_t element = first_element; element < static_cast<int64_t>(value.size()); ++element) {
      const Buffer buffer{&instruction, element};
      const int64_t bytes = own_bytes ? TopLevelElementBytes(shape, element) : 0;
      value[element] = {buffer};
      bytes_[buffer] = bytes;
      defined_at_[buffer] = position;
      schedule_.defined[position] = SaturatingAdd(schedule_.defined[position], bytes);
    }
    return value;
  }

  bool IsFused(const Instruction& instruction) const {
    return fusion_ != nullptr && fusion_->FusedIntoUsers(instruction);
  }

  // A fused instruction's value is computed where its kernel reads it: it
  // names the buffers its own operands name (one array: fusible ops make no
  // tuples).
  ValueBuffers NameOperands(const Instruction& instruction) const {
    std::vector<Buffer> buffers;
    for (const Instruction* operand : instruction.operands()) {
      for (const Buffer& buffer : Flatten(ValueOf(operand))) buffers.push_back(buffer);
    }
    return {std::move(buffers)};
  }

  // Entry parameters are live from the start to the end; a callee's are the
  // caller's buffers, already counted there: 0 bytes here.
  ValueBuffers DefineParameter(const Instruction& parameter, int64_t position) {
    ValueBuffers value = Define(parameter, position, 0, parameters_own_bytes_);
    if (parameters_own_bytes_) {
      schedule_.start_bytes = SaturatingAdd(schedule_.start_bytes, schedule_.defined[position]);
      schedule_.defined[position] = 0;
      for (const Buffer& buffer : Flatten(value)) {
        last_read_[buffer] = end_;
        defined_at_[buffer] = -1;
      }
    }
    return value;
  }

  ValueBuffers SelectElement(const Instruction& gte) {
    const Instruction* tuple = gte.operand(0);
    const ValueBuffers& value = ValueOf(tuple);
    std::optional<int64_t> selected = SelectedElement(gte, *tuple);
    if (selected && static_cast<int64_t>(value.size()) == tuple->shape().tuple_size()) {
      return {value[*selected]};
    }
    return {Flatten(value)};
  }

  // A -start's element 0 is its operands; the rest (the result and the
  // context) are new. copy-start is (destination, source, context): the
  // other way round, but both elements have the same size.
  ValueBuffers DefineStart(const Instruction& start, int64_t position) {
    ValueBuffers value = Define(start, position, 1);
    for (const Instruction* operand : start.operands()) {
      for (const Buffer& buffer : Flatten(ValueOf(operand))) value[0].push_back(buffer);
    }
    return value;
  }

  // A *-done is element 1 of its -start's tuple, or the whole -start when that
  // is no tuple (all-reduce-start).
  ValueBuffers ResultOfStart(const Instruction& done) {
    const ValueBuffers& start = ValueOf(done.operand(0));
    if (start.size() >= 2) return {start[1]};
    return {Flatten(start)};
  }

  // dynamic-update-slice (and a scatter) may write into operand 0 when
  // nothing reads that buffer after it (the values defined so far say when
  // each buffer is last read; an entry parameter is read at the end). Its
  // operand 0 is never fused into it (analysis/fusion.h), so it is a buffer
  // of its own.
  bool CanUpdateInPlace(const Instruction& update, int64_t position) const {
    for (const Buffer& buffer : Flatten(ValueOf(update.operand(0)))) {
      auto it = last_read_.find(buffer);
      if (it != last_read_.end() && it->second > position) return false;
    }
    return true;
  }

  // Every buffer of `value` stays live until the last read of the element of
  // `instruction` that refers to it.
  void RecordReads(const Instruction& instruction, const ValueBuffers& value) {
    const std::vector<int64_t>& reads = MustFind(last_reads_, &instruction);
    if (reads.empty()) return;  // an empty tuple refers to no buffer
    const int64_t last_of_all = *std::max_element(reads.begin(), reads.end());
    for (int64_t element = 0; element < static_cast<int64_t>(value.size()); ++element) {
      // A value whose elements do not line up with its shape (a *-done of a
      // tuple result) is read as a whole.
      const int64_t read = value.size() == reads.size() ? reads[element] : last_of_all;
      for (const Buffer& buffer : value[element]) {
        int64_t& last_read = last_read_[buffer];
        last_read = std::max(last_read, read);
      }
    }
  }

  const ValueBuffers& ValueOf(const Instruction* operand) const {
    static const ValueBuffers kNone;
    auto it = values_.find(operand);
    return it == values_.end() ? kNone : it->second;
  }

  const Computation& computation_;
  const bool parameters_own_bytes_;
  const FusionPlan* const fusion_;
  const int64_t end_;
  const LastReads last_reads_;
  std::unordered_map<const Instruction*, ValueBuffers> values_;
  std::map<Buffer, int64_t> bytes_;       // of every buffer defined so far
  std::map<Buffer, int64_t> defined_at_;  // its position; -1 for an entry parameter
  std::map<Buffer, int64_t> last_read_;   // over every value that refers to the buffer
  Schedule schedule_;
};

// Peaks of computations, each callee's computed once.
class PeakModel {
 public:
  explicit PeakModel(Fusion fusion) : fusion_(fusion) {}

  int64_t PeakOf(const Computation& computation, bool parameters_own_bytes) {
    return Scan(computation, parameters_own_bytes).peak;
  }

  // Adds to `breakdown` where `computation` peaks and the buffers live there,
  // descending into the computation that instruction runs when its peak is
  // what the instruction adds; returns the computation's peak.
  int64_t Explain(const Computation& computation, bool parameters_own_bytes,
                  PeakBreakdown& breakdown) {
    const ScheduleScan scan = Scan(computation, parameters_own_bytes);
    const int64_t at = scan.peak_position;
    const Instruction* instruction = at >= 0 ? computation.instructions()[at].get() : nullptr;
    if (instruction != nullptr) breakdown.where.push_back(instruction);
    const Computation* callee = instruction != nullptr ? PeakingCallee(*instruction) : nullptr;
    const bool descends =
        callee != nullptr && CalleePeak(*callee) > scan.schedule.defined[static_cast<size_t>(at)];
    for (const BufferLife& life : scan.schedule.buffers) {
      // Live around the instruction: defined before it and read at it or
      // later; and, unless its callee's peak is what it adds, its own result.
      const bool around = life.defined_at < at && life.last_read >= at;
      const bool own = !descends && life.defined_at == at;
      if (life.bytes > 0 && (around || own || instruction == nullptr)) {
        breakdown.live.push_back({life.buffer.defined_by, life.buffer.element, life.bytes});
      }
    }
    if (descends) Explain(*callee, /*parameters_own_bytes=*/false, breakdown);
    return scan.peak;
  }

 private:
  struct ScheduleScan {
    Schedule schedule;
    int64_t peak = 0;
    int64_t peak_position = -1;  // the first position at the peak; -1: none
  };

  ScheduleScan Scan(const Computation& computation, bool parameters_own_bytes) {
    std::optional<FusionPlan> plan;
    if (fusion_ == Fusion::kFused) plan.emplace(computation);
    ScheduleScan scan{
        BufferAssigner(computation, parameters_own_bytes, plan ? &*plan : nullptr).Assign()};
    const Schedule& schedule = scan.schedule;
    int64_t live = schedule.start_bytes;
    scan.peak = live;
    const auto& instructions = computation.instructions();
    for (size_t position = 0; position < instructions.size(); ++position) {
      const int64_t during =
          std::max(schedule.defined[position], CalledPeak(*instructions[position]));
      const int64_t total = SaturatingAdd(live, during);
      if (scan.peak_position < 0 || total > scan.peak) {
        scan.peak = total;
        scan.peak_position = static_cast<int64_t>(position);
      }
      // Once saturated, the live bytes stay "at least the maximum".
      const int64_t grown = SaturatingAdd(live, schedule.defined[position]);
      live = grown == kSaturated ? kSaturated : grown - schedule.freed[position];
    }
    return scan;
  }

  // The computation `instruction` runs whose peak CalledPeak takes; null for
  // an instruction that runs none.
  const Computation* PeakingCallee(const Instruction& instruction) {
    const Computation* peaking = nullptr;
    int64_t peak = 0;
    for (const Computation* callee : CalledForPeak(instruction)) {
      const int64_t callee_peak = CalleePeak(*callee);
      if (peaking == nullptr || callee_peak > peak) {
        peaking = callee;
        peak = callee_peak;
      }
    }
    return peaking;
  }

  static std::vector<Computation*> CalledForPeak(const Instruction& instruction) {
    switch (instruction.opcode()) {
      case Opcode::kWhile:
      case Opcode::kCall:
      case Opcode::kAsyncStart:
      case Opcode::kConditional:
        return instruction.called_computations();
      default:
        return {};
    }
  }

  // What running the computations `instruction` calls needs on top of what is
  // live around it (see the header): 0 for an instruction that runs none.
  int64_t CalledPeak(const Instruction& instruction) {
    int64_t peak = 0;
    for (const Computation* callee : CalledForPeak(instruction)) {
      peak = std::max(peak, CalleePeak(*callee));
    }
    return peak;
  }

  int64_t CalleePeak(const Computation& callee) {
    auto it = callee_peaks_.find(&callee);
    if (it != callee_peaks_.end()) return it->second;
    const int64_t peak = PeakOf(callee, /*parameters_own_bytes=*/false);
    callee_peaks_.emplace(&callee, peak);
    return peak;
  }

  const Fusion fusion_;
  std::unordered_map<const Computation*, int64_t> callee_peaks_;
};

}  // namespace

int64_t PeakLiveBytes(const ir::Module& module, Fusion fusion) {
  if (module.entry() == nullptr) return 0;
  return PeakModel(fusion).PeakOf(*module.entry(), /*parameters_own_bytes=*/true);
}

PeakBreakdown PeakLiveBreakdown(const ir::Module& module, Fusion fusion) {
  PeakBreakdown breakdown;
  if (module.entry() == nullptr) return breakdown;
  breakdown.peak_bytes =
      PeakModel(fusion).Explain(*module.entry(), /*parameters_own_bytes=*/true, breakdown);
  std::stable_sort(breakdown.live.begin(), breakdown.live.end(),
                   [](const LiveBuffer& a, const LiveBuffer& b) { return a.bytes > b.bytes; });
  return breakdown;
}

}  // namespace loom::analysis
