#include "pass/ring/all_to_all_exchange.h"

#include <fmt/format.h>

#include <vector>

#include "ir/computation.h"
#include "pass/ring/block_ops.h"
#include "pass/ring/dimension_trace.h"

namespace loom::pass {

namespace {

using ir::Builder;
using ir::Instruction;
using ir::Opcode;

bool IsAsyncAllToAll(const Instruction& value) {
  if (value.opcode() != Opcode::kAsyncDone || value.operand_count() != 1) return false;
  const Instruction* start = value.operand(0);
  if (start->opcode() != Opcode::kAsyncStart) return false;
  const ir::Computation* wrapped = start->called("calls");
  return wrapped != nullptr && wrapped->root() != nullptr &&
         wrapped->root()->opcode() == Opcode::kAllToAll;
}

// The checks both directions share: one array exchanged along one
// dimension, a ring the group defines, no control edges.
Status CheckExchange(const Instruction& exchange, const Instruction& dot) {
  if (exchange.operand_count() != 1 || !IsPlainArray(exchange.shape()) ||
      !exchange.attrs().dimensions || exchange.attrs().dimensions->size() != 1) {
    return Error{"the all-to-all is not a single array exchanged along one dimension"};
  }
  if (HasControlDependencies(exchange) || HasControlDependencies(dot)) {
    return Error{"the all-to-all or the dot has control dependencies"};
  }
  return OkStatus();
}

std::string_view OutputClassName(const OutputDim& dim) {
  if (dim.dim_class == DimClass::kBatch) return "batch";
  return dim.operand == 0 ? "lhs free" : "rhs free";
}

}  // namespace

std::optional<AllToAllFound> MatchAllToAllBeforeDot(Instruction& dot, int64_t operand,
                                                    const ir::DeviceGrid& grid) {
  std::vector<Instruction*> chain;
  Instruction* value = dot.operand(operand);
  while (IsTraceableOp(*value)) {
    chain.insert(chain.begin(), value);
    value = value->operand(0);
  }
  if (IsAsyncAllToAll(*value)) {
    return AllToAllFound{value, Error{"the all-to-all is already asynchronous (start/done); run "
                                      "collective-matmul before async-collectives"}};
  }
  if (value->opcode() != Opcode::kAllToAll) return std::nullopt;
  Instruction& exchange = *value;
  AllToAllFound found{&exchange, Error{}};
  const auto decline = [&](std::string reason) {
    found.match = Error{std::move(reason)};
    return found;
  };
  if (Status ok = CheckExchange(exchange, dot); !ok.ok()) return decline(ok.error().message);
  Expected<RingGroup> ring = RingGroup::Of(exchange, grid);
  if (!ring.ok()) return decline(ring.error().message);
  AllToAllMatch match;
  match.before_dot = true;
  match.exchange = &exchange;
  match.dot = &dot;
  match.chain = chain;
  match.operand = operand;
  match.ring = *ring;
  int64_t dim = exchange.attrs().dimensions->front();
  const Instruction* previous = &exchange;
  for (Instruction* op : chain) {
    if (!UsedOnlyBy(*previous, *op)) return decline("the exchanged value has other users");
    std::optional<int64_t> traced = TraceDimension(*op, dim, ring->size());
    if (!traced) {
      return decline(fmt::format("the exchanged dimension cannot be traced through %{} ({})",
                                 op->name(), ir::OpcodeName(op->opcode())));
    }
    dim = *traced;
    match.chain_dims.push_back(dim);
    previous = op;
  }
  if (!UsedOnlyBy(*previous, dot)) return decline("the exchanged value has other users");
  match.operand_dim = dim;
  match.operand_class = ClassifyOperandDim(dot, operand, dim);
  if (match.operand_class.dim_class == DimClass::kContracting) {
    return decline(
        "the exchanged dimension is contracting: the rounds would sum the product in a new "
        "order");
  }
  found.match = std::move(match);
  return found;
}

std::optional<AllToAllFound> MatchAllToAllAfterDot(Instruction& dot, const ir::DeviceGrid& grid) {
  const ir::Computation& computation = *dot.parent();
  std::vector<Instruction*> chain;
  Instruction* value = &dot;
  Instruction* exchange = nullptr;
  while (exchange == nullptr) {
    const auto users = computation.Users(value);
    if (users.size() != 1 || computation.root() == value) {
      for (Instruction* user : users) {
        if (user->opcode() == Opcode::kAllToAll) {
          return AllToAllFound{
              user, Error{fmt::format("%{} has other users: the whole product is needed anyway",
                                      value->name())}};
        }
      }
      return std::nullopt;
    }
    Instruction* user = users.front();
    if (user->opcode() == Opcode::kAsyncStart && user->called("calls") != nullptr &&
        user->called("calls")->root() != nullptr &&
        user->called("calls")->root()->opcode() == Opcode::kAllToAll) {
      return AllToAllFound{user, Error{"the all-to-all is already asynchronous (start/done); run "
                                       "collective-matmul before async-collectives"}};
    }
    if (user->opcode() == Opcode::kAllToAll) {
      exchange = user;
    } else if (IsTraceableOp(*user) && UsedOnlyBy(*value, *user)) {
      chain.push_back(user);
      value = user;
    } else {
      return std::nullopt;
    }
  }
  AllToAllFound found{exchange, Error{}};
  const auto decline = [&](std::string reason) {
    found.match = Error{std::move(reason)};
    return found;
  };
  if (Status ok = CheckExchange(*exchange, dot); !ok.ok()) return decline(ok.error().message);
  if (!IsPlainArray(dot.shape())) return decline("the dot's result is not a plain array");
  Expected<RingGroup> ring = RingGroup::Of(*exchange, grid);
  if (!ring.ok()) return decline(ring.error().message);
  const int64_t n = ring->size();
  const int64_t exchanged = exchange->attrs().dimensions->front();
  // The output dimension of the dot that the chain carries to the
  // exchanged one, cut into the same N blocks.
  for (int64_t d = 0; d < dot.shape().rank(); ++d) {
    if (dot.shape().dim(d) % n != 0) continue;
    std::vector<int64_t> dims;
    int64_t dim = d;
    bool traced = true;
    for (Instruction* op : chain) {
      std::optional<int64_t> next = TraceDimension(*op, dim, n);
      if (!next) {
        traced = false;
        break;
      }
      dim = *next;
      dims.push_back(dim);
    }
    if (!traced || dim != exchanged) continue;
    AllToAllMatch match;
    match.before_dot = false;
    match.exchange = exchange;
    match.dot = &dot;
    match.chain = chain;
    match.chain_dims = std::move(dims);
    match.output_dim = d;
    match.output_class = ClassifyOutputDim(dot, d);
    match.ring = *ring;
    found.match = std::move(match);
    return found;
  }
  return decline("the exchanged dimension cannot be traced back to an output dimension of the dot");
}

std::string DescribeAllToAll(const AllToAllMatch& m) {
  if (m.before_dot) {
    return fmt::format("all-to-all -> dot ({} {} dimension {}, N={})",
                       m.operand == 0 ? "lhs" : "rhs", DimClassName(m.operand_class.dim_class),
                       m.operand_dim, m.ring.size());
  }
  return fmt::format("dot -> all-to-all (output dimension {}, {}, N={})", m.output_dim,
                     OutputClassName(m.output_class), m.ring.size());
}

namespace {

// (r + k) mod N for the rounds' k, each emitted once: round k sends block
// r+k and receives block r-k = r+(N-k), the block round N-k sends.
class Blocks {
 public:
  Blocks(Builder& builder, Instruction* position, int64_t n)
      : builder_(builder), position_(position), n_(n), cache_(static_cast<size_t>(n)) {}

  Expected<Instruction*> At(int64_t k) {
    Instruction*& block = cache_[static_cast<size_t>(((k % n_) + n_) % n_)];
    if (block == nullptr) {
      LOOM_ASSIGN_OR_RETURN(block, Block(builder_, position_, builder_.S32(k % n_), n_));
    }
    return block;
  }

 private:
  Builder& builder_;
  Instruction* position_;
  int64_t n_;
  std::vector<Instruction*> cache_;
};

// all-to-all -> dot: round k multiplies the block from position r-k, the
// block for round k+1 already sent.
Status EmitBeforeDot(const AllToAllMatch& m, ir::NameTable& names) {
  ir::Computation& computation = *m.dot->parent();
  Builder b(computation, names, m.dot);
  const int64_t n = m.ring.size();
  const int64_t exchanged = m.exchange->attrs().dimensions->front();
  Instruction* source = m.exchange->operand(0);
  Instruction* other = m.dot->operand(1 - m.operand);
  LOOM_ASSIGN_OR_RETURN(Instruction * position, m.ring.EmitPosition(b));
  Blocks blocks(b, position, n);
  LOOM_ASSIGN_OR_RETURN(Instruction * result,
                        b.Zeros(ir::Shape(m.dot->shape().type(), m.dot->shape().dims())));
  // Round k's block as it arrives: own block at k = 0, a permute r -> r+k after.
  const auto arrive = [&](int64_t k) -> Expected<Instruction*> {
    LOOM_ASSIGN_OR_RETURN(Instruction * outgoing, blocks.At(k));
    LOOM_ASSIGN_OR_RETURN(Instruction * piece, SliceBlock(b, source, exchanged, outgoing, n));
    if (k == 0) return piece;
    return m.ring.EmitShiftBy(b, piece, k);
  };
  LOOM_ASSIGN_OR_RETURN(Instruction * window, arrive(0));
  for (int64_t k = 0; k < n; ++k) {
    Instruction* next = nullptr;
    if (k + 1 < n) {
      LOOM_ASSIGN_OR_RETURN(next, arrive(k + 1));
    }
    LOOM_ASSIGN_OR_RETURN(Instruction * from, blocks.At(n - k));
    for (size_t c = 0; c < m.chain.size(); ++c) {
      LOOM_ASSIGN_OR_RETURN(window, ReplayOnBlock(b, *m.chain[c], window, m.chain_dims[c], n));
    }
    Instruction* paired = other;
    if (m.operand_class.other_operand_dim) {
      LOOM_ASSIGN_OR_RETURN(paired,
                            SliceBlock(b, other, *m.operand_class.other_operand_dim, from, n));
    }
    Instruction* lhs = m.operand == 0 ? window : paired;
    Instruction* rhs = m.operand == 0 ? paired : window;
    LOOM_ASSIGN_OR_RETURN(Instruction * partial,
                          PartialDot(b, *m.dot, lhs, rhs, m.dot->shape().type()));
    LOOM_ASSIGN_OR_RETURN(result,
                          UpdateBlock(b, result, partial, *m.operand_class.output_dim, from));
    window = next;
  }
  b.RemoveUnusedConstants();
  computation.ReplaceAllUsesWith(m.dot, result);
  computation.RemoveInstruction(m.dot);
  RemoveDeadChain(computation, m.chain.empty() ? m.exchange : m.chain.back());
  return OkStatus();
}

// dot -> all-to-all: round k computes block (r+k) of the product and sends
// it to r+k; what arrives from r-k is block r-k of the result.
Status EmitAfterDot(const AllToAllMatch& m, ir::NameTable& names) {
  ir::Computation& computation = *m.exchange->parent();
  Builder b(computation, names, m.exchange);
  const int64_t n = m.ring.size();
  const int64_t exchanged = m.exchange->attrs().dimensions->front();
  LOOM_ASSIGN_OR_RETURN(Instruction * position, m.ring.EmitPosition(b));
  Blocks blocks(b, position, n);
  LOOM_ASSIGN_OR_RETURN(Instruction * result,
                        b.Zeros(ir::Shape(m.exchange->shape().type(), m.exchange->shape().dims())));
  for (int64_t k = 0; k < n; ++k) {
    LOOM_ASSIGN_OR_RETURN(Instruction * block, blocks.At(k));
    Instruction* lhs = m.dot->operand(0);
    Instruction* rhs = m.dot->operand(1);
    if (m.output_class.lhs_dim >= 0) {
      LOOM_ASSIGN_OR_RETURN(lhs, SliceBlock(b, lhs, m.output_class.lhs_dim, block, n));
    }
    if (m.output_class.rhs_dim >= 0) {
      LOOM_ASSIGN_OR_RETURN(rhs, SliceBlock(b, rhs, m.output_class.rhs_dim, block, n));
    }
    LOOM_ASSIGN_OR_RETURN(Instruction * piece,
                          PartialDot(b, *m.dot, lhs, rhs, m.dot->shape().type()));
    for (size_t c = 0; c < m.chain.size(); ++c) {
      LOOM_ASSIGN_OR_RETURN(piece, ReplayOnBlock(b, *m.chain[c], piece, m.chain_dims[c], n));
    }
    if (k > 0) {
      LOOM_ASSIGN_OR_RETURN(piece, m.ring.EmitShiftBy(b, piece, k));
    }
    LOOM_ASSIGN_OR_RETURN(Instruction * to, blocks.At(n - k));
    LOOM_ASSIGN_OR_RETURN(result, UpdateBlock(b, result, piece, exchanged, to));
  }
  b.RemoveUnusedConstants();
  computation.ReplaceAllUsesWith(m.exchange, result);
  computation.RemoveInstruction(m.exchange);
  RemoveDeadChain(computation, m.chain.empty() ? m.dot : m.chain.back());
  return OkStatus();
}

}  // namespace

Status EmitPairwiseExchange(const AllToAllMatch& match, ir::NameTable& names) {
  return match.before_dot ? EmitBeforeDot(match, names) : EmitAfterDot(match, names);
}

}  // namespace loom::pass
