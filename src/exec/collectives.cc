#include "exec/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace loom::exec {
namespace {

// Row-major view of a tensor around one dimension: `outer` runs of
// `dim_size` rows of `row_bytes` each.
struct Slabs {
  int64_t outer = 1;
  int64_t dim_size = 0;
  int64_t row_bytes = 0;
};

Expected<Slabs> SlabsAround(const ir::Shape& shape, int64_t dimension, int64_t element_bytes) {
  if (shape.IsTuple() || dimension < 0 || dimension >= shape.rank()) {
    return Error{fmt::format("dimension {} is out of range for {}", dimension, shape.ToString())};
  }
  Slabs slabs;
  slabs.row_bytes = element_bytes;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (d < dimension) slabs.outer *= shape.dim(d);
    if (d > dimension) slabs.row_bytes *= shape.dim(d);
  }
  slabs.dim_size = shape.dim(dimension);
  return slabs;
}

Bytes ToBytes(const Tensor& tensor) { return Bytes(tensor.bytes().begin(), tensor.bytes().end()); }

Expected<Tensor> FromBytes(const ir::Shape& shape, const Bytes& bytes) {
  LOOM_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Zeros(shape));
  if (bytes.size() != tensor.bytes().size()) {
    return Error{fmt::format("received {} bytes for {}, which holds {}", bytes.size(),
                             shape.ToString(), tensor.bytes().size())};
  }
  std::copy(bytes.begin(), bytes.end(), tensor.mutable_bytes().begin());
  return tensor;
}

ir::Shape WithDim(const ir::Shape& shape, int64_t dimension, int64_t size) {
  std::vector<int64_t> dims = shape.dims();
  dims[static_cast<size_t>(dimension)] = size;
  return ir::Shape(shape.type(), std::move(dims));
}

int64_t IndexIn(const Group& group, int64_t device) {
  auto it = std::find(group.begin(), group.end(), device);
  return it == group.end() ? -1 : static_cast<int64_t>(it - group.begin());
}

Expected<int64_t> MyIndex(const Communicator& comm, const Group& group) {
  const int64_t index = IndexIn(group, comm.rank());
  if (index < 0) return Error{fmt::format("device {} is not in its group", comm.rank())};
  return index;
}

// One block per group member: sends `outgoing[i]` to member i (keeping our
// own locally) and posts a receive of `incoming_bytes` from every member.
// Finish() hands the received blocks, in group order, to `assemble`.
class Exchange : public PendingCollective {
 public:
  using Assemble = std::function<Expected<Tensor>(std::vector<Bytes> received)>;

  static Expected<PendingPtr> Start(Communicator& comm, uint64_t tag, const Group& group,
                                    std::vector<Bytes> outgoing, size_t incoming_bytes,
                                    Assemble assemble) {
    LOOM_ASSIGN_OR_RETURN(const int64_t me, MyIndex(comm, group));
    auto exchange = std::unique_ptr<Exchange>(new Exchange(comm, std::move(assemble)));
    exchange->received_.resize(group.size());
    exchange->own_ = static_cast<size_t>(me);
    exchange->received_[exchange->own_] = std::move(outgoing[exchange->own_]);
    for (size_t i = 0; i < group.size(); ++i) {
      if (i == exchange->own_) continue;
      LOOM_ASSIGN_OR_RETURN(RequestId send, comm.StartSend(group[i], tag, std::move(outgoing[i])));
      exchange->sends_.push_back(send);
    }
    for (size_t i = 0; i < group.size(); ++i) {
      if (i == exchange->own_) continue;
      LOOM_ASSIGN_OR_RETURN(RequestId recv, comm.StartRecv(group[i], tag, incoming_bytes));
      exchange->recvs_.emplace_back(i, recv);
    }
    return PendingPtr(std::move(exchange));
  }

  Expected<Tensor> Finish() override {
    for (const auto& [index, request] : recvs_) {
      LOOM_ASSIGN_OR_RETURN(received_[index], comm_.Wait(request));
    }
    for (RequestId send : sends_) LOOM_RETURN_IF_ERROR(comm_.Wait(send).status());
    return assemble_(std::move(received_));
  }

 private:
  Exchange(Communicator& comm, Assemble assemble) : comm_(comm), assemble_(std::move(assemble)) {}

  Communicator& comm_;
  Assemble assemble_;
  size_t own_ = 0;
  std::vector<Bytes> received_;
  std::vector<RequestId> sends_;
  std::vector<std::pair<size_t, RequestId>> recvs_;
};

// Folds same-shaped contributions in ring order for block `block`:
// ((c[block+1] + c[block+2]) + ...) + c[block], positions mod N.
Expected<Tensor> FoldInRingOrder(const ir::Shape& shape, const std::vector<Bytes>& contributions,
                                 size_t block, const Reducer& reducer) {
  const size_t n = contributions.size();
  LOOM_ASSIGN_OR_RETURN(Tensor accumulator, FromBytes(shape, contributions[(block + 1) % n]));
  for (size_t i = 2; i <= n; ++i) {
    LOOM_ASSIGN_OR_RETURN(Tensor next, FromBytes(shape, contributions[(block + i) % n]));
    LOOM_ASSIGN_OR_RETURN(accumulator, reducer(accumulator, next));
  }
  return accumulator;
}

// All-reduce: chunk q of the flattened buffer folded in ring order for q.
Expected<Tensor> FoldChunksInRingOrder(const ir::Shape& shape,
                                       const std::vector<Bytes>& contributions,
                                       const Reducer& reducer) {
  const int64_t n = static_cast<int64_t>(contributions.size());
  const int64_t elements = shape.ElementCount();
  const int bits = ir::PrimitiveTypeBits(shape.type());
  // Sub-byte types cannot be cut at arbitrary elements: one chunk.
  if (bits % 8 != 0) return FoldInRingOrder(shape, contributions, n - 1, reducer);
  const auto element_bytes = static_cast<size_t>(bits / 8);
  LOOM_ASSIGN_OR_RETURN(Tensor result, Tensor::Zeros(shape));
  for (int64_t q = 0; q < n; ++q) {
    const int64_t begin = q * elements / n;
    const int64_t end = (q + 1) * elements / n;
    if (begin == end) continue;
    const ir::Shape chunk_shape(shape.type(), {end - begin});
    std::vector<Bytes> chunks;
    for (const Bytes& contribution : contributions) {
      chunks.emplace_back(contribution.begin() + static_cast<ptrdiff_t>(begin * element_bytes),
                          contribution.begin() + static_cast<ptrdiff_t>(end * element_bytes));
    }
    LOOM_ASSIGN_OR_RETURN(Tensor folded,
                          FoldInRingOrder(chunk_shape, chunks, static_cast<size_t>(q), reducer));
    std::copy(folded.bytes().begin(), folded.bytes().end(),
              result.mutable_bytes().begin() + static_cast<ptrdiff_t>(begin * element_bytes));
  }
  return result;
}

Expected<std::vector<Tensor>> TensorsFromBytes(const ir::Shape& shape,
                                               const std::vector<Bytes>& received) {
  std::vector<Tensor> tensors;
  for (const Bytes& bytes : received) {
    LOOM_ASSIGN_OR_RETURN(Tensor tensor, FromBytes(shape, bytes));
    tensors.push_back(std::move(tensor));
  }
  return tensors;
}

// The n blocks of `input` along `dimension`, as bytes; sets `block_shape`.
Expected<std::vector<Bytes>> SplitIntoBlocks(const Tensor& input, int64_t dimension, int64_t n,
                                             ir::Shape& block_shape) {
  std::vector<Bytes> blocks;
  for (int64_t i = 0; i < n; ++i) {
    LOOM_ASSIGN_OR_RETURN(Tensor block, SliceBlock(input, dimension, i, n));
    block_shape = block.shape();
    blocks.push_back(ToBytes(block));
  }
  return blocks;
}

// Assembles received blocks of `block_shape` by concatenating them, in group
// order, along `dimension` (all-gather, all-to-all).
auto ConcatenateReceived(ir::Shape block_shape, int64_t dimension) {
  return [block_shape, dimension](std::vector<Bytes> received) -> Expected<Tensor> {
    LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> blocks, TensorsFromBytes(block_shape, received));
    return ConcatenateBlocks(blocks, dimension);
  };
}

Status CheckDivisible(const Tensor& input, int64_t dimension, int64_t count, const char* op) {
  if (input.IsTuple() || dimension < 0 || dimension >= input.shape().rank()) {
    return Error{fmt::format("{}: dimension {} is out of range for {}", op, dimension,
                             input.shape().ToString())};
  }
  if (input.shape().dim(dimension) % count != 0) {
    return Error{fmt::format("{}: dimension {} of {} does not split into {} blocks", op, dimension,
                             input.shape().ToString(), count)};
  }
  return OkStatus();
}

// A collective-permute: at most one receive, any number of sends.
class Permute : public PendingCollective {
 public:
  Permute(Communicator& comm, ir::Shape shape) : comm_(comm), shape_(std::move(shape)) {}

  Status Post(uint64_t tag, std::span<const std::pair<int64_t, int64_t>> pairs,
              const Tensor& input) {
    for (const auto& [source, target] : pairs) {
      if (source == comm_.rank()) {
        if (target == comm_.rank()) {
          self_ = ToBytes(input);
          continue;
        }
        LOOM_ASSIGN_OR_RETURN(RequestId send, comm_.StartSend(target, tag, ToBytes(input)));
        sends_.push_back(send);
      }
    }
    for (const auto& [source, target] : pairs) {
      if (target != comm_.rank() || source == comm_.rank()) continue;
      if (recv_) return Error{fmt::format("device {} receives from two sources", comm_.rank())};
      LOOM_ASSIGN_OR_RETURN(
          RequestId recv, comm_.StartRecv(source, tag, static_cast<size_t>(input.bytes().size())));
      recv_ = recv;
    }
    return OkStatus();
  }

  Expected<Tensor> Finish() override {
    Expected<Tensor> result = Tensor::Zeros(shape_);
    if (recv_) {
      LOOM_ASSIGN_OR_RETURN(Bytes data, comm_.Wait(*recv_));
      result = FromBytes(shape_, data);
    } else if (self_) {
      result = FromBytes(shape_, *self_);
    }
    for (RequestId send : sends_) LOOM_RETURN_IF_ERROR(comm_.Wait(send).status());
    return result;
  }

 private:
  Communicator& comm_;
  ir::Shape shape_;
  std::optional<RequestId> recv_;
  std::optional<Bytes> self_;
  std::vector<RequestId> sends_;
};

}  // namespace

Expected<Tensor> SliceBlock(const Tensor& tensor, int64_t dimension, int64_t index, int64_t count) {
  LOOM_RETURN_IF_ERROR(CheckDivisible(tensor, dimension, count, "slice"));
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs,
                        SlabsAround(tensor.shape(), dimension, tensor.ElementBytes()));
  const int64_t rows = slabs.dim_size / count;
  LOOM_ASSIGN_OR_RETURN(Tensor block, Tensor::Zeros(WithDim(tensor.shape(), dimension, rows)));
  const int64_t chunk = rows * slabs.row_bytes;
  for (int64_t o = 0; o < slabs.outer; ++o) {
    const std::byte* from =
        tensor.bytes().data() + (o * slabs.dim_size + index * rows) * slabs.row_bytes;
    std::memcpy(block.mutable_bytes().data() + o * chunk, from, static_cast<size_t>(chunk));
  }
  return block;
}

Expected<Tensor> ConcatenateBlocks(const std::vector<Tensor>& blocks, int64_t dimension) {
  if (blocks.empty()) return Error{"concatenation of no blocks"};
  const Tensor& first = blocks.front();
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs,
                        SlabsAround(first.shape(), dimension, first.ElementBytes()));
  const int64_t count = static_cast<int64_t>(blocks.size());
  LOOM_ASSIGN_OR_RETURN(Tensor result,
                        Tensor::Zeros(WithDim(first.shape(), dimension, slabs.dim_size * count)));
  const int64_t chunk = slabs.dim_size * slabs.row_bytes;
  for (int64_t b = 0; b < count; ++b) {
    if (!blocks[static_cast<size_t>(b)].shape().Compatible(first.shape())) {
      return Error{"concatenated blocks differ in shape"};
    }
    for (int64_t o = 0; o < slabs.outer; ++o) {
      std::memcpy(result.mutable_bytes().data() + (o * count + b) * chunk,
                  blocks[static_cast<size_t>(b)].bytes().data() + o * chunk,
                  static_cast<size_t>(chunk));
    }
  }
  return result;
}

Expected<PendingPtr> StartAllGather(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, int64_t dimension) {
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, 1, "all-gather"));
  const ir::Shape shape = input.shape();
  std::vector<Bytes> outgoing(group.size(), ToBytes(input));
  return Exchange::Start(comm, tag, group, std::move(outgoing), input.bytes().size(),
                         ConcatenateReceived(shape, dimension));
}

Expected<PendingPtr> StartReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                                        const Tensor& input, int64_t dimension, Reducer reducer) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, n, "reduce-scatter"));
  ir::Shape block_shape;
  LOOM_ASSIGN_OR_RETURN(std::vector<Bytes> outgoing,
                        SplitIntoBlocks(input, dimension, n, block_shape));
  const size_t block_bytes = outgoing.front().size();
  LOOM_ASSIGN_OR_RETURN(const int64_t me, MyIndex(comm, group));
  return Exchange::Start(comm, tag, group, std::move(outgoing), block_bytes,
                         [block_shape, reducer, me](std::vector<Bytes> received) {
                           return FoldInRingOrder(block_shape, received, static_cast<size_t>(me),
                                                  reducer);
                         });
}

Expected<PendingPtr> StartAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, Reducer reducer) {
  if (input.IsTuple()) return Error{"all-reduce of a tuple must be split per element"};
  const ir::Shape shape = input.shape();
  std::vector<Bytes> outgoing(group.size(), ToBytes(input));
  return Exchange::Start(comm, tag, group, std::move(outgoing), input.bytes().size(),
                         [shape, reducer](std::vector<Bytes> received) {
                           return FoldChunksInRingOrder(shape, received, reducer);
                         });
}

Expected<PendingPtr> StartAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                                   const Tensor& input, int64_t dimension) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, n, "all-to-all"));
  ir::Shape block_shape;
  LOOM_ASSIGN_OR_RETURN(std::vector<Bytes> outgoing,
                        SplitIntoBlocks(input, dimension, n, block_shape));
  const size_t block_bytes = outgoing.front().size();
  return Exchange::Start(comm, tag, group, std::move(outgoing), block_bytes,
                         ConcatenateReceived(block_shape, dimension));
}

Expected<PendingPtr> StartAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                                        const std::vector<Tensor>& inputs) {
  if (inputs.size() != group.size() || inputs.empty()) {
    return Error{
        fmt::format("all-to-all of {} operands over a group of {}", inputs.size(), group.size())};
  }
  const ir::Shape shape = inputs.front().shape();
  std::vector<Bytes> outgoing;
  for (const Tensor& input : inputs) {
    if (!input.shape().Compatible(shape)) return Error{"all-to-all operands differ in shape"};
    outgoing.push_back(ToBytes(input));
  }
  const size_t bytes = outgoing.front().size();
  return Exchange::Start(comm, tag, group, std::move(outgoing), bytes,
                         [shape](std::vector<Bytes> received) -> Expected<Tensor> {
                           LOOM_ASSIGN_OR_RETURN(std::vector<Tensor> elements,
                                                 TensorsFromBytes(shape, received));
                           return Tensor::Tuple(std::move(elements));
                         });
}

Expected<PendingPtr> StartCollectivePermute(Communicator& comm, uint64_t tag,
                                            std::span<const std::pair<int64_t, int64_t>> pairs,
                                            const Tensor& input) {
  if (input.IsTuple()) return Error{"collective-permute of a tuple must be split per element"};
  auto permute = std::make_unique<Permute>(comm, input.shape());
  LOOM_RETURN_IF_ERROR(permute->Post(tag, pairs, input));
  return PendingPtr(std::move(permute));
}

}  // namespace loom::exec
