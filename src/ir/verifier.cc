#include "ir/verifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/attribute_names.h"
#include "ir/batch_norm.h"
#include "ir/collective_groups.h"
#include "ir/convolution.h"
#include "ir/gather_scatter.h"
#include "ir/linear_algebra.h"
#include "ir/literal.h"
#include "ir/random.h"
#include "ir/reduce_precision.h"
#include "ir/reduce_window.h"
#include "ir/shape_inference.h"
#include "ir/sort.h"
#include "support/saturating.h"

namespace loom::ir {
namespace {

// The most devices (and the largest device id + 1) Loom accepts. It bounds
// every per-device table the verifier builds, whatever the input says.
constexpr int64_t kMaxDevices = int64_t{1} << 20;

std::string Str(const Shape& shape) { return shape.ToString(/*print_layout=*/false); }
std::string Ref(const Instruction& instruction) { return "%" + instruction.name(); }
std::string Ref(const Computation& computation) { return "%" + computation.name(); }
std::string Operands(int64_t n) { return fmt::format("{} operand{}", n, n == 1 ? "" : "s"); }

// "%a -> %b -> %a"; a long cycle keeps its first steps and its end.
std::string JoinCycle(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  if (names.size() <= kShown + 2) return fmt::format("{}", fmt::join(names, " -> "));
  const std::vector<std::string> head(names.begin(), names.begin() + kShown);
  return fmt::format("{} -> ... ({} more) -> {}", fmt::join(head, " -> "),
                     names.size() - kShown - 1, names.back());
}

Error At(const Instruction& instruction, std::string_view message) {
  return Error{fmt::format("%{}: {}", instruction.name(), message), instruction.loc()};
}

bool IsScalar(const Shape& shape) { return shape.IsArray() && shape.rank() == 0; }

// Element types a reducer may mix, as XLA's shape inference allows: equal, or
// both floating point of different precision (bf16 data, f32 accumulator).
bool SameTypeIgnoringFpPrecision(PrimitiveType a, PrimitiveType b) {
  return a == b || (IsFloatingPoint(a) && IsFloatingPoint(b));
}

std::vector<const Shape*> OperandShapes(const Instruction& instruction, int64_t begin = 0,
                                        int64_t end = -1) {
  if (end < 0) end = instruction.operand_count();
  std::vector<const Shape*> shapes;
  for (int64_t i = begin; i < end; ++i) shapes.push_back(&instruction.operand(i)->shape());
  return shapes;
}

// What an async collective carries as its operand: the operand's shape, or
// the tuple of the operands' shapes when it has several.
Shape OperandSide(const Instruction& instruction) {
  if (instruction.operand_count() == 1) return instruction.operand(0)->shape();
  return InferTupleShape(OperandShapes(instruction));
}

// --- who takes part (XLA's CollectiveOpGroupMode) ----------------------------

// The group modes are ir/collective_groups.h's, so that the verifier, the
// executor and the passes read channel_id and use_global_device_ids alike.

// What the ids of a group mode number.
enum class IdSpace { kReplicas, kPartitions, kFlattened };

IdSpace IdSpaceOf(GroupMode mode) {
  switch (mode) {
    case GroupMode::kCrossReplica:
    case GroupMode::kCrossReplicaAndPartition:
      return IdSpace::kReplicas;
    case GroupMode::kCrossPartition:
      return IdSpace::kPartitions;
    case GroupMode::kFlattenedId:
      return IdSpace::kFlattened;
  }
  return IdSpace::kReplicas;
}

std::string_view IdSpaceNoun(IdSpace space) {
  switch (space) {
    case IdSpace::kReplicas:
      return "replicas";
    case IdSpace::kPartitions:
      return "partitions";
    case IdSpace::kFlattened:
      return "devices (replicas x partitions)";
  }
  return "devices";
}

bool UsesReplicaGroups(Opcode opcode) {
  switch (opcode) {
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectiveBroadcast:
    case Opcode::kRaggedAllToAll:
      return true;
    default:
      return false;
  }
}

bool UsesSourceTargetPairs(Opcode opcode) {
  return opcode == Opcode::kCollectivePermute || opcode == Opcode::kCollectivePermuteStart;
}

// Replica groups as lists of ids; `{}` (or no attribute) is `all_devices`.
struct ExpandedGroups {
  bool all_devices = true;
  std::vector<std::vector<int64_t>> groups;
};

Expected<ExpandedGroups> ExpandReplicaGroups(const Instruction& instruction) {
  ExpandedGroups expanded;
  const std::optional<ReplicaGroups>& attribute = instruction.attrs().replica_groups;
  if (!attribute || attribute->IsAllDevices()) return expanded;
  expanded.all_devices = false;
  if (!attribute->is_iota()) {
    expanded.groups = attribute->explicit_groups();
    return expanded;
  }
  // Bound the iota form before anything multiplies or expands it.
  const IotaReplicaGroups& iota = *attribute->iota();
  if (iota.num_groups <= 0 || iota.group_size <= 0) {
    return At(instruction, "iota replica groups need a positive group count and size");
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(iota.num_groups, iota.group_size, &total) || total > kMaxDevices) {
    return At(instruction, fmt::format("iota replica groups [{},{}] list more than the {} devices "
                                       "Loom supports",
                                       iota.num_groups, iota.group_size, kMaxDevices));
  }
  int64_t held = 1;
  for (int64_t dim : iota.reshape_dims) {
    if (dim <= 0) break;  // ValidateIota explains
    if (__builtin_mul_overflow(held, dim, &held) || held > kMaxDevices) {
      return At(instruction,
                fmt::format("iota replica groups [{},{}]: the reshape dimensions hold more than "
                            "{} ids",
                            iota.num_groups, iota.group_size, total));
    }
  }
  if (std::string problem = attribute->ValidateIota(); !problem.empty()) {
    return At(instruction, problem);
  }
  expanded.groups = attribute->Groups(total);
  return expanded;
}

// dimensions={d} of a collective, or -1.
int64_t SingleDimensionOrMinusOne(const Instruction& instruction) {
  const auto& dims = instruction.attrs().dimensions;
  return dims && dims->size() == 1 ? (*dims)[0] : -1;
}

// --- the verifier ----------------------------------------------------------------

// Device counts for the module: from the header where it gives them (a
// count of 1 is treated like an absent one, since XLA cannot tell the two
// apart either), otherwise inferred from the largest device id named.
struct DeviceCounts {
  int64_t replicas = 1;
  int64_t partitions = 1;
};

struct GroupSummary {
  bool all_devices = false;
  // Devices in a group; 0 for `{}` over a device count the header does not
  // give (the shapes tell it then, as in XLA).
  int64_t group_size = 0;
};

struct Reducer {
  std::vector<PrimitiveType> accumulators;  // parameters 0..N-1 and the result(s)
  std::vector<PrimitiveType> inputs;        // parameters N..2N-1
};

class ModuleVerifier {
 public:
  explicit ModuleVerifier(const Module& module) : module_(module) {}

  Expected<VerifyReport> Run();

 private:
  // Structure.
  Status VerifyHeader();
  Status VerifyComputationStructure(const Computation& computation);
  Status VerifyOneCompletionPerStart(const Computation& computation);
  Status VerifyParameterNumbers(const Computation& computation);
  Status VerifyReferences(const Computation& computation, const Instruction& instruction);
  Status VerifyCallGraphIsAcyclic();
  Status VerifyNoOperandCycle(const Computation& computation);
  Status VerifyDefinitionBeforeUse(const Computation& computation);

  // Device counts.
  void InferDeviceCounts();
  std::optional<int64_t> HeaderCount(IdSpace space) const;
  Expected<GroupSummary> VerifyReplicaGroups(const Instruction& instruction, GroupMode mode,
                                             bool uniform_size);
  Status VerifySourceTargetPairs(const Instruction& instruction, IdSpace space);

  // Instructions.
  Status VerifyInstruction(const Instruction& instruction);
  void WarnAboutUnknownAttributes(const std::vector<RawAttribute>& attributes, bool header);
  Status VerifyOperandCount(const Instruction& instruction);
  Status VerifyCompare(const Instruction& instruction);
  Status VerifyDynamicSlice(const Instruction& instruction);
  Status VerifyDynamicUpdateSlice(const Instruction& instruction);
  Status VerifyReduce(const Instruction& instruction);
  Status VerifyMap(const Instruction& instruction);
  Status VerifyWhile(const Instruction& instruction);
  Status VerifyConditional(const Instruction& instruction);
  Status VerifyCall(const Instruction& instruction);
  Status VerifyFusion(const Instruction& instruction);
  Status VerifyAfterAll(const Instruction& instruction);
  Status VerifyAllGather(const Instruction& instruction);
  Status VerifyAllGatherDone(const Instruction& instruction);
  Status VerifyReduceScatter(const Instruction& instruction);
  Status VerifyAllReduce(const Instruction& instruction);
  Status VerifyAllToAll(const Instruction& instruction);
  Status VerifyCollectivePermute(const Instruction& instruction);
  Status VerifyCollectivePermuteDone(const Instruction& instruction);
  Status VerifyCollectiveBroadcast(const Instruction& instruction);
  Status VerifyAsyncStart(const Instruction& instruction);
  Status VerifyAsyncUpdateOrDone(const Instruction& instruction);
  Status VerifyCopyStart(const Instruction& instruction);
  Status VerifyCopyDone(const Instruction& instruction);
  Status VerifyReduceWindow(const Instruction& instruction);
  Status VerifySelectAndScatter(const Instruction& instruction);
  Status VerifySort(const Instruction& instruction);
  Status VerifyTopK(const Instruction& instruction);
  Status VerifyRngBitGenerator(const Instruction& instruction);
  Status VerifyBatchNorm(const Instruction& instruction);
  Status VerifyTriangularSolve(const Instruction& instruction);
  Status VerifyCholesky(const Instruction& instruction);
  Status VerifyScatter(const Instruction& instruction);
  Status Trust(const Instruction& instruction);
  Status VerifyGather(const Instruction& instruction);
  Status VerifyConvolution(const Instruction& instruction);

  // Helpers.
  Expected<int64_t> ShardCountFromShapes(const Instruction& instruction, int64_t dimension,
                                         bool gather);
  Expected<Reducer> VerifyReducer(const Instruction& instruction, int64_t n);
  Status VerifyCollectiveReducer(const Instruction& instruction);
  // The callee's parameters must take `shapes` (`allow_fewer`: a fusion may
  // ignore trailing operands).
  Status ExpectCalleeParameters(const Instruction& caller, std::string_view role,
                                const Computation& callee, const std::vector<const Shape*>& shapes,
                                bool allow_fewer = false);
  // A computation's parameters by number, computed once: a small reducer may
  // be called from thousands of instructions.
  const std::vector<Instruction*>& ParametersOf(const Computation& computation);
  // The index of an instruction in its computation (known after the
  // structural checks; -1 otherwise).
  int64_t Position(const Instruction& instruction) const {
    auto it = position_.find(&instruction);
    return it == position_.end() ? -1 : it->second;
  }

  const Module& module_;
  DeviceCounts counts_;
  VerifyReport report_;
  std::unordered_set<const Computation*> computations_;
  // Every instruction's computation and index in it.
  std::unordered_map<const Instruction*, const Computation*> owner_;
  std::unordered_map<const Instruction*, int64_t> position_;
  std::unordered_map<const Computation*, std::vector<Instruction*>> parameters_;
};

const std::vector<Instruction*>& ModuleVerifier::ParametersOf(const Computation& computation) {
  auto [it, inserted] = parameters_.try_emplace(&computation);
  if (inserted) it->second = computation.parameters();
  return it->second;
}

// --- small checks shared by the instruction handlers ----------------------------

Status ExpectShape(const Instruction& instruction, const Shape& inferred) {
  if (instruction.shape().Compatible(inferred)) return OkStatus();
  return At(instruction, fmt::format("declared shape {} but {} infers {}", Str(instruction.shape()),
                                     OpcodeName(instruction.opcode()), Str(inferred)));
}

// Compares the declared shape with an inference result, prefixing the
// inference's error with the instruction's name.
Status ExpectInferred(const Instruction& instruction, const Expected<Shape>& inferred) {
  if (!inferred.ok()) return At(instruction, inferred.error().message);
  return ExpectShape(instruction, *inferred);
}

Expected<Shape> Located(const Instruction& instruction, Expected<Shape> inferred) {
  if (!inferred.ok()) return At(instruction, inferred.error().message);
  return inferred;
}

template <typename T>
Expected<T> RequireAttribute(const Instruction& instruction, const std::optional<T>& attribute,
                             std::string_view spelling) {
  if (attribute) return *attribute;
  return At(instruction, fmt::format("{} needs {}", OpcodeName(instruction.opcode()), spelling));
}

Expected<int64_t> RequireSingleDimension(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(
      const std::vector<int64_t> dims,
      RequireAttribute(instruction, instruction.attrs().dimensions, "dimensions={d}"));
  if (dims.size() != 1) {
    return At(instruction, fmt::format("{} takes exactly one dimension, got dimensions={{{}}}",
                                       OpcodeName(instruction.opcode()), fmt::join(dims, ",")));
  }
  return dims[0];
}

const CalledAttribute* FindCalled(const Instruction& instruction, std::string_view key) {
  for (const CalledAttribute& attribute : instruction.attrs().called) {
    if (attribute.key == key) return &attribute;
  }
  return nullptr;
}

// The one computation named by `key`; the structural checks already made
// sure every named computation exists.
Expected<const Computation*> RequireCalled(const Instruction& instruction, std::string_view key) {
  const CalledAttribute* attribute = FindCalled(instruction, key);
  if (!attribute) {
    return At(instruction, fmt::format("{} needs {}=", OpcodeName(instruction.opcode()), key));
  }
  if (attribute->computations.size() != 1 || !attribute->computations[0]) {
    return At(instruction, fmt::format("{} must name exactly one computation", key));
  }
  return attribute->computations[0];
}

Status ExpectOperandOpcode(const Instruction& instruction, std::initializer_list<Opcode> allowed) {
  const Instruction& operand = *instruction.operand(0);
  for (Opcode opcode : allowed) {
    if (operand.opcode() == opcode) return OkStatus();
  }
  std::vector<std::string_view> names;
  for (Opcode opcode : allowed) names.push_back(OpcodeName(opcode));
  return At(instruction, fmt::format("the operand {} must be {}, not {}", Ref(operand),
                                     fmt::join(names, " or "), OpcodeName(operand.opcode())));
}

Status ModuleVerifier::ExpectCalleeParameters(const Instruction& caller, std::string_view role,
                                              const Computation& callee,
                                              const std::vector<const Shape*>& shapes,
                                              bool allow_fewer) {
  const std::vector<Instruction*>& params = ParametersOf(callee);
  const bool count_ok =
      params.size() == shapes.size() || (allow_fewer && params.size() < shapes.size());
  if (!count_ok) {
    return At(caller,
              fmt::format("{} {} takes {} parameter{}, but {} passes {}", role, Ref(callee),
                          params.size(), params.size() == 1 ? "" : "s", OpcodeName(caller.opcode()),
                          Operands(static_cast<int64_t>(shapes.size()))));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] && !params[i]->shape().Compatible(*shapes[i])) {
      return At(caller,
                fmt::format("{} {} parameter {} is {}, but {} passes {}", role, Ref(callee), i,
                            Str(params[i]->shape()), OpcodeName(caller.opcode()), Str(*shapes[i])));
    }
  }
  return OkStatus();
}

Status ExpectCalleeResult(const Instruction& caller, std::string_view role,
                          const Computation& callee, const Shape& expected) {
  const Shape& result = callee.root()->shape();
  if (result.Compatible(expected)) return OkStatus();
  return At(caller, fmt::format("{} {} returns {}, but {} is {}", role, Ref(callee), Str(result),
                                Ref(caller), Str(expected)));
}

// The declared shape of result `i` of an all-gather(-start) or
// reduce-scatter: the whole shape, or element i of a tuple; an
// all-gather-start's shape is (operands, results) or, in some GPU dumps, the
// results alone. nullptr where the declared shape has no such element.
const Shape* DeclaredCollectiveResult(const Instruction& instruction, int64_t i) {
  const Shape* shape = &instruction.shape();
  if (instruction.opcode() == Opcode::kAllGatherStart && shape->IsTuple() &&
      shape->tuple_size() == 2 && shape->tuple_element(0).Compatible(OperandSide(instruction))) {
    shape = &shape->tuple_element(1);
  }
  if (instruction.operand_count() == 1) return shape;
  if (!shape->IsTuple() || i >= shape->tuple_size()) return nullptr;
  return &shape->tuple_element(i);
}

// The group size an all-gather or reduce-scatter with `{}` groups implies
// for the device-count inference, or 0.
int64_t ImpliedGroupSize(const Instruction& instruction) {
  if (instruction.opcode() == Opcode::kAllToAll) {
    return instruction.attrs().dimensions ? 0 : std::min(instruction.operand_count(), kMaxDevices);
  }
  const bool gather =
      instruction.opcode() == Opcode::kAllGather || instruction.opcode() == Opcode::kAllGatherStart;
  if (!gather && instruction.opcode() != Opcode::kReduceScatter) return 0;
  const int64_t d = SingleDimensionOrMinusOne(instruction);
  const Shape* result = DeclaredCollectiveResult(instruction, 0);
  if (instruction.operand_count() < 1 || !result) return 0;
  const Shape& operand = instruction.operand(0)->shape();
  if (!operand.IsArray() || !result->IsArray() || d < 0 || d >= operand.rank() ||
      d >= result->rank()) {
    return 0;
  }
  const int64_t big = gather ? result->dim(d) : operand.dim(d);
  const int64_t small = gather ? operand.dim(d) : result->dim(d);
  if (small <= 0 || big % small != 0 || big / small > kMaxDevices) return 0;
  return big / small;
}

// --- structure --------------------------------------------------------------------

Status ModuleVerifier::VerifyHeader() {
  WarnAboutUnknownAttributes(module_.header_attributes(), /*header=*/true);
  for (const auto& [count, key] : {std::pair{module_.num_partitions(), "num_partitions"},
                                   std::pair{module_.replica_count(), "replica_count"}}) {
    if (count && (*count < 1 || *count > kMaxDevices)) {
      return Error{fmt::format("{}={} is outside [1, {}], the device counts Loom supports", key,
                               *count, kMaxDevices),
                   module_.loc()};
    }
  }
  for (const auto& computation : module_.computations()) {
    if (!computation) return Error{"the module holds a null computation", {}};
    computations_.insert(computation.get());
  }
  if (!module_.entry()) return Error{"the module has no entry computation", {}};
  if (!computations_.count(module_.entry())) {
    return Error{fmt::format("the entry computation {} is not one of the module's computations",
                             Ref(*module_.entry())),
                 {}};
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyComputationStructure(const Computation& computation) {
  if (computation.instructions().empty() || !computation.root()) {
    return Error{fmt::format("computation {} has no root instruction", Ref(computation)),
                 computation.loc()};
  }
  std::unordered_set<std::string_view> names;
  for (int64_t i = 0; i < computation.instruction_count(); ++i) {
    const Instruction* instruction = computation.instructions()[static_cast<size_t>(i)].get();
    if (!instruction) {
      return Error{fmt::format("computation {} holds a null instruction", Ref(computation)),
                   computation.loc()};
    }
    if (!names.insert(instruction->name()).second) {
      return At(*instruction,
                fmt::format("the name is used twice in computation {}", Ref(computation)));
    }
    owner_[instruction] = &computation;
    position_[instruction] = i;
  }
  if (owner_.find(computation.root()) == owner_.end() ||
      owner_[computation.root()] != &computation) {
    return Error{
        fmt::format("the root of computation {} is not one of its instructions", Ref(computation)),
        computation.loc()};
  }
  LOOM_RETURN_IF_ERROR(VerifyParameterNumbers(computation));
  for (const auto& instruction : computation.instructions()) {
    if (Status valid = ValidateShape(instruction->shape()); !valid.ok()) {
      return At(*instruction, valid.error().message);
    }
    LOOM_RETURN_IF_ERROR(VerifyReferences(computation, *instruction));
  }
  return VerifyOneCompletionPerStart(computation);
}

// A start (or an async-update) goes on to exactly one update or done: a
// second would wait for a transfer that is already over, or complete it
// twice.
Status ModuleVerifier::VerifyOneCompletionPerStart(const Computation& computation) {
  std::unordered_map<const Instruction*, const Instruction*> completed_by;
  for (const auto& instruction : computation.instructions()) {
    const Opcode opcode = instruction->opcode();
    if (!IsAsyncDone(opcode) && opcode != Opcode::kAsyncUpdate) continue;
    if (instruction->operand_count() != 1) continue;  // the arity check reports it
    const Instruction* start = instruction->operand(0);
    auto [it, first] = completed_by.emplace(start, instruction.get());
    if (!first) {
      return At(*instruction,
                fmt::format("{} is already completed by {}", Ref(*start), Ref(*it->second)));
    }
  }
  return OkStatus();
}

// Parameter numbers must be exactly 0..n-1: none twice (reported at the
// second parameter), none missing (reported at the computation).
Status ModuleVerifier::VerifyParameterNumbers(const Computation& computation) {
  std::vector<const Instruction*> parameters;
  for (const auto& instruction : computation.instructions()) {
    if (instruction->opcode() == Opcode::kParameter) parameters.push_back(instruction.get());
  }
  const int64_t count = static_cast<int64_t>(parameters.size());
  std::vector<const Instruction*> by_number(parameters.size(), nullptr);
  std::unordered_map<int64_t, const Instruction*> out_of_range;
  for (const Instruction* parameter : parameters) {
    const std::optional<int64_t> number = parameter->parameter_number();
    if (!number) return At(*parameter, "parameter has no number");
    const Instruction** slot = nullptr;
    if (*number >= 0 && *number < count) {
      slot = &by_number[static_cast<size_t>(*number)];
    } else {
      slot = &out_of_range[*number];
    }
    if (*slot) {
      return At(*parameter,
                fmt::format("parameter number {} is already used by {}", *number, Ref(**slot)));
    }
    *slot = parameter;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (!by_number[static_cast<size_t>(i)]) {
      return Error{fmt::format("computation {} has no parameter {}: its {} parameter{} must be "
                               "numbered 0 to {}",
                               Ref(computation), i, count, count == 1 ? "" : "s", count - 1),
                   computation.loc()};
    }
  }
  return OkStatus();
}

// Operands and control predecessors are instructions of the same
// computation; called computations belong to the module.
Status ModuleVerifier::VerifyReferences(const Computation& computation,
                                        const Instruction& instruction) {
  for (int64_t i = 0; i < instruction.operand_count(); ++i) {
    const Instruction* operand = instruction.operand(i);
    if (!operand) return At(instruction, fmt::format("operand {} is missing", i));
    auto it = owner_.find(operand);
    if (it == owner_.end() || it->second != &computation) {
      return At(instruction, fmt::format("operand {} is not an instruction of computation {}",
                                         Ref(*operand), Ref(computation)));
    }
  }
  for (const Instruction* predecessor : instruction.attrs().control_predecessors) {
    if (!predecessor) return At(instruction, "a control predecessor is missing");
    auto it = owner_.find(predecessor);
    if (it == owner_.end() || it->second != &computation) {
      return At(instruction,
                fmt::format("control predecessor {} is not an instruction of computation {}",
                            Ref(*predecessor), Ref(computation)));
    }
  }
  for (const CalledAttribute& attribute : instruction.attrs().called) {
    for (const Computation* callee : attribute.computations) {
      if (!callee) {
        return At(instruction,
                  fmt::format("{} names a computation that does not exist", attribute.key));
      }
      if (!computations_.count(callee)) {
        return At(instruction, fmt::format("{} names {}, which is not part of the module",
                                           attribute.key, Ref(*callee)));
      }
    }
  }
  return OkStatus();
}

// A computation may not call itself, directly or through others, and calls
// may nest at most kMaxCallDepth computations deep (every tool that walks
// into callees can then rely on that bound). Iterative depth-first search:
// call chains in hostile input can be long.
Status ModuleVerifier::VerifyCallGraphIsAcyclic() {
  enum Color : uint8_t { kNew, kOnPath, kDone };
  std::unordered_map<const Computation*, Color> color;
  // The most computations on a chain of calls starting at each one (itself
  // included), and its instructions with every call inlined (saturating),
  // known once it is done.
  std::unordered_map<const Computation*, int64_t> height;
  std::unordered_map<const Computation*, int64_t> inlined;
  struct Frame {
    const Computation* computation;
    std::vector<const Computation*> callees;
    size_t next = 0;
  };
  auto make_frame = [](const Computation* computation) {
    Frame frame{computation, {}, 0};
    for (const auto& instruction : computation->instructions()) {
      for (const Computation* callee : instruction->called_computations()) {
        frame.callees.push_back(callee);
      }
    }
    return frame;
  };
  for (const auto& start : module_.computations()) {
    if (color[start.get()] != kNew) continue;
    std::vector<Frame> path;
    path.push_back(make_frame(start.get()));
    color[start.get()] = kOnPath;
    while (!path.empty()) {
      Frame& frame = path.back();
      if (frame.next == frame.callees.size()) {
        int64_t tallest = 0;
        for (const Computation* callee : frame.callees) tallest = std::max(tallest, height[callee]);
        if (tallest + 1 > kMaxCallDepth) {
          return Error{fmt::format("calls nest more than {} computations deep below {}",
                                   kMaxCallDepth, Ref(*frame.computation)),
                       frame.computation->loc()};
        }
        height[frame.computation] = tallest + 1;
        int64_t size = static_cast<int64_t>(frame.computation->instructions().size());
        for (const Computation* callee : frame.callees) size = SaturatingAdd(size, inlined[callee]);
        if (size > kMaxInlinedInstructions) {
          return Error{
              fmt::format("{} runs more than {} instructions with its calls inlined ({}{}): "
                          "more than Loom walks",
                          Ref(*frame.computation), kMaxInlinedInstructions,
                          size == kSaturated ? "at least " : "", size),
              frame.computation->loc()};
        }
        inlined[frame.computation] = size;
        color[frame.computation] = kDone;
        path.pop_back();
        continue;
      }
      const Computation* callee = frame.callees[frame.next++];
      if (color[callee] == kNew) {
        color[callee] = kOnPath;
        path.push_back(make_frame(callee));
      } else if (color[callee] == kOnPath) {
        std::vector<std::string> names;
        bool in_cycle = false;
        for (const Frame& on_path : path) {
          in_cycle = in_cycle || on_path.computation == callee;
          if (in_cycle) names.push_back(Ref(*on_path.computation));
        }
        names.push_back(Ref(*callee));
        return Error{"call cycle: " + JoinCycle(names), callee->loc()};
      }
    }
  }
  return OkStatus();
}

// Operands and control predecessors must not form a cycle. An iterative
// depth-first search, since a chain of 10^4 instructions must not exhaust
// the stack. "operand cycle: %a -> %b -> %a" reads "%a uses %b, which uses %a".
Status ModuleVerifier::VerifyNoOperandCycle(const Computation& computation) {
  const auto& instructions = computation.instructions();
  enum Color : uint8_t { kNew, kOnPath, kDone };
  std::vector<Color> color(instructions.size(), kNew);
  struct Frame {
    int64_t node;
    size_t next_edge;
  };
  auto edge = [&](const Instruction& instruction, size_t i) -> int64_t {
    const size_t operands = static_cast<size_t>(instruction.operand_count());
    const Instruction* target = i < operands
                                    ? instruction.operand(static_cast<int64_t>(i))
                                    : instruction.attrs().control_predecessors[i - operands];
    auto it = position_.find(target);  // present: VerifyReferences checked
    return it == position_.end() ? -1 : it->second;
  };
  auto edge_count = [](const Instruction& instruction) {
    return static_cast<size_t>(instruction.operand_count()) +
           instruction.attrs().control_predecessors.size();
  };
  std::vector<Frame> path;
  for (size_t start = 0; start < instructions.size(); ++start) {
    if (color[start] != kNew) continue;
    color[start] = kOnPath;
    path.push_back({static_cast<int64_t>(start), 0});
    while (!path.empty()) {
      Frame& frame = path.back();
      const Instruction& instruction = *instructions[static_cast<size_t>(frame.node)];
      if (frame.next_edge == edge_count(instruction)) {
        color[static_cast<size_t>(frame.node)] = kDone;
        path.pop_back();
        continue;
      }
      const int64_t target = edge(instruction, frame.next_edge++);
      if (target < 0) continue;
      if (color[static_cast<size_t>(target)] == kNew) {
        color[static_cast<size_t>(target)] = kOnPath;
        path.push_back({target, 0});  // invalidates `frame`, which is not used again
      } else if (color[static_cast<size_t>(target)] == kOnPath) {
        std::vector<std::string> names;
        bool in_cycle = false;
        for (const Frame& on_path : path) {
          in_cycle = in_cycle || on_path.node == target;
          if (in_cycle) names.push_back(Ref(*instructions[static_cast<size_t>(on_path.node)]));
        }
        const Instruction& first = *instructions[static_cast<size_t>(target)];
        names.push_back(Ref(first));
        return Error{"operand cycle: " + JoinCycle(names), first.loc()};
      }
    }
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyDefinitionBeforeUse(const Computation& computation) {
  for (const auto& instruction : computation.instructions()) {
    const int64_t position = Position(*instruction);
    for (const Instruction* operand : instruction->operands()) {
      if (Position(*operand) > position) {
        return At(*instruction,
                  fmt::format("operand {} is used before its definition", Ref(*operand)));
      }
    }
    for (const Instruction* predecessor : instruction->attrs().control_predecessors) {
      if (Position(*predecessor) > position) {
        return At(*instruction, fmt::format("control predecessor {} is used before its definition",
                                            Ref(*predecessor)));
      }
    }
  }
  return OkStatus();
}

// --- device counts -------------------------------------------------------------

// The device count of an id space as XLA's verifier sees it: the header's
// counts, 1 where absent (XLA's default, and XLA prints neither count when it
// is 1). A count of 1 means "not set" to XLA, which then skips its checks;
// Loom does the same and infers the count instead: nullopt.
std::optional<int64_t> ModuleVerifier::HeaderCount(IdSpace space) const {
  const int64_t replicas = module_.replica_count().value_or(1);
  const int64_t partitions = module_.num_partitions().value_or(1);
  int64_t count = 1;
  switch (space) {
    case IdSpace::kReplicas:
      count = replicas;
      break;
    case IdSpace::kPartitions:
      count = partitions;
      break;
    case IdSpace::kFlattened:
      count = replicas * partitions;  // both <= kMaxDevices: no overflow
      break;
  }
  if (count > 1) return count;
  return std::nullopt;
}

// Lower bounds on the device counts from every id the module names (and the
// group sizes that `{}` groups imply); the header's counts win where it
// gives them. Problems are left to the per-instruction checks.
void ModuleVerifier::InferDeviceCounts() {
  int64_t needed[3] = {1, 1, 1};  // indexed by IdSpace
  auto note = [&](IdSpace space, int64_t count) {
    int64_t& bound = needed[static_cast<int>(space)];
    bound = std::max(bound, count);
  };
  auto note_id = [&](IdSpace space, int64_t id) {
    if (id >= 0 && id < kMaxDevices) note(space, id + 1);
  };
  for (const auto& computation : module_.computations()) {
    for (const auto& owned : computation->instructions()) {
      const Instruction& instruction = *owned;
      const Opcode opcode = instruction.opcode();
      if (!UsesReplicaGroups(opcode) && !UsesSourceTargetPairs(opcode)) continue;
      const Expected<GroupMode> mode = CollectiveGroupMode(instruction);
      if (!mode.ok()) continue;
      const IdSpace space = IdSpaceOf(*mode);
      const Attributes& attrs = instruction.attrs();
      if (UsesSourceTargetPairs(opcode)) {
        for (const auto& [source, target] :
             attrs.source_target_pairs.value_or(std::vector<std::pair<int64_t, int64_t>>{})) {
          note_id(space, source);
          note_id(space, target);
        }
        continue;
      }
      if (!attrs.replica_groups || attrs.replica_groups->IsAllDevices()) {
        // A cross-replica-and-partition group of all devices spans replicas
        // x partitions.
        note(*mode == GroupMode::kCrossReplicaAndPartition ? IdSpace::kFlattened : space,
             ImpliedGroupSize(instruction));
      } else if (attrs.replica_groups->is_iota()) {
        const IotaReplicaGroups& iota = *attrs.replica_groups->iota();
        int64_t total = 0;
        if (iota.num_groups > 0 && iota.group_size > 0 &&
            !__builtin_mul_overflow(iota.num_groups, iota.group_size, &total) &&
            total <= kMaxDevices) {
          note(space, total);
        }
      } else {
        for (const auto& group : attrs.replica_groups->explicit_groups()) {
          for (int64_t id : group) note_id(space, id);
        }
      }
    }
  }
  const auto fixed = [](std::optional<int64_t> count) { return count && *count > 1; };
  const bool fixed_replicas = fixed(module_.replica_count());
  const bool fixed_partitions = fixed(module_.num_partitions());
  counts_.replicas =
      fixed_replicas ? *module_.replica_count() : needed[static_cast<int>(IdSpace::kReplicas)];
  counts_.partitions =
      fixed_partitions ? *module_.num_partitions() : needed[static_cast<int>(IdSpace::kPartitions)];
  // Flattened ids number replicas x partitions; grow whichever count is free.
  const int64_t flattened = needed[static_cast<int>(IdSpace::kFlattened)];
  if (counts_.replicas * counts_.partitions < flattened) {
    if (!fixed_partitions) {
      counts_.partitions = (flattened + counts_.replicas - 1) / counts_.replicas;
    } else if (!fixed_replicas) {
      counts_.replicas = (flattened + counts_.partitions - 1) / counts_.partitions;
    }
  }
  report_.replica_count = counts_.replicas;
  report_.partition_count = counts_.partitions;
}

// XLA's rules: no group is empty; the groups name every id 0..n-1 exactly
// once; n is the device count where the header gives it; all groups have one
// size (except for all-reduce); flattened ids need explicit groups. The
// summary's group size counts devices, as XLA's GetSubgroupSize does.
Expected<GroupSummary> ModuleVerifier::VerifyReplicaGroups(const Instruction& instruction,
                                                           GroupMode mode, bool uniform_size) {
  LOOM_ASSIGN_OR_RETURN(const ExpandedGroups expanded, ExpandReplicaGroups(instruction));
  const IdSpace space = IdSpaceOf(mode);
  const std::optional<int64_t> header_count = HeaderCount(space);
  // A cross-replica-and-partition group holds its replicas in every partition.
  const int64_t partitions_spanned =
      mode == GroupMode::kCrossReplicaAndPartition ? module_.num_partitions().value_or(1) : 1;
  if (expanded.all_devices) {
    if (mode == GroupMode::kFlattenedId) {
      return At(instruction, "use_global_device_ids=true needs explicit replica_groups");
    }
    const int64_t devices = header_count.value_or(1) * partitions_spanned;
    return GroupSummary{true, devices > 1 ? devices : 0};
  }
  std::vector<int64_t> ids;
  for (size_t g = 0; g < expanded.groups.size(); ++g) {
    const std::vector<int64_t>& group = expanded.groups[g];
    if (group.empty()) return At(instruction, fmt::format("replica group {} is empty", g));
    if (uniform_size && group.size() != expanded.groups[0].size()) {
      return At(instruction, fmt::format("replica groups have different sizes: group 0 has {} "
                                         "devices, group {} has {}",
                                         expanded.groups[0].size(), g, group.size()));
    }
    for (int64_t id : group) {
      if (id < 0) {
        return At(instruction, fmt::format("replica_groups name the negative device id {}", id));
      }
      if (id >= kMaxDevices) {
        return At(instruction, fmt::format("device id {} exceeds the {} devices Loom supports", id,
                                           kMaxDevices));
      }
      ids.push_back(id);
    }
  }
  std::sort(ids.begin(), ids.end());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0 && ids[i] == ids[i - 1]) {
      return At(instruction,
                fmt::format("device {} appears more than once in replica_groups", ids[i]));
    }
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  if (header_count && ids.back() >= *header_count) {
    return At(instruction, fmt::format("device {} in replica_groups is out of range: the module "
                                       "has {} {}",
                                       ids.back(), *header_count, IdSpaceNoun(space)));
  }
  if (ids.back() != n - 1) {  // sorted, distinct and non-negative: some id is too large
    int64_t missing = 0;
    while (ids[static_cast<size_t>(missing)] == missing) ++missing;
    return At(instruction, fmt::format("device {} in replica_groups is out of range: {} devices "
                                       "must be numbered 0 to {}, and device {} is missing",
                                       ids.back(), n, n - 1, missing));
  }
  if (header_count && n != *header_count) {
    return At(instruction, fmt::format("replica_groups name {} of the module's {} {}", n,
                                       *header_count, IdSpaceNoun(space)));
  }
  return GroupSummary{false, static_cast<int64_t>(expanded.groups[0].size()) * partitions_spanned};
}

// Ids in range; no device sends twice or receives twice.
Status ModuleVerifier::VerifySourceTargetPairs(const Instruction& instruction, IdSpace space) {
  const auto& pairs = instruction.attrs().source_target_pairs;
  if (!pairs) return OkStatus();
  const std::optional<int64_t> header_count = HeaderCount(space);
  std::unordered_set<int64_t> sources;
  std::unordered_set<int64_t> targets;
  for (const auto& [source, target] : *pairs) {
    for (const auto& [id, role] : {std::pair{source, "source"}, std::pair{target, "target"}}) {
      if (id < 0) {
        return At(instruction, fmt::format("{} {} in source_target_pairs is negative", role, id));
      }
      if (id >= kMaxDevices) {
        return At(instruction, fmt::format("{} {} in source_target_pairs exceeds the {} devices "
                                           "Loom supports",
                                           role, id, kMaxDevices));
      }
      if (header_count && id >= *header_count) {
        return At(instruction, fmt::format("{} {} in source_target_pairs is out of range: the "
                                           "module has {} {}",
                                           role, id, *header_count, IdSpaceNoun(space)));
      }
    }
    if (!sources.insert(source).second) {
      return At(instruction,
                fmt::format("source {} appears more than once in source_target_pairs", source));
    }
    if (!targets.insert(target).second) {
      return At(instruction,
                fmt::format("target {} appears more than once in source_target_pairs", target));
    }
  }
  return OkStatus();
}

// --- instructions ----------------------------------------------------------------

// How many operands an opcode takes: {min, max}, max < 0 for "no limit".
// nullopt for the ops Loom trusts, and for those whose count depends on more
// than the opcode (checked by their handlers too).
struct Arity {
  int64_t min;
  int64_t max;
};

std::optional<Arity> ExpectedArity(const Instruction& instruction) {
  const Opcode opcode = instruction.opcode();
  if (IsElementwiseUnary(opcode)) return Arity{1, 1};
  if (IsElementwiseBinary(opcode)) return Arity{2, 2};
  switch (opcode) {
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kIota:
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
      return Arity{0, 0};
    case Opcode::kBroadcast:
    case Opcode::kReshape:
    case Opcode::kBitcast:
    case Opcode::kTranspose:
    case Opcode::kReverse:
    case Opcode::kSlice:
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kGetTupleElement:
    case Opcode::kOptimizationBarrier:
    case Opcode::kGetDimensionSize:
    case Opcode::kDomain:
    case Opcode::kWhile:
    case Opcode::kAllGatherDone:
    case Opcode::kAllReduceDone:
    case Opcode::kCollectivePermuteDone:
    case Opcode::kAsyncUpdate:
    case Opcode::kAsyncDone:
    case Opcode::kCopyStart:
    case Opcode::kCopyDone:
    case Opcode::kCholesky:
      return Arity{1, 1};
    case Opcode::kCompare:
    case Opcode::kPad:
    case Opcode::kTriangularSolve:
    case Opcode::kStochasticConvert:
    case Opcode::kAddDependency:
      return Arity{2, 2};
    case Opcode::kDot:
      if (instruction.attrs().FindRaw("sparsity")) return std::nullopt;  // + metadata operands
      return Arity{2, 2};
    case Opcode::kSelect:
    case Opcode::kClamp:
      return Arity{3, 3};
    case Opcode::kDynamicSlice:
    case Opcode::kConcatenate:
    case Opcode::kMap:
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
    case Opcode::kReduceScatter:
    case Opcode::kAllToAll:
    case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
    case Opcode::kCollectiveBroadcast:
      return Arity{1, -1};
    case Opcode::kDynamicUpdateSlice:
    case Opcode::kReduce:
    case Opcode::kConditional:
      return Arity{2, -1};
    case Opcode::kTuple:
    case Opcode::kCall:
    case Opcode::kFusion:
    case Opcode::kAfterAll:
    case Opcode::kAsyncStart:
      return Arity{0, -1};
    default:
      return std::nullopt;
  }
}

Status ModuleVerifier::VerifyOperandCount(const Instruction& instruction) {
  const std::optional<Arity> arity = ExpectedArity(instruction);
  if (!arity) return OkStatus();
  const int64_t count = instruction.operand_count();
  if (count >= arity->min && (arity->max < 0 || count <= arity->max)) return OkStatus();
  const std::string_view name = OpcodeName(instruction.opcode());
  if (arity->min == arity->max) {
    return At(instruction, fmt::format("{} takes {}, got {}", name, Operands(arity->min), count));
  }
  return At(instruction,
            fmt::format("{} takes at least {}, got {}", name, Operands(arity->min), count));
}

Status ModuleVerifier::Trust(const Instruction& instruction) {
  report_.trusted.push_back(fmt::format("{}: {} (shape trusted as declared)", Ref(instruction),
                                        OpcodeName(instruction.opcode())));
  return OkStatus();
}

// Attributes XLA does not define are kept verbatim and ignored: say so, as
// they are most often misspellings of one Loom would have read.
void ModuleVerifier::WarnAboutUnknownAttributes(const std::vector<RawAttribute>& attributes,
                                                bool header) {
  for (const RawAttribute& attribute : attributes) {
    if (header ? IsXlaHeaderAttribute(attribute.key) : IsXlaInstructionAttribute(attribute.key)) {
      continue;
    }
    report_.warnings.push_back(
        {fmt::format("{}attribute '{}' is not one XLA's HLO defines: kept as written, and "
                     "ignored",
                     header ? "module " : "", attribute.key),
         attribute.loc});
  }
}

Status ModuleVerifier::VerifyInstruction(const Instruction& instruction) {
  WarnAboutUnknownAttributes(instruction.attrs().raw, /*header=*/false);
  LOOM_RETURN_IF_ERROR(VerifyOperandCount(instruction));
  const Opcode opcode = instruction.opcode();
  const Attributes& attrs = instruction.attrs();
  const Shape& declared = instruction.shape();
  auto operand = [&](int64_t i) -> const Shape& { return instruction.operand(i)->shape(); };
  if (opcode == Opcode::kReducePrecision) {
    LOOM_RETURN_IF_ERROR(ReducePrecisionOf(instruction).status());
  }
  if (IsElementwiseUnary(opcode)) {
    return ExpectInferred(instruction, InferElementwiseUnaryShape(opcode, operand(0)));
  }
  if (IsElementwiseBinary(opcode)) {
    return ExpectInferred(instruction, InferElementwiseBinaryShape(opcode, operand(0), operand(1)));
  }
  switch (opcode) {
    case Opcode::kParameter:  // the parser checks declared signatures
      return OkStatus();
    case Opcode::kConstant: {  // its shape is the declared one; the literal must fill it
      Expected<LiteralForm> literal = ReadLiteral(instruction.literal(), declared);
      if (!literal.ok()) return At(instruction, literal.error().message);
      return OkStatus();
    }
    case Opcode::kCompare:
      return VerifyCompare(instruction);
    case Opcode::kSelect:
      return ExpectInferred(instruction, InferSelectShape(operand(0), operand(1), operand(2)));
    case Opcode::kClamp:
      return ExpectInferred(instruction, InferClampShape(operand(0), operand(1), operand(2)));
    case Opcode::kBroadcast:
      return ExpectInferred(instruction,
                            InferBroadcastShape(operand(0), declared,
                                                attrs.dimensions.value_or(std::vector<int64_t>{})));
    case Opcode::kReshape:
      return ExpectInferred(instruction, InferReshapeShape(operand(0), declared));
    case Opcode::kBitcast:
      return ExpectInferred(instruction, InferBitcastShape(operand(0), declared));
    case Opcode::kTranspose: {
      LOOM_ASSIGN_OR_RETURN(const auto permutation,
                            RequireAttribute(instruction, attrs.dimensions, "dimensions={...}"));
      return ExpectInferred(instruction, InferTransposeShape(operand(0), permutation));
    }
    case Opcode::kReverse: {
      LOOM_ASSIGN_OR_RETURN(const auto dims,
                            RequireAttribute(instruction, attrs.dimensions, "dimensions={...}"));
      return ExpectInferred(instruction, InferReverseShape(operand(0), dims));
    }
    case Opcode::kSlice: {
      LOOM_ASSIGN_OR_RETURN(const auto slice,
                            RequireAttribute(instruction, attrs.slice, "slice={...}"));
      return ExpectInferred(instruction, InferSliceShape(operand(0), slice));
    }
    case Opcode::kDynamicSlice:
      return VerifyDynamicSlice(instruction);
    case Opcode::kDynamicUpdateSlice:
      return VerifyDynamicUpdateSlice(instruction);
    case Opcode::kConcatenate: {
      LOOM_ASSIGN_OR_RETURN(const int64_t dimension, RequireSingleDimension(instruction));
      return ExpectInferred(instruction,
                            InferConcatenateShape(OperandShapes(instruction), dimension));
    }
    case Opcode::kPad: {
      LOOM_ASSIGN_OR_RETURN(const auto padding,
                            RequireAttribute(instruction, attrs.padding, "padding=..."));
      return ExpectInferred(instruction, InferPadShape(operand(0), operand(1), padding));
    }
    case Opcode::kReduce:
      return VerifyReduce(instruction);
    case Opcode::kDot:
      if (attrs.FindRaw("sparsity")) return Trust(instruction);
      return ExpectInferred(
          instruction, InferDotShape(operand(0), operand(1), attrs.dot.value_or(DotDimensions{}),
                                     declared.type()));
    case Opcode::kConvert:
      return ExpectInferred(instruction, InferConvertShape(operand(0), declared.type()));
    case Opcode::kBitcastConvert:
      return ExpectInferred(instruction, InferBitcastConvertShape(operand(0), declared.type()));
    case Opcode::kStochasticConvert:
      return ExpectInferred(instruction,
                            InferStochasticConvertShape(operand(0), operand(1), declared.type()));
    case Opcode::kIota: {
      LOOM_ASSIGN_OR_RETURN(const int64_t dimension,
                            RequireAttribute(instruction, attrs.iota_dimension, "iota_dimension="));
      return ExpectInferred(instruction, InferIotaShape(declared, dimension));
    }
    case Opcode::kGetTupleElement: {
      LOOM_ASSIGN_OR_RETURN(const int64_t index,
                            RequireAttribute(instruction, attrs.tuple_index, "index="));
      return ExpectInferred(instruction, InferGetTupleElementShape(operand(0), index));
    }
    case Opcode::kTuple:
      return ExpectShape(instruction, InferTupleShape(OperandShapes(instruction)));
    case Opcode::kOptimizationBarrier:
    case Opcode::kDomain:
      return ExpectShape(instruction, operand(0));
    case Opcode::kAddDependency:
      if (!operand(1).IsToken()) {
        return At(instruction,
                  fmt::format("the second operand must be a token, got {}", Str(operand(1))));
      }
      return ExpectShape(instruction, operand(0));
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
      return ExpectShape(instruction, Shape(PrimitiveType::kU32, {}));
    case Opcode::kAfterAll:
      return VerifyAfterAll(instruction);
    case Opcode::kGetDimensionSize: {
      LOOM_ASSIGN_OR_RETURN(const int64_t dimension, RequireSingleDimension(instruction));
      return ExpectInferred(instruction, InferGetDimensionSizeShape(operand(0), dimension));
    }
    case Opcode::kMap:
      return VerifyMap(instruction);
    case Opcode::kWhile:
      return VerifyWhile(instruction);
    case Opcode::kConditional:
      return VerifyConditional(instruction);
    case Opcode::kCall:
      return VerifyCall(instruction);
    case Opcode::kFusion:
      return VerifyFusion(instruction);
    case Opcode::kAllGather:
    case Opcode::kAllGatherStart:
      return VerifyAllGather(instruction);
    case Opcode::kAllGatherDone:
      return VerifyAllGatherDone(instruction);
    case Opcode::kReduceScatter:
      return VerifyReduceScatter(instruction);
    case Opcode::kAllReduce:
    case Opcode::kAllReduceStart:
      return VerifyAllReduce(instruction);
    case Opcode::kAllReduceDone:
      LOOM_RETURN_IF_ERROR(ExpectOperandOpcode(instruction, {Opcode::kAllReduceStart}));
      return ExpectShape(instruction, operand(0));
    case Opcode::kAllToAll:
      return VerifyAllToAll(instruction);
    case Opcode::kCollectivePermute:
    case Opcode::kCollectivePermuteStart:
      return VerifyCollectivePermute(instruction);
    case Opcode::kCollectivePermuteDone:
      return VerifyCollectivePermuteDone(instruction);
    case Opcode::kCollectiveBroadcast:
      return VerifyCollectiveBroadcast(instruction);
    case Opcode::kRaggedAllToAll: {
      LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
      LOOM_RETURN_IF_ERROR(VerifyReplicaGroups(instruction, mode, true).status());
      return Trust(instruction);
    }
    case Opcode::kAsyncStart:
      return VerifyAsyncStart(instruction);
    case Opcode::kAsyncUpdate:
    case Opcode::kAsyncDone:
      return VerifyAsyncUpdateOrDone(instruction);
    case Opcode::kCopyStart:
      return VerifyCopyStart(instruction);
    case Opcode::kCopyDone:
      return VerifyCopyDone(instruction);
    case Opcode::kReduceWindow:
      return VerifyReduceWindow(instruction);
    case Opcode::kSelectAndScatter:
      return VerifySelectAndScatter(instruction);
    case Opcode::kSort:
      return VerifySort(instruction);
    case Opcode::kTopK:
      return VerifyTopK(instruction);
    case Opcode::kRngBitGenerator:
      return VerifyRngBitGenerator(instruction);
    case Opcode::kBatchNormTraining:
    case Opcode::kBatchNormInference:
    case Opcode::kBatchNormGrad:
      return VerifyBatchNorm(instruction);
    case Opcode::kTriangularSolve:
      return VerifyTriangularSolve(instruction);
    case Opcode::kCholesky:
      return VerifyCholesky(instruction);
    case Opcode::kCustomCall:
      // XLA's GPU topk is checked as topk; others are the caller's.
      if (IsTopKCustomCall(instruction)) return CustomTopKOf(instruction).status();
      return Trust(instruction);
    case Opcode::kScatter:
      return VerifyScatter(instruction);
    case Opcode::kGather:
      return VerifyGather(instruction);
    case Opcode::kConvolution:
      return VerifyConvolution(instruction);
    default:
      // custom-call, fft, rng, send/recv, infeed,
      // outfeed, ...: Loom does not interpret them.
      return Trust(instruction);
  }
}

Status ModuleVerifier::VerifyCompare(const Instruction& instruction) {
  if (!instruction.attrs().direction) {
    return At(instruction, "compare needs direction=EQ|NE|LT|LE|GT|GE");
  }
  return ExpectInferred(instruction, InferCompareShape(instruction.operand(0)->shape(),
                                                       instruction.operand(1)->shape()));
}

// True for the older form whose start indices are one rank-1 vector.
bool HasIndexVector(const Instruction& instruction, int64_t first_index) {
  if (instruction.operand_count() != first_index + 1) return false;
  const Shape& index = instruction.operand(first_index)->shape();
  return index.IsArray() && index.rank() == 1;
}

Status ExpectIndexOperandCount(const Instruction& instruction, int64_t first_index) {
  const Shape& operand = instruction.operand(0)->shape();
  if (HasIndexVector(instruction, first_index) || !operand.IsArray()) return OkStatus();
  const int64_t expected = first_index + operand.rank();
  if (instruction.operand_count() == expected) return OkStatus();
  return At(instruction, fmt::format("{} of {} takes {} + rank = {}, got {}",
                                     OpcodeName(instruction.opcode()), Str(operand), first_index,
                                     Operands(expected), instruction.operand_count()));
}

Status ModuleVerifier::VerifyDynamicSlice(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(ExpectIndexOperandCount(instruction, 1));
  LOOM_ASSIGN_OR_RETURN(const auto sizes,
                        RequireAttribute(instruction, instruction.attrs().dynamic_slice_sizes,
                                         "dynamic_slice_sizes={...}"));
  return ExpectInferred(instruction, InferDynamicSliceShape(instruction.operand(0)->shape(),
                                                            OperandShapes(instruction, 1), sizes));
}

Status ModuleVerifier::VerifyDynamicUpdateSlice(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(ExpectIndexOperandCount(instruction, 2));
  return ExpectInferred(instruction, InferDynamicUpdateSliceShape(instruction.operand(0)->shape(),
                                                                  instruction.operand(1)->shape(),
                                                                  OperandShapes(instruction, 2)));
}

// A reducer takes N accumulators then N inputs, all scalars, and returns the
// N accumulators (a tuple when N > 1).
Expected<Reducer> ModuleVerifier::VerifyReducer(const Instruction& instruction, int64_t n) {
  LOOM_ASSIGN_OR_RETURN(const Computation* reducer, RequireCalled(instruction, "to_apply"));
  const std::string name = Ref(*reducer);
  const std::vector<Instruction*>& params = ParametersOf(*reducer);
  if (static_cast<int64_t>(params.size()) != 2 * n) {
    return At(instruction, fmt::format("to_apply {} must take {} scalar parameters, takes {}", name,
                                       2 * n, params.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (!params[i] || !IsScalar(params[i]->shape())) {
      return At(instruction, fmt::format("to_apply {} parameter {} is {}, expected a scalar", name,
                                         i, params[i] ? Str(params[i]->shape()) : "missing"));
    }
  }
  const Shape& result = reducer->root()->shape();
  Reducer types;
  if (n == 1 && IsScalar(result)) {
    types.accumulators.push_back(result.type());
  } else if (n > 1 && result.IsTuple() && result.tuple_size() == n &&
             std::all_of(result.tuple_elements().begin(), result.tuple_elements().end(),
                         IsScalar)) {
    for (const Shape& element : result.tuple_elements())
      types.accumulators.push_back(element.type());
  } else {
    return At(instruction,
              fmt::format("to_apply {} returns {}, expected {}", name, Str(result),
                          n == 1 ? "a scalar" : fmt::format("a tuple of {} scalars", n)));
  }
  for (int64_t i = 0; i < n; ++i) {
    const PrimitiveType param = params[static_cast<size_t>(i)]->shape().type();
    if (param != types.accumulators[static_cast<size_t>(i)]) {
      return At(instruction,
                fmt::format("to_apply {} takes {} as accumulator {} but returns {} for it", name,
                            PrimitiveTypeName(param), i,
                            PrimitiveTypeName(types.accumulators[static_cast<size_t>(i)])));
    }
    types.inputs.push_back(params[static_cast<size_t>(n + i)]->shape().type());
  }
  return types;
}

Status ModuleVerifier::VerifyReduce(const Instruction& instruction) {
  const int64_t count = instruction.operand_count();
  if (count % 2 != 0) {
    return At(instruction,
              fmt::format("reduce takes N inputs and N init values, got {}", Operands(count)));
  }
  const int64_t n = count / 2;
  LOOM_ASSIGN_OR_RETURN(const Reducer reducer, VerifyReducer(instruction, n));
  for (int64_t i = 0; i < n; ++i) {
    const Shape& input = instruction.operand(i)->shape();
    const Shape& init = instruction.operand(n + i)->shape();
    const std::string name = Ref(*instruction.called("to_apply"));
    if (!IsScalar(init)) {
      return At(instruction, fmt::format("init value {} must be a scalar, got {}", i, Str(init)));
    }
    const PrimitiveType accumulator = reducer.accumulators[static_cast<size_t>(i)];
    if (!SameTypeIgnoringFpPrecision(init.type(), accumulator)) {
      return At(instruction, fmt::format("init value {} is {} but to_apply {} accumulates {}", i,
                                         Str(init), name, PrimitiveTypeName(accumulator)));
    }
    const PrimitiveType takes = reducer.inputs[static_cast<size_t>(i)];
    if (input.IsArray() && !SameTypeIgnoringFpPrecision(input.type(), takes)) {
      return At(instruction, fmt::format("input {} is {} but to_apply {} takes {}", i, Str(input),
                                         name, PrimitiveTypeName(takes)));
    }
  }
  LOOM_ASSIGN_OR_RETURN(
      const auto dims,
      RequireAttribute(instruction, instruction.attrs().dimensions, "dimensions={...}"));
  return ExpectInferred(
      instruction, InferReduceShape(OperandShapes(instruction, 0, n), reducer.accumulators, dims));
}

Status ModuleVerifier::VerifyMap(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const Computation* callee, RequireCalled(instruction, "to_apply"));
  std::vector<Shape> scalars;
  for (const Instruction* operand : instruction.operands()) {
    if (!operand->shape().IsArray()) {
      return At(instruction, fmt::format("operand {} is {}, expected an array", Ref(*operand),
                                         Str(operand->shape())));
    }
    scalars.emplace_back(operand->shape().type(), std::vector<int64_t>{});
  }
  std::vector<const Shape*> scalar_ptrs;
  for (const Shape& scalar : scalars) scalar_ptrs.push_back(&scalar);
  LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, "to_apply", *callee, scalar_ptrs));
  const Shape& result = callee->root()->shape();
  if (!IsScalar(result)) {
    return At(instruction,
              fmt::format("to_apply {} returns {}, expected a scalar", Ref(*callee), Str(result)));
  }
  return ExpectInferred(instruction, InferMapShape(OperandShapes(instruction), result.type()));
}

Status ModuleVerifier::VerifyWhile(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const Computation* condition, RequireCalled(instruction, "condition"));
  LOOM_ASSIGN_OR_RETURN(const Computation* body, RequireCalled(instruction, "body"));
  const Shape& loop = instruction.operand(0)->shape();
  LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, "condition", *condition, {&loop}));
  const Shape& predicate = condition->root()->shape();
  if (!predicate.Compatible(Shape(PrimitiveType::kPred, {}))) {
    return At(instruction, fmt::format("condition {} returns {}, expected pred[]", Ref(*condition),
                                       Str(predicate)));
  }
  LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, "body", *body, {&loop}));
  LOOM_RETURN_IF_ERROR(ExpectCalleeResult(instruction, "body", *body, loop));
  return ExpectShape(instruction, loop);
}

Status ModuleVerifier::VerifyConditional(const Instruction& instruction) {
  std::vector<std::pair<std::string, const Computation*>> branches;
  if (const CalledAttribute* list = FindCalled(instruction, "branch_computations")) {
    for (size_t i = 0; i < list->computations.size(); ++i) {
      branches.emplace_back(fmt::format("branch_computations[{}]", i), list->computations[i]);
    }
  } else {
    LOOM_ASSIGN_OR_RETURN(const Computation* on_true,
                          RequireCalled(instruction, "true_computation"));
    LOOM_ASSIGN_OR_RETURN(const Computation* on_false,
                          RequireCalled(instruction, "false_computation"));
    branches = {{"true_computation", on_true}, {"false_computation", on_false}};
  }
  const Shape& selector = instruction.operand(0)->shape();
  const int64_t count = static_cast<int64_t>(branches.size());
  if (IsScalar(selector) && selector.type() == PrimitiveType::kPred) {
    if (count != 2) {
      return At(instruction,
                fmt::format("a conditional on a pred needs 2 branches, got {}", count));
    }
  } else if (IsScalar(selector) && selector.type() == PrimitiveType::kS32) {
    if (count < 1) return At(instruction, "a conditional needs at least one branch");
  } else {
    return At(instruction,
              fmt::format("the branch selector must be pred[] or s32[], got {}", Str(selector)));
  }
  if (instruction.operand_count() != count + 1) {
    return At(instruction, fmt::format("a conditional with {} branches takes {}, got {}", count,
                                       Operands(count + 1), instruction.operand_count()));
  }
  for (int64_t i = 0; i < count; ++i) {
    const auto& [role, branch] = branches[static_cast<size_t>(i)];
    const Shape& argument = instruction.operand(i + 1)->shape();
    LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, role, *branch, {&argument}));
    LOOM_RETURN_IF_ERROR(ExpectCalleeResult(instruction, role, *branch, instruction.shape()));
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyCall(const Instruction& instruction) {
  const char* key = FindCalled(instruction, "to_apply") || !FindCalled(instruction, "calls")
                        ? "to_apply"
                        : "calls";
  LOOM_ASSIGN_OR_RETURN(const Computation* callee, RequireCalled(instruction, key));
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeParameters(instruction, key, *callee, OperandShapes(instruction)));
  return ExpectCalleeResult(instruction, key, *callee, instruction.shape());
}

// XLA lets a fused computation ignore trailing operands.
Status ModuleVerifier::VerifyFusion(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const Computation* callee, RequireCalled(instruction, "calls"));
  LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, "calls", *callee,
                                              OperandShapes(instruction), /*allow_fewer=*/true));
  return ExpectCalleeResult(instruction, "calls", *callee, instruction.shape());
}

Status ModuleVerifier::VerifyAfterAll(const Instruction& instruction) {
  for (const Instruction* operand : instruction.operands()) {
    if (!operand->shape().IsToken()) {
      return At(instruction, fmt::format("operand {} is {}, expected a token", Ref(*operand),
                                         Str(operand->shape())));
    }
  }
  return ExpectShape(instruction, Shape::Token());
}

// --- collectives ---------------------------------------------------------------

// The group size of an all-gather or reduce-scatter whose `{}` groups span
// a device count the header does not give, read off the shapes as XLA does:
// the ratio of the gathered (scattered) dimension.
Expected<int64_t> ModuleVerifier::ShardCountFromShapes(const Instruction& instruction,
                                                       int64_t dimension, bool gather) {
  const Shape& operand = instruction.operand(0)->shape();
  const Shape* result = DeclaredCollectiveResult(instruction, 0);
  if (!operand.IsArray() || !result || !result->IsArray() || dimension < 0 ||
      dimension >= operand.rank() || dimension >= result->rank()) {
    return 1;  // shape inference reports what is wrong
  }
  const int64_t in = operand.dim(dimension);
  const int64_t out = result->dim(dimension);
  const int64_t whole = gather ? out : in;
  const int64_t part = gather ? in : out;
  if (part == 0) return 1;
  if (whole % part != 0 || whole < part) {
    return At(instruction,
              fmt::format("dimension {} of the {} ({}) is not a multiple of dimension {} of the {} "
                          "({})",
                          dimension, gather ? "result" : "operand", whole, dimension,
                          gather ? "operand" : "result", part));
  }
  return whole / part;
}

// all-reduce and reduce-scatter apply a scalar reducer to every operand.
Status ModuleVerifier::VerifyCollectiveReducer(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const Reducer reducer, VerifyReducer(instruction, 1));
  for (const Instruction* operand : instruction.operands()) {
    const Shape& shape = operand->shape();
    if (shape.IsArray() && (!SameTypeIgnoringFpPrecision(shape.type(), reducer.accumulators[0]) ||
                            !SameTypeIgnoringFpPrecision(shape.type(), reducer.inputs[0]))) {
      return At(instruction,
                fmt::format("operand {} is {} but to_apply {} reduces {}", Ref(*operand),
                            Str(shape), Ref(*instruction.called("to_apply")),
                            PrimitiveTypeName(reducer.accumulators[0])));
    }
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyAllGather(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const int64_t dimension, RequireSingleDimension(instruction));
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_ASSIGN_OR_RETURN(const GroupSummary groups, VerifyReplicaGroups(instruction, mode, true));
  int64_t shards = groups.group_size;
  if (shards == 0) {
    LOOM_ASSIGN_OR_RETURN(shards, ShardCountFromShapes(instruction, dimension, /*gather=*/true));
  }
  LOOM_ASSIGN_OR_RETURN(
      const Shape result,
      Located(instruction, InferAllGatherShape(OperandShapes(instruction), dimension, shards)));
  if (instruction.opcode() == Opcode::kAllGather) return ExpectShape(instruction, result);
  // all-gather-start: (operands, result), or the result alone in some GPU dumps.
  const Shape pair = Shape::Tuple({OperandSide(instruction), result});
  if (instruction.shape().Compatible(pair) || instruction.shape().Compatible(result)) {
    return OkStatus();
  }
  return At(instruction, fmt::format("declared shape {} but all-gather-start infers {} (or {})",
                                     Str(instruction.shape()), Str(pair), Str(result)));
}

Status ModuleVerifier::VerifyAllGatherDone(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(ExpectOperandOpcode(instruction, {Opcode::kAllGatherStart}));
  const Instruction& start = *instruction.operand(0);
  const Shape& start_shape = start.shape();
  // The start's shape is (operands, result) or the result alone.
  const bool pair = start_shape.IsTuple() && start_shape.tuple_size() == 2 &&
                    start_shape.tuple_element(0).Compatible(OperandSide(start));
  return ExpectShape(instruction, pair ? start_shape.tuple_element(1) : start_shape);
}

Status ModuleVerifier::VerifyReduceScatter(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const int64_t dimension, RequireSingleDimension(instruction));
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_ASSIGN_OR_RETURN(const GroupSummary groups, VerifyReplicaGroups(instruction, mode, true));
  LOOM_RETURN_IF_ERROR(VerifyCollectiveReducer(instruction));
  int64_t shards = groups.group_size;
  if (shards == 0) {
    LOOM_ASSIGN_OR_RETURN(shards, ShardCountFromShapes(instruction, dimension, /*gather=*/false));
  }
  return ExpectInferred(instruction,
                        InferReduceScatterShape(OperandShapes(instruction), dimension, shards));
}

// all-reduce(-start): XLA allows replica groups of different sizes here.
Status ModuleVerifier::VerifyAllReduce(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_RETURN_IF_ERROR(VerifyReplicaGroups(instruction, mode, /*uniform_size=*/false).status());
  LOOM_RETURN_IF_ERROR(VerifyCollectiveReducer(instruction));
  return ExpectInferred(instruction, InferSameAsOperandsShape(OperandShapes(instruction)));
}

// With dimensions={d}: one operand split along d into one piece per device.
// Without: one operand per device of a group, and a tuple result.
Status ModuleVerifier::VerifyAllToAll(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_ASSIGN_OR_RETURN(const GroupSummary groups, VerifyReplicaGroups(instruction, mode, true));
  if (instruction.attrs().dimensions) {
    LOOM_ASSIGN_OR_RETURN(const int64_t dimension, RequireSingleDimension(instruction));
    if (instruction.operand_count() != 1) {
      return At(instruction,
                fmt::format("all-to-all with dimensions={{{}}} takes 1 operand, got {}", dimension,
                            instruction.operand_count()));
    }
    const int64_t split = groups.group_size > 0 ? groups.group_size : 1;
    return ExpectInferred(instruction,
                          InferAllToAllShape(instruction.operand(0)->shape(), dimension, split));
  }
  if (groups.group_size > 0 && instruction.operand_count() != groups.group_size) {
    return At(instruction, fmt::format("all-to-all without dimensions takes one operand per device "
                                       "of a replica group ({}), got {}",
                                       groups.group_size, instruction.operand_count()));
  }
  return ExpectShape(instruction, InferTupleShape(OperandShapes(instruction)));
}

Status ModuleVerifier::VerifyCollectivePermute(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_RETURN_IF_ERROR(VerifySourceTargetPairs(instruction, IdSpaceOf(mode)));
  // The in-place form (input, output, input offsets, output offsets; with
  // slice_sizes) writes into its second operand: Loom does not interpret it.
  const Attributes& attrs = instruction.attrs();
  if (instruction.operand_count() == 4 &&
      (attrs.dynamic_slice_sizes || attrs.FindRaw("slice_sizes"))) {
    return Trust(instruction);
  }
  const Shape side = OperandSide(instruction);
  if (instruction.opcode() == Opcode::kCollectivePermute) return ExpectShape(instruction, side);
  // collective-permute-start: (operands, results, context...), where the
  // context elements (u32[] in TPU dumps) are the backend's business.
  const Shape& declared = instruction.shape();
  if (declared.IsTuple() && declared.tuple_size() >= 2 &&
      declared.tuple_element(0).Compatible(side) && declared.tuple_element(1).Compatible(side)) {
    return OkStatus();
  }
  return At(instruction, fmt::format("declared shape {} but collective-permute-start infers {} "
                                     "(optionally followed by context elements)",
                                     Str(declared), Str(Shape::Tuple({side, side}))));
}

Status ModuleVerifier::VerifyCollectivePermuteDone(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(ExpectOperandOpcode(instruction, {Opcode::kCollectivePermuteStart}));
  const Shape& start = instruction.operand(0)->shape();
  if (!start.IsTuple() || start.tuple_size() < 2) {
    return At(instruction,
              fmt::format("the operand {} is not a (operands, results, ...) tuple", Str(start)));
  }
  return ExpectShape(instruction, start.tuple_element(1));
}

Status ModuleVerifier::VerifyCollectiveBroadcast(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const GroupMode mode, CollectiveGroupMode(instruction));
  LOOM_RETURN_IF_ERROR(VerifyReplicaGroups(instruction, mode, true).status());
  return ExpectInferred(instruction, InferSameAsOperandsShape(OperandShapes(instruction)));
}

// --- async wrappers --------------------------------------------------------------

// async-start's shape is ((operands...), result, context...): element 0
// holds the callee's parameters, element 1 its result.
Status ModuleVerifier::VerifyAsyncStart(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const Computation* callee, RequireCalled(instruction, "calls"));
  const Shape& declared = instruction.shape();
  const Shape arguments = InferTupleShape(OperandShapes(instruction));
  if (!declared.IsTuple() || declared.tuple_size() < 2 ||
      !declared.tuple_element(0).Compatible(arguments)) {
    return At(instruction,
              fmt::format("declared shape {} but async-start of {} needs ({}, "
                          "result, context...)",
                          Str(declared), Operands(instruction.operand_count()), Str(arguments)));
  }
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeParameters(instruction, "calls", *callee, OperandShapes(instruction)));
  const Shape& result = callee->root()->shape();
  if (!declared.tuple_element(1).Compatible(result)) {
    return At(instruction, fmt::format("element 1 of the shape is {}, but calls {} returns {}",
                                       Str(declared.tuple_element(1)), Ref(*callee), Str(result)));
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyAsyncUpdateOrDone(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(
      ExpectOperandOpcode(instruction, {Opcode::kAsyncStart, Opcode::kAsyncUpdate}));
  const Instruction& previous = *instruction.operand(0);
  const CalledAttribute* mine = FindCalled(instruction, "calls");
  const CalledAttribute* theirs = FindCalled(previous, "calls");
  if (mine && theirs && mine->computations != theirs->computations) {
    return At(instruction,
              fmt::format("calls a different computation than its operand {}", Ref(previous)));
  }
  const Shape& state = previous.shape();
  if (instruction.opcode() == Opcode::kAsyncUpdate) return ExpectShape(instruction, state);
  if (!state.IsTuple() || state.tuple_size() < 2) {
    return At(instruction, fmt::format("the operand {} is {}, not an async state tuple",
                                       Ref(previous), Str(state)));
  }
  return ExpectShape(instruction, state.tuple_element(1));
}

Status ModuleVerifier::VerifyCopyStart(const Instruction& instruction) {
  const Shape& operand = instruction.operand(0)->shape();
  return ExpectShape(instruction, Shape::Tuple({operand, operand, Shape(PrimitiveType::kU32, {})}));
}

Status ModuleVerifier::VerifyCopyDone(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(ExpectOperandOpcode(instruction, {Opcode::kCopyStart}));
  const Shape& state = instruction.operand(0)->shape();
  if (!state.IsTuple() || state.tuple_size() < 1) {
    return At(instruction, fmt::format("the operand is {}, not a copy-start tuple", Str(state)));
  }
  return ExpectShape(instruction, state.tuple_element(0));
}

// --- trusted ops with a reducer --------------------------------------------------

// reduce-window(inputs..., inits...): the reducer checked, the result's
// dimensions inferred from the window (ir/reduce_window.h), its element
// types the reducer's accumulators'.
Status ModuleVerifier::VerifyReduceWindow(const Instruction& instruction) {
  const int64_t count = instruction.operand_count();
  if (count < 2 || count % 2 != 0) {
    return At(instruction, fmt::format("reduce-window takes N inputs and N init values, got {}",
                                       Operands(count)));
  }
  const int64_t n = count / 2;
  LOOM_ASSIGN_OR_RETURN(const Reducer reducer, VerifyReducer(instruction, n));
  for (int64_t i = 0; i < n; ++i) {
    const Shape& init = instruction.operand(n + i)->shape();
    if (!IsScalar(init) ||
        !SameTypeIgnoringFpPrecision(init.type(), reducer.accumulators[static_cast<size_t>(i)])) {
      return At(instruction,
                fmt::format("init value {} is {}, expected a {} scalar", i, Str(init),
                            PrimitiveTypeName(reducer.accumulators[static_cast<size_t>(i)])));
    }
    const Shape& input = instruction.operand(i)->shape();
    const Shape& first = instruction.operand(0)->shape();
    if (!input.IsArray() ||
        !SameTypeIgnoringFpPrecision(input.type(), reducer.inputs[static_cast<size_t>(i)])) {
      return At(instruction,
                fmt::format("input {} is {}, expected an array of {}", i, Str(input),
                            PrimitiveTypeName(reducer.inputs[static_cast<size_t>(i)])));
    }
    if (input.dims() != first.dims()) {
      return At(instruction, fmt::format("input {} {} has different dimensions from input 0 {}", i,
                                         Str(input), Str(first)));
    }
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<WindowDimension> window, ReduceWindowOf(instruction));
  const Expected<std::vector<int64_t>> dims =
      InferReduceWindowDims(instruction.operand(0)->shape(), window);
  if (!dims.ok()) return At(instruction, dims.error().message);
  std::vector<Shape> results;
  for (const PrimitiveType type : reducer.accumulators) results.emplace_back(type, *dims);
  return ExpectShape(instruction, results.size() == 1 ? results[0] : Shape::Tuple(results));
}

// sort(operands...) (ir/sort.h): operands of one shape, one dimension in
// range, a comparator of their element pairs that returns pred[]; the
// result the operand (a tuple of them, for several).
Status ModuleVerifier::VerifySort(const Instruction& instruction) {
  const int64_t n = instruction.operand_count();
  if (n == 0) return At(instruction, "sort takes at least one operand");
  const Shape& first = instruction.operand(0)->shape();
  std::vector<Shape> elements;
  for (int64_t k = 0; k < n; ++k) {
    const Shape& operand = instruction.operand(k)->shape();
    if (!operand.IsArray() || operand.dims() != first.dims()) {
      return At(instruction, fmt::format("operand {} is {}, expected an array of the dimensions "
                                         "of operand 0 {}",
                                         k, Str(operand), Str(first)));
    }
    elements.emplace_back(operand.type(), std::vector<int64_t>{});
    elements.emplace_back(operand.type(), std::vector<int64_t>{});
  }
  LOOM_ASSIGN_OR_RETURN(
      const auto dims,
      RequireAttribute(instruction, instruction.attrs().dimensions, "dimensions={...}"));
  if (dims.size() != 1 || dims[0] < 0 || dims[0] >= first.rank()) {
    return At(instruction, fmt::format("sort takes one dimension of {}, got dimensions={{{}}}",
                                       Str(first), fmt::join(dims, ",")));
  }
  LOOM_ASSIGN_OR_RETURN(const Computation* comparator, RequireCalled(instruction, "to_apply"));
  std::vector<const Shape*> parameters;
  for (const Shape& element : elements) parameters.push_back(&element);
  LOOM_RETURN_IF_ERROR(ExpectCalleeParameters(instruction, "to_apply", *comparator, parameters));
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeResult(instruction, "to_apply", *comparator, Shape(PrimitiveType::kPred, {})));
  if (n == 1) return ExpectShape(instruction, first);
  std::vector<Shape> results;
  for (int64_t k = 0; k < n; ++k) results.push_back(instruction.operand(k)->shape());
  return ExpectShape(instruction, Shape::Tuple(results));
}

// topk(operand), k=K (ir/sort.h): the K first of the last dimension's
// elements and their s32 positions.
Status ModuleVerifier::VerifyTopK(const Instruction& instruction) {
  if (instruction.operand_count() != 1) {
    return At(instruction,
              fmt::format("topk takes one operand, got {}", Operands(instruction.operand_count())));
  }
  LOOM_ASSIGN_OR_RETURN(const TopK topk, TopKOf(instruction));
  return ExpectInferred(instruction, InferTopKShape(instruction.operand(0)->shape(), topk.k));
}

// rng-bit-generator(state), algorithm=A (ir/random.h): the state back
// and bits of the declared dimensions and type.
Status ModuleVerifier::VerifyRngBitGenerator(const Instruction& instruction) {
  if (instruction.operand_count() != 1) {
    return At(instruction, fmt::format("rng-bit-generator takes one operand, got {}",
                                       Operands(instruction.operand_count())));
  }
  LOOM_ASSIGN_OR_RETURN(const RngAlgorithm algorithm, RngAlgorithmOf(instruction));
  return ExpectInferred(instruction, InferRngBitGeneratorShape(instruction.operand(0)->shape(),
                                                               instruction.shape(), algorithm));
}

// batch-norm-training, -inference and -grad (ir/batch_norm.h).
Status ModuleVerifier::VerifyBatchNorm(const Instruction& instruction) {
  std::vector<const Shape*> operands;
  for (const Instruction* operand : instruction.operands()) operands.push_back(&operand->shape());
  LOOM_ASSIGN_OR_RETURN(const BatchNorm attributes, BatchNormOf(instruction));
  return ExpectInferred(instruction,
                        InferBatchNormShape(instruction.opcode(), operands, attributes));
}

// triangular-solve(a, b) and cholesky(a) (ir/linear_algebra.h).
Status ModuleVerifier::VerifyTriangularSolve(const Instruction& instruction) {
  LOOM_ASSIGN_OR_RETURN(const TriangularSolveOptions options,
                        TriangularSolveOptionsOf(instruction));
  return ExpectInferred(instruction,
                        InferTriangularSolveShape(instruction.operand(0)->shape(),
                                                  instruction.operand(1)->shape(), options));
}

Status ModuleVerifier::VerifyCholesky(const Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(CholeskyOptionsOf(instruction).status());
  return ExpectInferred(instruction, InferCholeskyShape(instruction.operand(0)->shape()));
}

// select-and-scatter(operand, source, init) (ir/select_and_scatter.h):
// select compares two operand elements, scatter combines two source ones;
// the source has the window's positions over the operand, the result the
// operand's dimensions and the source's type.
Status ModuleVerifier::VerifySelectAndScatter(const Instruction& instruction) {
  if (instruction.operand_count() != 3) {
    return At(instruction,
              fmt::format("select-and-scatter takes an operand, a source and an init value, got {}",
                          Operands(instruction.operand_count())));
  }
  const Shape& operand = instruction.operand(0)->shape();
  const Shape& source = instruction.operand(1)->shape();
  const Shape& init = instruction.operand(2)->shape();
  if (!operand.IsArray() || !source.IsArray() || !IsScalar(init) ||
      !SameTypeIgnoringFpPrecision(init.type(), source.type())) {
    return At(instruction,
              fmt::format("select-and-scatter takes two arrays and a scalar of the source's type, "
                          "got {}, {} and {}",
                          Str(operand), Str(source), Str(init)));
  }
  LOOM_ASSIGN_OR_RETURN(const Computation* select, RequireCalled(instruction, "select"));
  LOOM_ASSIGN_OR_RETURN(const Computation* scatter, RequireCalled(instruction, "scatter"));
  const Shape element(operand.type(), {}), update(source.type(), {});
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeParameters(instruction, "select", *select, {&element, &element}));
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeResult(instruction, "select", *select, Shape(PrimitiveType::kPred, {})));
  LOOM_RETURN_IF_ERROR(
      ExpectCalleeParameters(instruction, "scatter", *scatter, {&update, &update}));
  LOOM_RETURN_IF_ERROR(ExpectCalleeResult(instruction, "scatter", *scatter, update));
  LOOM_ASSIGN_OR_RETURN(const std::vector<WindowDimension> window, ReduceWindowOf(instruction));
  const Expected<std::vector<int64_t>> positions = InferReduceWindowDims(operand, window);
  if (!positions.ok()) return At(instruction, positions.error().message);
  if (*positions != source.dims()) {
    return At(instruction,
              fmt::format("the window has {} positions over the operand {}, but the "
                          "source is {}",
                          Str(Shape(source.type(), *positions)), Str(operand), Str(source)));
  }
  return ExpectShape(instruction, Shape(source.type(), operand.dims()));
}

// scatter(operands..., indices, updates...): the shape is trusted, the
// reducer (which combines an operand element with an update) checked.
Status ModuleVerifier::VerifyScatter(const Instruction& instruction) {
  const int64_t count = instruction.operand_count();
  if (count < 3 || count % 2 != 1) {
    return At(instruction, fmt::format("scatter takes N operands, indices and N updates, got {}",
                                       Operands(count)));
  }
  const int64_t n = (count - 1) / 2;
  LOOM_ASSIGN_OR_RETURN(const Reducer reducer, VerifyReducer(instruction, n));
  for (int64_t i = 0; i < n; ++i) {
    const Shape& operand = instruction.operand(i)->shape();
    if (operand.IsArray() && !SameTypeIgnoringFpPrecision(
                                 operand.type(), reducer.accumulators[static_cast<size_t>(i)])) {
      return At(instruction,
                fmt::format("operand {} is {} but to_apply returns {}", i, Str(operand),
                            PrimitiveTypeName(reducer.accumulators[static_cast<size_t>(i)])));
    }
  }
  LOOM_ASSIGN_OR_RETURN(const ScatterDimensions dims, ScatterDimensionsOf(instruction));
  const Shape& indices = instruction.operand(n)->shape();
  for (int64_t i = 0; i < n; ++i) {
    const Status fits = CheckScatterShapes(instruction.operand(i)->shape(), indices,
                                           instruction.operand(n + 1 + i)->shape(), dims);
    if (!fits.ok()) return At(instruction, fits.error().message);
  }
  if (n == 1) return ExpectShape(instruction, instruction.operand(0)->shape());
  const Shape& result = instruction.shape();
  if (!result.IsTuple() || static_cast<int64_t>(result.tuple_elements().size()) != n) {
    return At(instruction, fmt::format("scatter of {} operands returns a tuple of {}", n, n));
  }
  for (int64_t i = 0; i < n; ++i) {
    const Shape& element = result.tuple_elements()[static_cast<size_t>(i)];
    if (!element.Compatible(instruction.operand(i)->shape())) {
      return At(instruction, fmt::format("element {} of the result is {} but operand {} is {}", i,
                                         Str(element), i, Str(instruction.operand(i)->shape())));
    }
  }
  return OkStatus();
}

Status ModuleVerifier::VerifyGather(const Instruction& instruction) {
  if (instruction.operand_count() != 2) {
    return At(instruction, fmt::format("gather takes an operand and start indices, got {}",
                                       Operands(instruction.operand_count())));
  }
  LOOM_ASSIGN_OR_RETURN(const GatherDimensions dims, GatherDimensionsOf(instruction));
  return ExpectInferred(instruction, InferGatherShape(instruction.operand(0)->shape(),
                                                      instruction.operand(1)->shape(), dims));
}

// convolution(input, kernel): the dimensions inferred (ir/convolution.h);
// the result's element type may differ from the operands' (XLA's
// preferred_element_type) but not its kind.
Status ModuleVerifier::VerifyConvolution(const Instruction& instruction) {
  if (instruction.operand_count() != 2) {
    return At(instruction, fmt::format("convolution takes an input and a kernel, got {}",
                                       Operands(instruction.operand_count())));
  }
  LOOM_ASSIGN_OR_RETURN(const Convolution convolution, ConvolutionOf(instruction));
  const Shape& input = instruction.operand(0)->shape();
  Expected<std::vector<int64_t>> dims =
      InferConvolutionDims(input, instruction.operand(1)->shape(), convolution);
  if (!dims.ok()) return At(instruction, dims.error().message);
  const Shape& result = instruction.shape();
  if (result.IsArray() && IsFloatingPoint(result.type()) != IsFloatingPoint(input.type())) {
    return At(instruction,
              fmt::format("a convolution of {} cannot give {}", Str(input), Str(result)));
  }
  return ExpectShape(instruction, Shape(result.IsArray() ? result.type() : input.type(), *dims));
}

// --- driver ------------------------------------------------------------------------

Expected<VerifyReport> ModuleVerifier::Run() {
  LOOM_RETURN_IF_ERROR(VerifyHeader());
  for (const auto& computation : module_.computations()) {
    LOOM_RETURN_IF_ERROR(VerifyComputationStructure(*computation));
  }
  LOOM_RETURN_IF_ERROR(VerifyCallGraphIsAcyclic());
  for (const auto& computation : module_.computations()) {
    LOOM_RETURN_IF_ERROR(VerifyNoOperandCycle(*computation));
    LOOM_RETURN_IF_ERROR(VerifyDefinitionBeforeUse(*computation));
  }
  InferDeviceCounts();
  for (const auto& computation : module_.computations()) {
    for (const auto& instruction : computation->instructions()) {
      LOOM_RETURN_IF_ERROR(VerifyInstruction(*instruction));
    }
  }
  return std::move(report_);
}

}  // namespace

Expected<VerifyReport> VerifyModule(const Module& module) { return ModuleVerifier(module).Run(); }

Expected<DeviceGrid> DeviceGridOf(const Module& module) {
  LOOM_ASSIGN_OR_RETURN(const VerifyReport report, VerifyModule(module));
  return report.grid();
}

Expected<DeviceGrid> DeviceGridOf(const Module& module, const std::optional<DeviceGrid>& known) {
  if (known) return *known;
  return DeviceGridOf(module);
}

}  // namespace loom::ir
