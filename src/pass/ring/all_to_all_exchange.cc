#include "pass/ring/all_to_all_exchange.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "ir/async.h"
#include "ir/computation.h"
#include "pass/ring/block_ops.h"
#include "pass/ring/dimension_trace.h"

namespace loom::pass {

namespace {

using ir::Builder;
using ir::Instruction;
using ir::Opcode;

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

}  // namespace

std::optional<AllToAllFound> MatchAllToAllBeforeDot(Instruction& dot, int64_t operand,
                                                    const ir::DeviceGrid& grid) {
  auto [value, chain] = TraceableChainAbove(dot.operand(operand));
  if (ir::CollectiveOpcodeOfDone(*value) == Opcode::kAllToAll) {
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
  if (ChainHasOtherUsers(exchange, chain, dot))
    return decline("the exchanged value has other users");
  const int64_t exchanged = exchange.attrs().dimensions->front();
  ChainTrace trace = TraceChain(chain, exchanged, ring->size());
  if (trace.stuck != nullptr) {
    return decline(fmt::format("the exchanged dimension cannot be traced through %{} ({})",
                               trace.stuck->name(), ir::OpcodeName(trace.stuck->opcode())));
  }
  const int64_t dim = trace.dims.empty() ? exchanged : trace.dims.back();
  AllToAllMatch match;
  match.before_dot = true;
  match.exchange = &exchange;
  match.dot = &dot;
  match.chain = chain;
  match.chain_dims = std::move(trace.dims);
  match.operand = operand;
  match.ring = *ring;
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
    if (ir::CollectiveOpcodeOfStart(*user) == Opcode::kAllToAll) {
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
    ChainTrace trace = TraceChain(chain, d, n);
    if (trace.stuck != nullptr || (trace.dims.empty() ? d : trace.dims.back()) != exchanged) {
      continue;
    }
    AllToAllMatch match;
    match.before_dot = false;
    match.exchange = exchange;
    match.dot = &dot;
    match.chain = chain;
    match.chain_dims = std::move(trace.dims);
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
                     OutputDimName(m.output_class), m.ring.size());
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

// Block `index` of `blocks` along `dim` of a grouped product; the product
// itself when it is one block.
Expected<Instruction*> PieceOf(Builder& b, Instruction* product, int64_t dim, int64_t index,
                               int64_t blocks) {
  if (blocks == 1) return product;
  return SliceBlock(b, product, dim, b.S32(index), blocks);
}

// all-to-all -> dot: each group of rounds multiplies the blocks from
// positions r-k (k in the group) in one product, the next group's blocks
// already sent.
Status EmitBeforeDot(const AllToAllMatch& m, int64_t group, ir::NameTable& names) {
  Builder b(*m.dot->parent(), names, m.dot);
  const int64_t n = m.ring.size();
  const int64_t exchanged = m.exchange->attrs().dimensions->front();
  const int64_t output_dim = *m.operand_class.output_dim;
  Instruction* source = m.exchange->operand(0);
  Instruction* other = m.dot->operand(1 - m.operand);
  LOOM_ASSIGN_OR_RETURN(Instruction * position, m.ring.EmitPosition(b));
  Blocks blocks(b, position, n);
  LOOM_ASSIGN_OR_RETURN(Instruction * result,
                        b.Zeros(ir::Shape(m.dot->shape().type(), m.dot->shape().dims())));
  // Round k's block as it arrives: own block at k = 0, a permute r -> r+k after.
  std::vector<Instruction*> arrived(static_cast<size_t>(n), nullptr);
  const auto arrive_group = [&](int64_t first) -> Status {
    for (int64_t k = first; k < std::min(first + group, n); ++k) {
      LOOM_ASSIGN_OR_RETURN(Instruction * outgoing, blocks.At(k));
      LOOM_ASSIGN_OR_RETURN(Instruction * piece, SliceBlock(b, source, exchanged, outgoing, n));
      if (k > 0) {
        LOOM_ASSIGN_OR_RETURN(piece, m.ring.EmitShiftBy(b, piece, k));
      }
      arrived[static_cast<size_t>(k)] = piece;
    }
    return OkStatus();
  };
  LOOM_RETURN_IF_ERROR(arrive_group(0));
  for (int64_t first = 0; first < n; first += group) {
    if (first + group < n) LOOM_RETURN_IF_ERROR(arrive_group(first + group));
    std::vector<Instruction*> windows, partners;
    for (int64_t k = first; k < first + group; ++k) {
      LOOM_ASSIGN_OR_RETURN(
          Instruction * window,
          ReplayChainOnBlock(b, m.chain, m.chain_dims, arrived[static_cast<size_t>(k)], n));
      windows.push_back(window);
      if (m.operand_class.other_operand_dim) {
        LOOM_ASSIGN_OR_RETURN(Instruction * from, blocks.At(n - k));
        LOOM_ASSIGN_OR_RETURN(Instruction * partner,
                              SliceBlock(b, other, *m.operand_class.other_operand_dim, from, n));
        partners.push_back(partner);
      }
    }
    LOOM_ASSIGN_OR_RETURN(Instruction * window, b.Concatenate(windows, m.operand_dim));
    Instruction* paired = other;
    if (m.operand_class.other_operand_dim) {
      LOOM_ASSIGN_OR_RETURN(paired, b.Concatenate(partners, *m.operand_class.other_operand_dim));
    }
    Instruction* lhs = m.operand == 0 ? window : paired;
    Instruction* rhs = m.operand == 0 ? paired : window;
    LOOM_ASSIGN_OR_RETURN(Instruction * product,
                          PartialDot(b, *m.dot, lhs, rhs, m.dot->shape().type()));
    for (int64_t k = first; k < first + group; ++k) {
      LOOM_ASSIGN_OR_RETURN(Instruction * piece, PieceOf(b, product, output_dim, k - first, group));
      LOOM_ASSIGN_OR_RETURN(Instruction * from, blocks.At(n - k));
      LOOM_ASSIGN_OR_RETURN(result, UpdateBlock(b, result, piece, output_dim, from));
    }
  }
  ReplaceByRewrite(b, m.dot, result, m.chain.empty() ? m.exchange : m.chain.back());
  return OkStatus();
}

// dot -> all-to-all: each group of rounds computes blocks r+k (k in the
// group) of the product in one dot and sends each to its r+k; what arrives
// from r-k is block r-k of the result.
Status EmitAfterDot(const AllToAllMatch& m, int64_t group, ir::NameTable& names) {
  Builder b(*m.exchange->parent(), names, m.exchange);
  const int64_t n = m.ring.size();
  const int64_t exchanged = m.exchange->attrs().dimensions->front();
  LOOM_ASSIGN_OR_RETURN(Instruction * position, m.ring.EmitPosition(b));
  Blocks blocks(b, position, n);
  LOOM_ASSIGN_OR_RETURN(Instruction * result,
                        b.Zeros(ir::Shape(m.exchange->shape().type(), m.exchange->shape().dims())));
  // The operand's blocks for rounds first .. first+group-1, joined.
  const auto operand_blocks = [&](int64_t operand, int64_t dim,
                                  int64_t first) -> Expected<Instruction*> {
    Instruction* value = m.dot->operand(operand);
    if (dim < 0) return value;
    std::vector<Instruction*> pieces;
    for (int64_t k = first; k < first + group; ++k) {
      LOOM_ASSIGN_OR_RETURN(Instruction * block, blocks.At(k));
      LOOM_ASSIGN_OR_RETURN(Instruction * piece, SliceBlock(b, value, dim, block, n));
      pieces.push_back(piece);
    }
    return b.Concatenate(pieces, dim);
  };
  for (int64_t first = 0; first < n; first += group) {
    LOOM_ASSIGN_OR_RETURN(Instruction * lhs, operand_blocks(0, m.output_class.lhs_dim, first));
    LOOM_ASSIGN_OR_RETURN(Instruction * rhs, operand_blocks(1, m.output_class.rhs_dim, first));
    LOOM_ASSIGN_OR_RETURN(Instruction * product,
                          PartialDot(b, *m.dot, lhs, rhs, m.dot->shape().type()));
    for (int64_t k = first; k < first + group; ++k) {
      LOOM_ASSIGN_OR_RETURN(Instruction * piece,
                            PieceOf(b, product, m.output_dim, k - first, group));
      LOOM_ASSIGN_OR_RETURN(piece, ReplayChainOnBlock(b, m.chain, m.chain_dims, piece, n));
      if (k > 0) {
        LOOM_ASSIGN_OR_RETURN(piece, m.ring.EmitShiftBy(b, piece, k));
      }
      LOOM_ASSIGN_OR_RETURN(Instruction * to, blocks.At(n - k));
      LOOM_ASSIGN_OR_RETURN(result, UpdateBlock(b, result, piece, exchanged, to));
    }
  }
  ReplaceByRewrite(b, m.exchange, result, m.chain.empty() ? m.dot : m.chain.back());
  return OkStatus();
}

}  // namespace

Status EmitPairwiseExchange(const AllToAllMatch& match, int64_t rounds_per_product,
                            ir::NameTable& names) {
  const int64_t n = match.ring.size();
  if (rounds_per_product < 1 || n % rounds_per_product != 0) {
    return Error{fmt::format("all-to-all exchange: {} rounds per product do not divide N={}",
                             rounds_per_product, n)};
  }
  return match.before_dot ? EmitBeforeDot(match, rounds_per_product, names)
                          : EmitAfterDot(match, rounds_per_product, names);
}

}  // namespace loom::pass
