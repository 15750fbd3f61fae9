#include "pass/async_collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <unordered_set>

#include "ir/builder.h"
#include "ir/shape_inference.h"

namespace loom::pass {

using ir::Instruction;
using ir::Opcode;

namespace {

bool Wanted(const AsyncCollectivesOptions& options, Opcode opcode) {
  switch (opcode) {
    case Opcode::kAllGather:
      return options.all_gather;
    case Opcode::kAllReduce:
      return options.all_reduce;
    case Opcode::kCollectivePermute:
      return options.collective_permute;
    case Opcode::kReduceScatter:
      return options.reduce_scatter;
    case Opcode::kAllToAll:
      return options.all_to_all;
    default:
      return false;
  }
}

// The computations no collective of which is converted: those an
// async-start (-update, -done) already calls, and fused computations.
std::unordered_set<const ir::Computation*> LeftAlone(const ir::Module& module) {
  std::unordered_set<const ir::Computation*> left;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      const Opcode op = instruction->opcode();
      if (op != Opcode::kAsyncStart && op != Opcode::kAsyncUpdate && op != Opcode::kAsyncDone &&
          op != Opcode::kFusion) {
        continue;
      }
      for (const ir::Computation* called : instruction->called_computations()) left.insert(called);
    }
  }
  return left;
}

// What a -start carries as its operand side: the operand's shape, or the
// tuple of them when there are several.
ir::Shape OperandSide(const Instruction& instruction) {
  std::vector<const ir::Shape*> shapes;
  for (const Instruction* operand : instruction.operands()) shapes.push_back(&operand->shape());
  if (shapes.size() == 1) return *shapes[0];
  return ir::InferTupleShape(shapes);
}

std::vector<ir::RawAttribute> RawWithKey(const ir::Attributes& attrs, std::string_view key) {
  std::vector<ir::RawAttribute> raw;
  for (const ir::RawAttribute& attribute : attrs.raw) {
    if (attribute.key == key) raw.push_back(attribute);
  }
  return raw;
}

class Converter {
 public:
  Converter(ir::Module& module, ir::NameTable& names, std::vector<std::string>& explanation)
      : module_(module), names_(names), explanation_(explanation) {}

  // False when the collective stays synchronous.
  bool Convert(ir::Computation& computation, Instruction* collective) {
    const Opcode op = collective->opcode();
    if (op == Opcode::kCollectivePermute && collective->operand_count() == 4 &&
        (collective->attrs().dynamic_slice_sizes || collective->attrs().FindRaw("slice_sizes"))) {
      explanation_.push_back(
          fmt::format("%{}: left synchronous: in-place collective-permute (no -start form here)",
                      collective->name()));
      return false;
    }
    auto [new_start, new_done] = op == Opcode::kReduceScatter || op == Opcode::kAllToAll
                                     ? Wrap(computation, *collective)
                                     : Pair(*collective);
    ir::Builder builder(computation, names_, collective);
    Instruction* start = builder.Insert(std::move(new_start));
    new_done->AppendOperand(start);
    Instruction* done = builder.Insert(std::move(new_done));
    Rewire(computation, collective, start, done);
    explanation_.push_back(fmt::format(
        "%{}: {} -> %{} {} / %{} {}", collective->name(), ir::OpcodeName(op), start->name(),
        ir::OpcodeName(start->opcode()), done->name(), ir::OpcodeName(done->opcode())));
    computation.RemoveInstruction(collective);
    return true;
  }

 private:
  using Owned = std::unique_ptr<Instruction>;

  // all-gather-start/-done, all-reduce-start/-done,
  // collective-permute-start/-done.
  std::pair<Owned, Owned> Pair(const Instruction& collective) {
    Opcode start_op, done_op;
    ir::Shape start_shape;
    switch (collective.opcode()) {
      case Opcode::kAllGather:
        start_op = Opcode::kAllGatherStart;
        done_op = Opcode::kAllGatherDone;
        start_shape = ir::Shape::Tuple({OperandSide(collective), collective.shape()});
        break;
      case Opcode::kAllReduce:
        start_op = Opcode::kAllReduceStart;
        done_op = Opcode::kAllReduceDone;
        start_shape = collective.shape();
        break;
      default:  // collective-permute
        start_op = Opcode::kCollectivePermuteStart;
        done_op = Opcode::kCollectivePermuteDone;
        start_shape = ir::Shape::Tuple({OperandSide(collective), collective.shape()});
        break;
    }
    auto start = std::make_unique<Instruction>(collective.name() + "-start", start_op,
                                               std::move(start_shape));
    for (Instruction* operand : collective.operands()) start->AppendOperand(operand);
    start->mutable_attrs() = collective.attrs();
    // The sharding describes the collective's result: the done's.
    std::erase_if(start->mutable_attrs().raw,
                  [](const ir::RawAttribute& a) { return a.key == "sharding"; });
    auto done =
        std::make_unique<Instruction>(collective.name() + "-done", done_op, collective.shape());
    done->mutable_attrs().raw = RawWithKey(collective.attrs(), "metadata");
    for (ir::RawAttribute& sharding : RawWithKey(collective.attrs(), "sharding")) {
      done->mutable_attrs().raw.push_back(std::move(sharding));
    }
    return {std::move(start), std::move(done)};
  }

  // async-start/async-done calling a new computation that holds the
  // collective.
  std::pair<Owned, Owned> Wrap(ir::Computation& computation, const Instruction& collective) {
    auto owned = std::make_unique<ir::Computation>(
        names_.UniqueComputation(collective.name() + ".async", module_));
    ir::Computation* wrapped = module_.InsertComputationBefore(std::move(owned), &computation);
    ir::Builder builder(*wrapped, names_);
    // The collective keeps its name: the original goes once it is replaced.
    auto inner =
        std::make_unique<Instruction>(collective.name(), collective.opcode(), collective.shape());
    std::vector<const ir::Shape*> operand_shapes;
    for (int64_t i = 0; i < collective.operand_count(); ++i) {
      const ir::Shape& shape = collective.operand(i)->shape();
      operand_shapes.push_back(&shape);
      inner->AppendOperand(builder.Parameter(i, shape, "param"));
    }
    inner->mutable_attrs() = collective.attrs();
    inner->mutable_attrs().control_predecessors.clear();
    inner->set_loc(collective.loc());
    wrapped->set_root(wrapped->AddInstruction(std::move(inner)));

    const ir::CalledAttribute calls{"calls", {wrapped}, false};
    auto start = std::make_unique<Instruction>(
        collective.name() + "-start", Opcode::kAsyncStart,
        ir::Shape::Tuple({ir::InferTupleShape(operand_shapes), collective.shape()}));
    for (Instruction* operand : collective.operands()) start->AppendOperand(operand);
    start->mutable_attrs().called = {calls};
    start->mutable_attrs().control_predecessors = collective.attrs().control_predecessors;
    start->mutable_attrs().raw = RawWithKey(collective.attrs(), "metadata");
    auto done = std::make_unique<Instruction>(collective.name() + "-done", Opcode::kAsyncDone,
                                              collective.shape());
    done->mutable_attrs().called = {calls};
    done->mutable_attrs().raw = RawWithKey(collective.attrs(), "metadata");
    return {std::move(start), std::move(done)};
  }

  // Users (and control successors) of the collective take the done.
  static void Rewire(ir::Computation& computation, const Instruction* collective,
                     Instruction* start, Instruction* done) {
    computation.ReplaceAllUsesWith(collective, done);
    for (const auto& instruction : computation.instructions()) {
      for (Instruction*& predecessor : instruction->mutable_attrs().control_predecessors) {
        if (predecessor == collective) predecessor = done;
      }
    }
    start->set_loc(collective->loc());
    done->set_loc(collective->loc());
  }

  ir::Module& module_;
  ir::NameTable& names_;
  std::vector<std::string>& explanation_;
};

}  // namespace

Expected<bool> AsyncCollectives::Run(ir::Module& module) {
  explanation_.clear();
  const std::unordered_set<const ir::Computation*> left_alone = LeftAlone(module);
  ir::NameTable names(module);
  Converter converter(module, names, explanation_);
  bool changed = false;
  std::vector<ir::Computation*> computations;
  for (const auto& computation : module.computations()) computations.push_back(computation.get());
  for (ir::Computation* computation : computations) {
    if (left_alone.count(computation)) continue;
    std::vector<Instruction*> collectives;
    for (const auto& instruction : computation->instructions()) {
      if (Wanted(options_, instruction->opcode())) collectives.push_back(instruction.get());
    }
    for (Instruction* collective : collectives) {
      changed |= converter.Convert(*computation, collective);
    }
  }
  return changed;
}

}  // namespace loom::pass
