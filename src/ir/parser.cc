#include "ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <functional>
#include <unordered_map>
#include <unordered_set>

#include "ir/lexer.h"
#include "ir/shape_inference.h"

namespace loom::ir {
namespace {

// Hostile input may nest tuple shapes or inline operands without end.
constexpr int kMaxNesting = 64;

constexpr std::string_view kDebugSectionTitles[] = {"FileNames", "FunctionNames", "FileLocations",
                                                    "StackFrames"};

// An operand or control predecessor named before the whole computation is
// read; resolved when the computation's closing brace is reached.
struct PendingRef {
  Instruction* user;
  std::string name;
  SourceLoc loc;
  bool control = false;
};

// A called computation named in an attribute; resolved at the end of the
// module, since callees may be printed after their callers.
struct PendingCall {
  Instruction* user;
  size_t attribute;  // index into user's attrs().called
  std::string name;
  SourceLoc loc;
};

struct DeclaredSignature {
  std::vector<std::pair<std::string, Shape>> params;
  Shape result;
};

std::vector<const Shape*> OperandShapes(const Instruction& instruction) {
  std::vector<const Shape*> shapes;
  for (const Instruction* operand : instruction.operands()) shapes.push_back(&operand->shape());
  return shapes;
}

// The shape of an instruction written without one. Only ops whose result
// follows from their operands alone can be written so.
Expected<Shape> InferShapeOfShapeless(const Instruction& instruction) {
  const Opcode opcode = instruction.opcode();
  const std::vector<const Shape*> operands = OperandShapes(instruction);
  auto need = [&](size_t count) -> Status {
    if (operands.size() == count) return OkStatus();
    return Error{
        fmt::format("{} takes {} operand(s), not {}", OpcodeName(opcode), count, operands.size())};
  };
  if (opcode == Opcode::kGetTupleElement) {
    LOOM_RETURN_IF_ERROR(need(1));
    if (!instruction.attrs().tuple_index) return Error{"get-tuple-element needs index="};
    return InferGetTupleElementShape(*operands[0], *instruction.attrs().tuple_index);
  }
  if (opcode == Opcode::kTuple) return InferTupleShape(operands);
  if (IsElementwiseUnary(opcode)) {
    LOOM_RETURN_IF_ERROR(need(1));
    return InferElementwiseUnaryShape(opcode, *operands[0]);
  }
  if (IsElementwiseBinary(opcode)) {
    LOOM_RETURN_IF_ERROR(need(2));
    return InferElementwiseBinaryShape(opcode, *operands[0], *operands[1]);
  }
  if (opcode == Opcode::kCompare) {
    LOOM_RETURN_IF_ERROR(need(2));
    return InferCompareShape(*operands[0], *operands[1]);
  }
  if (opcode == Opcode::kSelect) {
    LOOM_RETURN_IF_ERROR(need(3));
    return InferSelectShape(*operands[0], *operands[1], *operands[2]);
  }
  return Error{fmt::format("the shape of {} cannot be inferred from its operands alone",
                           OpcodeName(opcode))};
}

class Parser {
 public:
  explicit Parser(std::string_view text) : lexer_(text) {}

  Expected<std::unique_ptr<Module>> Run();

 private:
  // --- errors --------------------------------------------------------------
  Error ErrorHere(std::string message) {
    if (lexer_.error()) return *lexer_.error();
    if (lexer_.AtEnd()) {
      return Error{"unexpected end of input: " + message, lexer_.EndLoc()};
    }
    return Error{std::move(message), lexer_.Loc()};
  }
  Error ErrorExpected(std::string_view what) {
    if (lexer_.AtEnd()) return ErrorHere(fmt::format("expected {}", what));
    std::string_view word = lexer_.PeekWord();
    std::string found =
        word.empty() ? fmt::format("'{}'", lexer_.Peek()) : fmt::format("'{}'", word);
    return ErrorHere(fmt::format("expected {}, found {}", what, found));
  }
  Status Expect(char c, std::string_view context) {
    if (lexer_.TryConsume(c)) return OkStatus();
    return ErrorExpected(fmt::format("'{}' {}", c, context));
  }

  // --- module level ----------------------------------------------------------
  Status ParseHeader();
  Status ParseHeaderAttribute();
  Status ParseDebugSections();
  Status ParseComputation();
  Status ResolveCalls();

  // --- computations and instructions -----------------------------------------
  Expected<DeclaredSignature> ParseSignature();
  Status ParseInstruction(Computation& computation, bool& saw_root);
  // `SHAPE opcode(operands)`; `shape` is given when the caller already read it
  // (inline operands). depth > 0 for inline operands.
  Expected<Instruction*> ParseInstructionBody(Computation& computation, std::string name,
                                              SourceLoc loc, std::optional<Shape> shape, int depth);
  bool AtInlineInstruction();
  Status ParseOperands(Computation& computation, Instruction& instruction, int depth);
  Status ParseAttributes(Instruction& instruction);
  Status ParseAttribute(Instruction& instruction);
  Status ResolveReferences(Computation& computation);
  Status InferMissingShapes();
  Status CheckSignature(const Computation& computation, const DeclaredSignature& signature);

  // --- shapes and values ------------------------------------------------------
  Expected<Shape> ParseShape(int depth = 0);
  Expected<Shape> ParseArrayShape();
  Expected<Layout> ParseLayout();
  bool AtShape();
  Expected<int64_t> ParseInt(std::string_view what);
  Expected<std::vector<int64_t>> ParseIntList(char open, char close, std::string_view what);
  Expected<std::vector<std::vector<int64_t>>> ParseIntListList(std::string_view what);
  Expected<ReplicaGroups> ParseReplicaGroups();
  Expected<std::vector<SliceDim>> ParseSlice();
  Expected<std::vector<PadDim>> ParsePadding();
  Expected<bool> ParseBool();
  Status ParseCalled(Instruction& instruction, std::string key);
  Status ParseControlPredecessors(Instruction& instruction);

  Lexer lexer_;
  std::unique_ptr<Module> module_;
  std::vector<PendingRef> pending_refs_;
  std::vector<PendingCall> pending_calls_;
  std::vector<std::unique_ptr<Instruction>> inline_operands_;
  std::vector<Instruction*> shapes_to_infer_;
  int inline_count_ = 0;
  // Module::FindComputation is a linear scan; a module of 10^4 computations
  // must not parse in quadratic time.
  std::unordered_map<std::string, Computation*> computation_by_name_;
};

Expected<std::unique_ptr<Module>> Parser::Run() {
  LOOM_RETURN_IF_ERROR(ParseHeader());
  LOOM_RETURN_IF_ERROR(ParseDebugSections());
  while (!lexer_.AtEnd()) {
    LOOM_RETURN_IF_ERROR(ParseComputation());
  }
  if (lexer_.error()) return *lexer_.error();
  if (module_->computations().empty()) {
    return ErrorHere("expected a computation: the module has none");
  }
  LOOM_RETURN_IF_ERROR(ResolveCalls());
  // Without an ENTRY keyword XLA takes the last computation as the entry;
  // Loom does so only for a module of one computation. With several, the
  // likeliest cause is a file cut short before its ENTRY, and taking a
  // callee for the program would run the wrong thing without a word.
  if (!module_->entry()) {
    if (module_->computations().size() > 1) {
      return Error{
          fmt::format("no computation is marked ENTRY among the module's {}, and the "
                      "last one, %{}, is not taken for it (is the file cut short?); "
                      "mark the entry computation with ENTRY",
                      module_->computations().size(), module_->computations().back()->name()),
          module_->computations().back()->loc()};
    }
    module_->set_entry(module_->computations().back().get());
  }
  return std::move(module_);
}

Status Parser::ParseHeader() {
  if (lexer_.PeekWord() != "HloModule") return ErrorExpected("'HloModule'");
  const SourceLoc loc = lexer_.Loc();
  lexer_.ReadWord();
  const std::string_view name = lexer_.ReadName();
  if (name.empty()) return ErrorExpected("a module name after 'HloModule'");
  module_ = std::make_unique<Module>(std::string(name));
  module_->set_loc(loc);
  while (lexer_.TryConsume(',')) {
    LOOM_RETURN_IF_ERROR(ParseHeaderAttribute());
  }
  return OkStatus();
}

Status Parser::ParseHeaderAttribute() {
  const SourceLoc key_loc = lexer_.Loc();
  const std::string key(lexer_.ReadWord());
  if (key.empty()) return ErrorExpected("a module attribute");
  LOOM_RETURN_IF_ERROR(Expect('=', fmt::format("after module attribute '{}'", key)));
  if (key == "num_partitions" || key == "replica_count") {
    LOOM_ASSIGN_OR_RETURN(int64_t count, ParseInt(key));
    if (count <= 0) return ErrorHere(fmt::format("{} must be positive", key));
    (key == "num_partitions" ? module_->set_num_partitions(count)
                             : module_->set_replica_count(count));
    return OkStatus();
  }
  if (key == "is_scheduled") {
    LOOM_ASSIGN_OR_RETURN(bool scheduled, ParseBool());
    module_->set_is_scheduled(scheduled);
    return OkStatus();
  }
  LOOM_ASSIGN_OR_RETURN(std::string value, lexer_.ReadRawValue());
  module_->AddHeaderAttribute({key, std::move(value), key_loc});
  return OkStatus();
}

Status Parser::ParseDebugSections() {
  for (;;) {
    const std::string_view word = lexer_.PeekWord();
    if (std::find(std::begin(kDebugSectionTitles), std::end(kDebugSectionTitles), word) ==
        std::end(kDebugSectionTitles)) {
      return OkStatus();
    }
    DebugSection section{std::string(lexer_.ReadWord()), {}};
    // Entries: `ID TEXT` lines, each starting with a number.
    while (lexer_.Peek() >= '0' && lexer_.Peek() <= '9') {
      section.lines.emplace_back(lexer_.ReadRestOfLine());
    }
    module_->AddDebugSection(std::move(section));
  }
}

Status Parser::ParseComputation() {
  const bool is_entry = lexer_.PeekWord() == "ENTRY";
  if (is_entry) lexer_.ReadWord();
  const SourceLoc loc = lexer_.Loc();
  const std::string name(lexer_.ReadName());
  if (name.empty()) return ErrorExpected("a computation name");
  if (computation_by_name_.count(name)) {
    return Error{fmt::format("duplicate computation name %{}", name), loc};
  }
  std::optional<DeclaredSignature> signature;
  if (lexer_.Peek() == '(') {
    LOOM_ASSIGN_OR_RETURN(signature, ParseSignature());
  }
  LOOM_RETURN_IF_ERROR(Expect('{', fmt::format("to open computation %{}", name)));

  auto owned = std::make_unique<Computation>(name);
  owned->set_loc(loc);
  Computation& computation = *module_->AddComputation(std::move(owned));
  computation_by_name_.emplace(name, &computation);
  if (is_entry) {
    if (module_->entry()) {
      return Error{fmt::format("second ENTRY computation %{}", name), loc};
    }
    module_->set_entry(&computation);
  }
  bool saw_root = false;
  while (!lexer_.TryConsume('}')) {
    if (lexer_.AtEnd())
      return ErrorHere(fmt::format("expected '}}' to close computation %{}", name));
    LOOM_RETURN_IF_ERROR(ParseInstruction(computation, saw_root));
  }
  if (computation.instructions().empty()) {
    return Error{fmt::format("computation %{} has no instructions", name), loc};
  }
  if (!saw_root) computation.set_root(computation.instructions().back().get());
  LOOM_RETURN_IF_ERROR(ResolveReferences(computation));
  if (signature) LOOM_RETURN_IF_ERROR(CheckSignature(computation, *signature));
  return OkStatus();
}

Expected<DeclaredSignature> Parser::ParseSignature() {
  DeclaredSignature signature;
  LOOM_RETURN_IF_ERROR(Expect('(', "to open the parameter list"));
  if (!lexer_.TryConsume(')')) {
    do {
      const std::string name(lexer_.ReadName());
      if (name.empty()) return ErrorExpected("a parameter name");
      LOOM_RETURN_IF_ERROR(Expect(':', "after the parameter name"));
      LOOM_ASSIGN_OR_RETURN(Shape shape, ParseShape());
      signature.params.emplace_back(name, std::move(shape));
    } while (lexer_.TryConsume(','));
    LOOM_RETURN_IF_ERROR(Expect(')', "to close the parameter list"));
  }
  if (!lexer_.TryConsume("->")) return ErrorExpected("'->' before the result shape");
  LOOM_ASSIGN_OR_RETURN(signature.result, ParseShape());
  return signature;
}

Status Parser::CheckSignature(const Computation& computation, const DeclaredSignature& signature) {
  const std::vector<Instruction*> params = computation.parameters();
  int64_t param_count = 0;
  for (const auto& instruction : computation.instructions()) {
    param_count += instruction->opcode() == Opcode::kParameter ? 1 : 0;
  }
  if (param_count != static_cast<int64_t>(signature.params.size())) {
    return Error{fmt::format("computation %{} declares {} parameter(s) but its body has {}",
                             computation.name(), signature.params.size(), param_count),
                 computation.loc()};
  }
  for (size_t i = 0; i < signature.params.size(); ++i) {
    const Instruction* param = i < params.size() ? params[i] : nullptr;
    if (param && !param->shape().Compatible(signature.params[i].second)) {
      return Error{fmt::format("computation %{} declares parameter {} as {} but %{} is {}",
                               computation.name(), i, signature.params[i].second.ToString(false),
                               param->name(), param->shape().ToString(false)),
                   computation.loc()};
    }
  }
  if (!computation.root()->shape().Compatible(signature.result)) {
    return Error{
        fmt::format("computation %{} declares result {} but its root %{} is {}", computation.name(),
                    signature.result.ToString(false), computation.root()->name(),
                    computation.root()->shape().ToString(false)),
        computation.loc()};
  }
  return OkStatus();
}

Status Parser::ParseInstruction(Computation& computation, bool& saw_root) {
  bool is_root = false;
  if (lexer_.PeekWord() == "ROOT") {
    lexer_.ReadWord();
    is_root = true;
  }
  const SourceLoc loc = lexer_.Loc();
  const std::string name(lexer_.ReadName());
  if (name.empty()) return ErrorExpected("an instruction name");
  LOOM_RETURN_IF_ERROR(Expect('=', fmt::format("after instruction name %{}", name)));
  LOOM_ASSIGN_OR_RETURN(Instruction * instruction,
                        ParseInstructionBody(computation, name, loc, std::nullopt, 0));
  LOOM_RETURN_IF_ERROR(ParseAttributes(*instruction));
  if (is_root) {
    if (saw_root) {
      return Error{
          fmt::format("second ROOT instruction %{} in computation %{}", name, computation.name()),
          loc};
    }
    saw_root = true;
    computation.set_root(instruction);
  }
  return OkStatus();
}

Expected<Instruction*> Parser::ParseInstructionBody(Computation& computation, std::string name,
                                                    SourceLoc loc, std::optional<Shape> shape,
                                                    int depth) {
  if (depth > kMaxNesting) return ErrorHere("inline operands nested too deeply");
  // Newer XLA also accepts an instruction with no shape (`%c = get-tuple-
  // element(%p), index=0`); its shape is inferred once operands resolve.
  if (!shape && !AtInlineInstruction()) {
    LOOM_ASSIGN_OR_RETURN(shape, ParseShape());
  }
  const bool infer_shape = !shape.has_value();
  if (infer_shape) shape = Shape::Tuple({});
  const SourceLoc opcode_loc = lexer_.Loc();
  const std::string_view opcode_name = lexer_.ReadWord();
  if (opcode_name.empty()) return ErrorExpected("an opcode");
  const std::optional<Opcode> opcode = ParseOpcode(opcode_name);
  if (!opcode) return Error{fmt::format("unknown opcode '{}'", opcode_name), opcode_loc};

  auto owned = std::make_unique<Instruction>(std::move(name), *opcode, std::move(*shape));
  owned->set_loc(loc);
  Instruction& instruction = *owned;
  if (infer_shape) shapes_to_infer_.push_back(&instruction);
  LOOM_RETURN_IF_ERROR(Expect('(', fmt::format("after opcode {}", opcode_name)));
  if (*opcode == Opcode::kConstant) {
    LOOM_ASSIGN_OR_RETURN(std::string literal, lexer_.ReadBalancedUntil(')'));
    if (literal.empty()) return Error{"constant without a literal", opcode_loc};
    instruction.set_literal(std::move(literal));
  } else if (*opcode == Opcode::kParameter) {
    LOOM_ASSIGN_OR_RETURN(int64_t number, ParseInt("a parameter number"));
    if (number < 0) return ErrorHere("negative parameter number");
    instruction.set_parameter_number(number);
    LOOM_RETURN_IF_ERROR(Expect(')', "after the parameter number"));
  } else {
    LOOM_RETURN_IF_ERROR(ParseOperands(computation, instruction, depth));
  }
  // Inline operands are read before their user and must precede it.
  if (depth == 0) {
    for (auto& inline_operand : inline_operands_) {
      computation.AddInstruction(std::move(inline_operand));
    }
    inline_operands_.clear();
    return computation.AddInstruction(std::move(owned));
  }
  inline_operands_.push_back(std::move(owned));
  return &instruction;
}

bool Parser::AtInlineInstruction() {
  const std::string_view word = lexer_.PeekWord();
  if (word.empty() || word.front() == '%' || !ParseOpcode(word)) return false;
  const size_t start = lexer_.offset();
  lexer_.ReadWord();
  const bool call_syntax = lexer_.Peek() == '(';
  lexer_.Rewind(start);
  return call_syntax;
}

Status Parser::ParseOperands(Computation& computation, Instruction& instruction, int depth) {
  if (lexer_.TryConsume(')')) return OkStatus();
  do {
    const SourceLoc loc = lexer_.Loc();
    // An operand may be printed with its shape (`f32[8]{0} %x`) or be a
    // whole inline instruction (`s32[] constant(1)`).
    if (AtShape()) {
      LOOM_ASSIGN_OR_RETURN(Shape shape, ParseShape());
      if (AtInlineInstruction()) {
        std::string name = fmt::format("{}.inline.{}", lexer_.PeekWord(), inline_count_++);
        LOOM_ASSIGN_OR_RETURN(
            Instruction * operand,
            ParseInstructionBody(computation, std::move(name), loc, std::move(shape), depth + 1));
        instruction.AppendOperand(operand);
        continue;
      }
    }
    const SourceLoc name_loc = lexer_.Loc();
    const std::string name(lexer_.ReadName());
    if (name.empty()) return ErrorExpected("an operand name");
    instruction.AppendOperand(nullptr);
    pending_refs_.push_back({&instruction, name, name_loc});
  } while (lexer_.TryConsume(','));
  return Expect(')', fmt::format("to close the operands of %{}", instruction.name()));
}

Status Parser::ParseAttributes(Instruction& instruction) {
  while (lexer_.TryConsume(',')) {
    LOOM_RETURN_IF_ERROR(ParseAttribute(instruction));
  }
  return OkStatus();
}

Status Parser::ParseAttribute(Instruction& instruction) {
  const SourceLoc key_loc = lexer_.Loc();
  const std::string key(lexer_.ReadWord());
  if (key.empty()) return ErrorExpected("an attribute name");
  LOOM_RETURN_IF_ERROR(Expect('=', fmt::format("after attribute '{}'", key)));
  Attributes& attrs = instruction.mutable_attrs();
  auto duplicate = [&](bool present) -> Status {
    if (!present) return OkStatus();
    return Error{fmt::format("attribute '{}' given twice", key), key_loc};
  };
  if (key == "dimensions") {
    LOOM_RETURN_IF_ERROR(duplicate(attrs.dimensions.has_value()));
    LOOM_ASSIGN_OR_RETURN(attrs.dimensions, ParseIntList('{', '}', key));
  } else if (key == "lhs_batch_dims" || key == "rhs_batch_dims" || key == "lhs_contracting_dims" ||
             key == "rhs_contracting_dims") {
    if (!attrs.dot) attrs.dot.emplace();
    std::vector<int64_t>& dims = key == "lhs_batch_dims"         ? attrs.dot->lhs_batch
                                 : key == "rhs_batch_dims"       ? attrs.dot->rhs_batch
                                 : key == "lhs_contracting_dims" ? attrs.dot->lhs_contracting
                                                                 : attrs.dot->rhs_contracting;
    LOOM_ASSIGN_OR_RETURN(dims, ParseIntList('{', '}', key));
  } else if (key == "replica_groups") {
    LOOM_RETURN_IF_ERROR(duplicate(attrs.replica_groups.has_value()));
    LOOM_ASSIGN_OR_RETURN(attrs.replica_groups, ParseReplicaGroups());
  } else if (key == "source_target_pairs") {
    LOOM_RETURN_IF_ERROR(duplicate(attrs.source_target_pairs.has_value()));
    const SourceLoc loc = lexer_.Loc();
    LOOM_ASSIGN_OR_RETURN(auto pairs, ParseIntListList(key));
    attrs.source_target_pairs.emplace();
    for (const auto& pair : pairs) {
      if (pair.size() != 2) return Error{"a source-target pair needs exactly two ids", loc};
      attrs.source_target_pairs->emplace_back(pair[0], pair[1]);
    }
  } else if (key == "channel_id") {
    LOOM_ASSIGN_OR_RETURN(attrs.channel_id, ParseInt(key));
  } else if (key == "use_global_device_ids") {
    LOOM_ASSIGN_OR_RETURN(attrs.use_global_device_ids, ParseBool());
  } else if (key == "slice") {
    LOOM_ASSIGN_OR_RETURN(attrs.slice, ParseSlice());
  } else if (key == "dynamic_slice_sizes") {
    LOOM_ASSIGN_OR_RETURN(attrs.dynamic_slice_sizes, ParseIntList('{', '}', key));
  } else if (key == "padding" && instruction.opcode() == Opcode::kPad) {
    LOOM_ASSIGN_OR_RETURN(attrs.padding, ParsePadding());
  } else if (key == "direction") {
    const SourceLoc loc = lexer_.Loc();
    const std::string_view word = lexer_.ReadWord();
    attrs.direction = ParseComparisonDirection(word);
    if (!attrs.direction) {
      return Error{fmt::format("unknown comparison direction '{}'", word), loc};
    }
  } else if (key == "index" && instruction.opcode() == Opcode::kGetTupleElement) {
    LOOM_ASSIGN_OR_RETURN(attrs.tuple_index, ParseInt(key));
  } else if (key == "iota_dimension") {
    LOOM_ASSIGN_OR_RETURN(attrs.iota_dimension, ParseInt(key));
  } else if (key == "custom_call_target") {
    LOOM_ASSIGN_OR_RETURN(std::string target, lexer_.ReadQuotedString());
    attrs.custom_call_target = target.substr(1, target.size() - 2);
  } else if (key == "to_apply" || key == "calls" || key == "condition" || key == "body" ||
             key == "branch_computations" || key == "true_computation" ||
             key == "false_computation" || key == "select" || key == "scatter") {
    LOOM_RETURN_IF_ERROR(ParseCalled(instruction, key));
  } else if (key == "control-predecessors") {
    LOOM_RETURN_IF_ERROR(ParseControlPredecessors(instruction));
  } else {
    LOOM_ASSIGN_OR_RETURN(std::string value, lexer_.ReadRawValue());
    attrs.raw.push_back({key, std::move(value), key_loc});
  }
  return OkStatus();
}

Status Parser::ParseCalled(Instruction& instruction, std::string key) {
  Attributes& attrs = instruction.mutable_attrs();
  CalledAttribute called{std::move(key), {}, false};
  std::vector<std::pair<std::string, SourceLoc>> names;
  if (lexer_.TryConsume('{')) {
    called.braced = true;
    if (!lexer_.TryConsume('}')) {
      do {
        const SourceLoc loc = lexer_.Loc();
        std::string name(lexer_.ReadName());
        if (name.empty()) return ErrorExpected("a computation name");
        names.emplace_back(std::move(name), loc);
      } while (lexer_.TryConsume(','));
      LOOM_RETURN_IF_ERROR(Expect('}', "to close the computation list"));
    }
  } else {
    const SourceLoc loc = lexer_.Loc();
    std::string name(lexer_.ReadName());
    if (name.empty()) return ErrorExpected("a computation name");
    names.emplace_back(std::move(name), loc);
  }
  const size_t index = attrs.called.size();
  called.computations.assign(names.size(), nullptr);
  attrs.called.push_back(std::move(called));
  for (auto& [name, loc] : names) {
    pending_calls_.push_back({&instruction, index, std::move(name), loc});
  }
  return OkStatus();
}

Status Parser::ParseControlPredecessors(Instruction& instruction) {
  LOOM_RETURN_IF_ERROR(Expect('{', "to open control-predecessors"));
  if (lexer_.TryConsume('}')) return OkStatus();
  do {
    const SourceLoc loc = lexer_.Loc();
    const std::string name(lexer_.ReadName());
    if (name.empty()) return ErrorExpected("an instruction name");
    pending_refs_.push_back({&instruction, name, loc, /*control=*/true});
  } while (lexer_.TryConsume(','));
  return Expect('}', "to close control-predecessors");
}

Status Parser::ResolveReferences(Computation& computation) {
  std::unordered_map<std::string_view, Instruction*> by_name;
  for (const auto& instruction : computation.instructions()) {
    if (!by_name.emplace(instruction->name(), instruction.get()).second) {
      return Error{fmt::format("duplicate instruction name %{} in computation %{}",
                               instruction->name(), computation.name()),
                   instruction->loc()};
    }
  }
  // Operands were appended as placeholders in order; fill them in the same
  // order per user.
  std::unordered_map<Instruction*, int64_t> next_operand;
  for (const PendingRef& ref : pending_refs_) {
    auto it = by_name.find(ref.name);
    if (it == by_name.end()) {
      return Error{fmt::format("use of undefined instruction %{} in computation %{}", ref.name,
                               computation.name()),
                   ref.loc};
    }
    if (ref.control) {
      ref.user->mutable_attrs().control_predecessors.push_back(it->second);
      continue;
    }
    int64_t& next = next_operand[ref.user];
    while (ref.user->operand(next) != nullptr) ++next;
    ref.user->ReplaceOperand(next, it->second);
  }
  pending_refs_.clear();
  return InferMissingShapes();
}

Status Parser::InferMissingShapes() {
  // In text order, so an operand's shape is known before its user's.
  for (Instruction* instruction : shapes_to_infer_) {
    Expected<Shape> shape = InferShapeOfShapeless(*instruction);
    if (!shape.ok()) {
      return Error{
          fmt::format("%{} has no shape and {}", instruction->name(), shape.error().message),
          instruction->loc()};
    }
    instruction->set_shape(std::move(shape).value());
  }
  shapes_to_infer_.clear();
  return OkStatus();
}

Status Parser::ResolveCalls() {
  for (const PendingCall& call : pending_calls_) {
    auto found = computation_by_name_.find(call.name);
    if (found == computation_by_name_.end()) {
      return Error{fmt::format("use of undefined computation %{}", call.name), call.loc};
    }
    Computation* callee = found->second;
    auto& computations = call.user->mutable_attrs().called[call.attribute].computations;
    *std::find(computations.begin(), computations.end(), nullptr) = callee;
  }
  pending_calls_.clear();
  return OkStatus();
}

bool Parser::AtShape() {
  if (lexer_.Peek() == '(') return true;
  const std::string_view word = lexer_.PeekWord();
  if (word.empty() || word.front() == '%') return false;
  if (!ParsePrimitiveType(word)) return false;
  const size_t start = lexer_.offset();
  lexer_.ReadWord();
  const bool bracket = lexer_.Peek() == '[';
  lexer_.Rewind(start);
  return bracket;
}

Expected<Shape> Parser::ParseShape(int depth) {
  if (depth > kMaxNesting) return ErrorHere("tuple shapes nested too deeply");
  if (lexer_.TryConsume('(')) {
    std::vector<Shape> elements;
    if (!lexer_.TryConsume(')')) {
      do {
        LOOM_ASSIGN_OR_RETURN(Shape element, ParseShape(depth + 1));
        elements.push_back(std::move(element));
      } while (lexer_.TryConsume(','));
      LOOM_RETURN_IF_ERROR(Expect(')', "to close the tuple shape"));
    }
    return Shape::Tuple(std::move(elements));
  }
  return ParseArrayShape();
}

Expected<Shape> Parser::ParseArrayShape() {
  const SourceLoc loc = lexer_.Loc();
  const std::string_view type_name = lexer_.PeekWord();
  const std::optional<PrimitiveType> type = ParsePrimitiveType(type_name);
  if (!type) {
    if (type_name.empty()) return ErrorExpected("a shape");
    return Error{fmt::format("unknown element type '{}'", type_name), loc};
  }
  lexer_.ReadWord();
  LOOM_RETURN_IF_ERROR(Expect('[', fmt::format("after element type {}", type_name)));
  std::vector<int64_t> dims;
  std::vector<bool> dynamic;
  if (!lexer_.TryConsume(']')) {
    do {
      const bool bounded = lexer_.TryConsume("<=");
      const SourceLoc dim_loc = lexer_.Loc();
      if (lexer_.Peek() == '?')
        return Error{"unbounded dynamic dimensions are not supported", dim_loc};
      LOOM_ASSIGN_OR_RETURN(int64_t dim, ParseInt("a dimension size"));
      if (dim < 0) return Error{fmt::format("negative dimension size {}", dim), dim_loc};
      dims.push_back(dim);
      dynamic.push_back(bounded);
    } while (lexer_.TryConsume(','));
    LOOM_RETURN_IF_ERROR(Expect(']', "to close the dimensions"));
  }
  if (*type == PrimitiveType::kToken && !dims.empty()) {
    return Error{"a token shape has no dimensions", loc};
  }
  // Sizes are computed in int64_t bits everywhere downstream: reject shapes
  // whose size cannot be represented rather than overflow later.
  int64_t bits = std::max(PrimitiveTypeBits(*type), 1);
  for (int64_t dim : dims) {
    if (__builtin_mul_overflow(bits, std::max<int64_t>(dim, 1), &bits)) {
      return Error{fmt::format("shape {}[...] is too large", type_name), loc};
    }
  }
  Shape shape(*type, std::move(dims));
  shape.set_dynamic(std::move(dynamic));
  // A layout follows with no space: `f32[8]{0}`. A `{` after a space is
  // something else, such as the body of `%c (p: f32[2]) -> f32[2] {`.
  if (lexer_.PeekImmediate() == '{') {
    LOOM_ASSIGN_OR_RETURN(Layout layout, ParseLayout());
    if (!layout.minor_to_major.empty() &&
        static_cast<int64_t>(layout.minor_to_major.size()) != shape.rank()) {
      return Error{fmt::format("layout {} does not match the rank of {}", layout.ToString(),
                               shape.ToString(false)),
                   loc};
    }
    shape.set_layout(std::move(layout));
  }
  return shape;
}

Expected<Layout> Parser::ParseLayout() {
  LOOM_RETURN_IF_ERROR(Expect('{', "to open the layout"));
  Layout layout;
  if (lexer_.Peek() != ':' && lexer_.Peek() != '}') {
    do {
      LOOM_ASSIGN_OR_RETURN(int64_t dim, ParseInt("a layout dimension"));
      layout.minor_to_major.push_back(dim);
    } while (lexer_.TryConsume(','));
  }
  if (lexer_.TryConsume(':')) {
    while (lexer_.Peek() != '}' && !lexer_.AtEnd()) {
      LayoutItem item;
      const SourceLoc loc = lexer_.Loc();
      while (!lexer_.AtEnd() && lexer_.Peek() != '(' && lexer_.Peek() != '}') {
        item.tag += lexer_.Peek();
        lexer_.Rewind(lexer_.offset() + 1);
      }
      if (item.tag.empty() || lexer_.Peek() != '(') {
        return Error{"expected a layout attribute such as T(8,128) or S(1)", loc};
      }
      while (lexer_.TryConsume('(')) {
        LOOM_ASSIGN_OR_RETURN(std::string args, lexer_.ReadBalancedUntil(')'));
        item.args += "(" + args + ")";
      }
      layout.items.push_back(std::move(item));
    }
  }
  LOOM_RETURN_IF_ERROR(Expect('}', "to close the layout"));
  return layout;
}

Expected<int64_t> Parser::ParseInt(std::string_view what) {
  if (std::optional<int64_t> value = lexer_.ReadInt()) return *value;
  return ErrorExpected(what);
}

Expected<bool> Parser::ParseBool() {
  const std::string_view word = lexer_.PeekWord();
  if (word == "true" || word == "false") {
    lexer_.ReadWord();
    return word == "true";
  }
  return ErrorExpected("true or false");
}

Expected<std::vector<int64_t>> Parser::ParseIntList(char open, char close, std::string_view what) {
  LOOM_RETURN_IF_ERROR(Expect(open, fmt::format("to open {}", what)));
  std::vector<int64_t> values;
  if (lexer_.TryConsume(close)) return values;
  do {
    LOOM_ASSIGN_OR_RETURN(int64_t value, ParseInt(fmt::format("an integer in {}", what)));
    values.push_back(value);
  } while (lexer_.TryConsume(','));
  LOOM_RETURN_IF_ERROR(Expect(close, fmt::format("to close {}", what)));
  return values;
}

Expected<std::vector<std::vector<int64_t>>> Parser::ParseIntListList(std::string_view what) {
  LOOM_RETURN_IF_ERROR(Expect('{', fmt::format("to open {}", what)));
  std::vector<std::vector<int64_t>> lists;
  if (lexer_.TryConsume('}')) return lists;
  do {
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> list, ParseIntList('{', '}', what));
    lists.push_back(std::move(list));
  } while (lexer_.TryConsume(','));
  LOOM_RETURN_IF_ERROR(Expect('}', fmt::format("to close {}", what)));
  return lists;
}

Expected<ReplicaGroups> Parser::ParseReplicaGroups() {
  if (lexer_.Peek() == '{') {
    LOOM_ASSIGN_OR_RETURN(auto groups, ParseIntListList("replica_groups"));
    return ReplicaGroups::Explicit(std::move(groups));
  }
  // Iota form: [G,S]<=[dims] with an optional T(perm).
  const SourceLoc loc = lexer_.Loc();
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ParseIntList('[', ']', "replica_groups"));
  if (sizes.size() != 2) {
    return Error{"iota replica groups need [group_count,group_size]", loc};
  }
  if (!lexer_.TryConsume("<=")) return ErrorExpected("'<=' in iota replica groups");
  IotaReplicaGroups iota{sizes[0], sizes[1], {}, {}};
  LOOM_ASSIGN_OR_RETURN(iota.reshape_dims, ParseIntList('[', ']', "replica_groups"));
  if (lexer_.PeekWord() == "T") {
    lexer_.ReadWord();
    LOOM_ASSIGN_OR_RETURN(iota.transpose, ParseIntList('(', ')', "replica_groups transpose"));
  }
  if (std::string problem = ReplicaGroups::Iota(iota).ValidateIota(); !problem.empty()) {
    return Error{problem, loc};
  }
  // [G*S] with no transpose is the plain iota: keep the shorter form.
  if (iota.transpose.empty() && iota.reshape_dims.size() == 1 &&
      iota.reshape_dims[0] == iota.num_groups * iota.group_size) {
    iota.reshape_dims.clear();
  }
  ReplicaGroups groups = ReplicaGroups::Iota(std::move(iota));
  if (std::string problem = groups.ValidateIota(); !problem.empty()) return Error{problem, loc};
  return groups;
}

Expected<std::vector<SliceDim>> Parser::ParseSlice() {
  LOOM_RETURN_IF_ERROR(Expect('{', "to open slice"));
  std::vector<SliceDim> dims;
  if (lexer_.TryConsume('}')) return dims;
  do {
    LOOM_RETURN_IF_ERROR(Expect('[', "to open a slice dimension"));
    SliceDim dim;
    LOOM_ASSIGN_OR_RETURN(dim.start, ParseInt("a slice start"));
    LOOM_RETURN_IF_ERROR(Expect(':', "after the slice start"));
    LOOM_ASSIGN_OR_RETURN(dim.limit, ParseInt("a slice limit"));
    if (lexer_.TryConsume(':')) {
      LOOM_ASSIGN_OR_RETURN(dim.stride, ParseInt("a slice stride"));
    }
    LOOM_RETURN_IF_ERROR(Expect(']', "to close a slice dimension"));
    dims.push_back(dim);
  } while (lexer_.TryConsume(','));
  LOOM_RETURN_IF_ERROR(Expect('}', "to close slice"));
  return dims;
}

Expected<std::vector<PadDim>> Parser::ParsePadding() {
  // `0_0x1_1_0`: dimensions separated by 'x', each low_high[_interior].
  const SourceLoc loc = lexer_.Loc();
  const std::string_view text = lexer_.ReadWord();
  std::vector<PadDim> dims;
  size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    size_t end = text.find('x', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view part = text.substr(start, end - start);
    std::vector<int64_t> values;
    size_t p = 0;
    while (p <= part.size()) {
      size_t q = part.find('_', p);
      if (q == std::string_view::npos) q = part.size();
      int64_t value = 0;
      auto [ptr, ec] = std::from_chars(part.data() + p, part.data() + q, value);
      if (ec != std::errc() || ptr != part.data() + q) {
        return Error{fmt::format("malformed padding '{}'", text), loc};
      }
      values.push_back(value);
      p = q + 1;
    }
    if (values.size() < 2 || values.size() > 3) {
      return Error{fmt::format("malformed padding '{}': want low_high[_interior]", text), loc};
    }
    dims.push_back({values[0], values[1], values.size() == 3 ? values[2] : 0});
    start = end + 1;
  }
  if (dims.empty()) return Error{"expected a padding configuration", loc};
  return dims;
}

}  // namespace

Expected<std::unique_ptr<Module>> ParseModule(std::string_view text) { return Parser(text).Run(); }

Expected<std::unique_ptr<Module>> ParseModuleFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return Error{fmt::format("cannot read {}", path)};
  // In pieces, up to a bound: the path may be a device or a pipe that never
  // ends (/dev/zero), whose size nothing tells in advance.
  std::string text;
  std::string piece(size_t{1} << 20, '\0');
  while (file) {
    file.read(piece.data(), static_cast<std::streamsize>(piece.size()));
    text.append(piece.data(), static_cast<size_t>(file.gcount()));
    if (text.size() > kMaxModuleBytes) {
      return Error{fmt::format("{} is larger than {} MiB, the most Loom reads as one module", path,
                               kMaxModuleBytes >> 20)};
    }
  }
  if (file.bad()) return Error{fmt::format("cannot read {}", path)};
  return ParseModule(text);
}

}  // namespace loom::ir
