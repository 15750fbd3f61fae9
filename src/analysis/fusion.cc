#include "analysis/fusion.h"

#include <utility>

#include "ir/opcode.h"

namespace loom::analysis {

using ir::Instruction;
using ir::Opcode;

bool IsLoopFusible(Opcode opcode) {
  if (ir::IsElementwiseUnary(opcode) || ir::IsElementwiseBinary(opcode)) return true;
  switch (opcode) {
    case Opcode::kConvert:
    case Opcode::kSelect:
    case Opcode::kClamp:
    case Opcode::kCompare:
    case Opcode::kBroadcast:
    case Opcode::kIota:
    case Opcode::kTranspose:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kGather:
    case Opcode::kConcatenate:
    case Opcode::kPad:
    case Opcode::kReverse:
    case Opcode::kReshape:
    case Opcode::kBitcast:
      return true;
    default:
      return false;
  }
}

bool FoldsIntoUsers(const Instruction& instruction) {
  const Opcode opcode = instruction.opcode();
  return instruction.shape().IsArray() && instruction.shape().ElementCount() <= 1 &&
         opcode != Opcode::kDot && opcode != Opcode::kReduce && opcode != Opcode::kCustomCall;
}

namespace {

using Uses = std::vector<std::pair<const Instruction*, int64_t>>;  // (user, operand index)

// Whether `user` takes operand `index` into its own kernel.
bool TakesIn(const Instruction& user, int64_t index) {
  if (IsLoopFusible(user.opcode())) return true;
  if (user.opcode() == Opcode::kReduce) return index < user.operand_count() / 2;  // not the inits
  if (user.opcode() == Opcode::kDynamicUpdateSlice) return index == 1;
  // A scatter computes its updates in its own kernel (XLA's scatter fusion).
  if (user.opcode() == Opcode::kScatter) return user.operand_count() == 3 && index == 2;
  return false;
}

// Ops duplicated into each kernel that uses them: a broadcast or an iota,
// which read little or nothing, and a widening convert (bf16 to f32), which
// each kernel does better to read narrow than one kernel to write wide for
// the others (XLA duplicates such cheap elementwise producers too).
bool Duplicable(const Instruction& producer) {
  const Opcode opcode = producer.opcode();
  if (opcode == Opcode::kBroadcast || opcode == Opcode::kIota) return true;
  return opcode == Opcode::kConvert && producer.operand_count() == 1 &&
         producer.shape().ByteSize() > producer.operand(0)->shape().ByteSize();
}

// Ops a dot reads its operand through.
bool FeedsADotInPlace(Opcode opcode) {
  switch (opcode) {
    case Opcode::kConvert:
    case Opcode::kBitcast:
    case Opcode::kReshape:
    case Opcode::kTranspose:
    case Opcode::kBroadcast:
    case Opcode::kCopy:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
      return true;
    default:
      return false;
  }
}

// The dot or convolution whose sum `add` computes in its kernel (XLA's
// output fusion): an operand of its shape that only the add reads, or
// nullptr.
const Instruction* OutputFusionProduct(const Instruction& add,
                                       const std::unordered_map<const Instruction*, Uses>& uses) {
  if (add.opcode() != Opcode::kAdd || add.operand_count() != 2 ||
      add.operand(0) == add.operand(1) || !add.shape().IsArray()) {
    return nullptr;
  }
  for (const Instruction* operand : add.operands()) {
    const Opcode op = operand->opcode();
    if (op != Opcode::kDot && op != Opcode::kConvolution) continue;
    if (operand->parent() != add.parent() || !(operand->shape() == add.shape())) continue;
    const auto found = uses.find(operand);
    if (found != uses.end() && found->second.size() == 1) return operand;
  }
  return nullptr;
}

// The product kernel whose result `store` (a dynamic-update-slice) writes,
// through renames only, into its window: a dot or convolution, or an output
// fusion's add, of which the store is the one reader; else nullptr. That
// kernel writes the window itself (XLA's dynamic-slice fusion on GPU hands
// the GEMM the window as its output; Megatron's gradient-accumulation
// fusion sums each weight gradient into its buffer with beta = 1).
const Instruction* StoredProduct(
    const Instruction& store, const std::unordered_map<const Instruction*, Uses>& uses,
    const std::unordered_map<const Instruction*, const Instruction*>& products) {
  if (store.opcode() != Opcode::kDynamicUpdateSlice) return nullptr;
  auto only_use_is = [&](const Instruction* value, const Instruction* user) {
    const auto found = uses.find(value);
    return value->parent() == store.parent() && found != uses.end() && found->second.size() == 1 &&
           found->second.front().first == user;
  };
  const Instruction* user = &store;
  const Instruction* value = store.operand(1);
  while ((value->opcode() == Opcode::kReshape || value->opcode() == Opcode::kBitcast) &&
         only_use_is(value, user)) {
    user = value;
    value = value->operand(0);
  }
  if (!only_use_is(value, user)) return nullptr;
  const Opcode opcode = value->opcode();
  if (products.count(value) > 0 || opcode == Opcode::kDot || opcode == Opcode::kConvolution) {
    return value;
  }
  return nullptr;
}

// Whether nothing that launches a kernel lies between `product` and `store`
// in the text, which is the schedule the analyses read: only renames,
// scalar arithmetic, parameters and constants. Fused into a store further
// on, the product's kernel would run there, and keep its operands live
// until then (a layer's gathered input, say, till the layer's last store).
bool StoreFollows(const Instruction& product, const Instruction& store) {
  bool between = false;
  for (const auto& owned : store.parent()->instructions()) {
    const Instruction* instruction = owned.get();
    if (instruction == &store) return between;
    if (instruction == &product) {
      between = true;
      continue;
    }
    if (!between) continue;
    const Opcode opcode = instruction->opcode();
    const bool launches_nothing = FoldsIntoUsers(*instruction) || opcode == Opcode::kReshape ||
                                  opcode == Opcode::kBitcast || opcode == Opcode::kParameter ||
                                  opcode == Opcode::kConstant || opcode == Opcode::kGetTupleElement;
    if (!launches_nothing) return false;
  }
  return false;
}

bool ReduceRowFitsOnChip(const Instruction& reduce) {
  if (!reduce.shape().IsArray() || reduce.operand_count() != 2) return false;  // variadic: no
  const int64_t outputs = reduce.shape().ElementCount();
  const int64_t inputs = reduce.operand(0)->shape().ElementCount();
  return outputs > 0 && inputs / outputs <= kMaxFusedReduceRow;
}

// The computation's instructions, each after its operands: program order
// where that already holds (the text may name an operand before defining
// it).
std::vector<const Instruction*> OperandsFirst(const ir::Computation& computation) {
  std::vector<const Instruction*> order;
  std::unordered_set<const Instruction*> placed, open;
  for (const auto& owned : computation.instructions()) {
    std::vector<std::pair<const Instruction*, int64_t>> stack = {{owned.get(), 0}};
    while (!stack.empty()) {
      const Instruction* instruction = stack.back().first;
      const int64_t next = stack.back().second++;
      if (placed.count(instruction) > 0) {
        stack.pop_back();
      } else if (next < instruction->operand_count()) {
        const Instruction* operand = instruction->operand(next);
        open.insert(instruction);
        if (operand->parent() == &computation && placed.count(operand) == 0 &&
            open.count(operand) == 0) {
          stack.emplace_back(operand, 0);
        }
      } else {
        open.erase(instruction);
        placed.insert(instruction);
        order.push_back(instruction);
        stack.pop_back();
      }
    }
  }
  return order;
}

}  // namespace

FusionPlan::FusionPlan(const ir::Computation& computation) {
  std::unordered_map<const Instruction*, Uses> uses;
  for (const auto& instruction : computation.instructions()) {
    for (int64_t i = 0; i < instruction->operand_count(); ++i) {
      uses[instruction->operand(i)].emplace_back(instruction.get(), i);
    }
  }
  // The kernel each instruction is computed in, by its root; nullptr for a
  // duplicated op, in several. Walking users before their operands, every
  // user's kernel is known when its operand is decided.
  std::unordered_map<const Instruction*, const Instruction*> kernel;
  const std::vector<const Instruction*> order = OperandsFirst(computation);
  // A dot that only an add of its shape reads is computed in the add's
  // kernel, which the add roots (below: it is fused into nothing).
  for (const Instruction* instruction : order) {
    const Instruction* product = OutputFusionProduct(*instruction, uses);
    if (product == nullptr || computation.root() == product) continue;
    fused_.insert(product);
    products_[instruction] = product;
  }
  // A product stored into a window of a buffer is written there by its
  // kernel, which the store roots: the add of an output fusion joins it as
  // any elementwise op would (below), a bare product is fused into it here.
  for (const Instruction* instruction : order) {
    const Instruction* stored = StoredProduct(*instruction, uses, products_);
    if (stored == nullptr || !StoreFollows(*stored, *instruction)) continue;
    const auto summed = products_.find(stored);
    if (summed != products_.end()) {
      products_[instruction] = summed->second;
      products_.erase(summed);
    } else {
      fused_.insert(stored);
      products_[instruction] = stored;
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Instruction& producer = **it;
    kernel[&producer] = &producer;
    const auto found = uses.find(&producer);
    if (found == uses.end() || computation.root() == &producer || !producer.shape().IsArray() ||
        FoldsIntoUsers(producer)) {
      continue;
    }
    if (products_.count(&producer) > 0) continue;  // an output fusion's root
    const Uses& users = found->second;
    const bool fusible = IsLoopFusible(producer.opcode()) ||
                         (producer.opcode() == Opcode::kReduce && ReduceRowFitsOnChip(producer));
    if (!fusible) continue;
    const Instruction* shared = kernel[users.front().first];
    bool one_kernel = true;
    bool all_take_in = true;
    for (const auto& [user, index] : users) {
      all_take_in &= TakesIn(*user, index) && !FoldsIntoUsers(*user);
      one_kernel &= shared != nullptr && kernel[user] == shared;
    }
    if (!all_take_in || (!one_kernel && !Duplicable(producer))) continue;
    fused_.insert(&producer);
    kernel[&producer] = one_kernel ? shared : nullptr;
  }
  // A kernel whose root only dots read, and which only reads a value in
  // memory through ops a dot reads through (a convert of a weight's window,
  // of a value other kernels read too), is the dots' operand fusion instead:
  // they read that value themselves. One that computes its value (a convert
  // of a norm's output) stays, and writes the narrower value.
  for (const Instruction* instruction : order) {
    const Instruction& root = *instruction;
    const auto found = uses.find(&root);
    if (FusedIntoUsers(root) || !FeedsADotInPlace(root.opcode()) || found == uses.end() ||
        computation.root() == &root || !root.shape().IsArray()) {
      continue;
    }
    bool only_dots = true;
    for (const auto& [user, index] : found->second) only_dots &= user->opcode() == Opcode::kDot;
    const Instruction* start = root.operand(0);
    while (FusedIntoUsers(*start) && FeedsADotInPlace(start->opcode())) start = start->operand(0);
    if (only_dots && !FusedIntoUsers(*start)) fused_.insert(&root);
  }
  // Each kernel's reads: the operands, from outside it, of its root and of
  // everything fused into it (a fused op's operand is fused into the same
  // kernel, or read from memory).
  for (const Instruction* root : order) {
    if (FusedIntoUsers(*root)) continue;
    std::vector<OperandRead>& reads = reads_[root];
    std::vector<const Instruction*> members = {root};
    std::unordered_set<const Instruction*> visited = {root};
    while (!members.empty()) {
      const Instruction* member = members.back();
      members.pop_back();
      for (int64_t i = 0; i < member->operand_count(); ++i) {
        const Instruction* operand = member->operand(i);
        if (!FusedIntoUsers(*operand)) {
          reads.push_back({member, i});
        } else if (visited.insert(operand).second) {
          members.push_back(operand);
        }
      }
    }
    members_[root] = static_cast<int64_t>(visited.size()) - 1;
  }
}

int64_t FusionPlan::MembersBesidesRoot(const Instruction& root) const {
  const auto it = members_.find(&root);
  return it == members_.end() ? 0 : it->second;
}

const Instruction* FusionPlan::OutputFusedProduct(const Instruction& root) const {
  const auto it = products_.find(&root);
  return it == products_.end() ? nullptr : it->second;
}

const std::vector<OperandRead>& FusionPlan::KernelReads(const Instruction& root) const {
  static const std::vector<OperandRead> kNone;
  const auto it = reads_.find(&root);
  return it == reads_.end() ? kNone : it->second;
}

}  // namespace loom::analysis
