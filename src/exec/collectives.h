// XLA's collectives on real tensors, built on the point-to-point
// Communicator: all-gather, reduce-scatter, all-reduce, all-to-all and
// collective-permute. Each is split into Start (post every transfer; returns
// at once) and Finish (wait, then assemble and reduce), which is what the
// -start / -done forms execute; the synchronous form is Start then Finish.
//
// Groups are ordered lists of global device ids (ir/collective_groups.h);
// the group order is the concatenation order of all-gather and the block
// order of reduce-scatter and all-to-all.
//
// Reductions fold in ring order, as a ring algorithm (NCCL's, or Loom's
// decomposed collectives) does: block q of a reduce-scatter, which member q
// keeps, is ((c[q+1] + c[q+2]) + ...) + c[q] over group positions mod N. An
// all-reduce cuts its flattened buffer into N contiguous chunks (chunk q:
// elements [q*E/N, (q+1)*E/N)) and folds chunk q in the same order. The
// order depends only on the chunk, so every member computes bitwise the same
// result, on every backend; and a program that runs the ring itself can
// reproduce it exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "exec/comm/communicator.h"
#include "exec/tensor.h"

namespace loom::exec {

// Combines two contributions of the same shape elementwise (the collective's
// to_apply computation).
using Reducer = std::function<Expected<Tensor>(const Tensor& lhs, const Tensor& rhs)>;

// A collective whose transfers are posted.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Waits for the transfers and returns the collective's result.
  virtual Expected<Tensor> Finish() = 0;
};

using PendingPtr = std::unique_ptr<PendingCollective>;
using Group = std::vector<int64_t>;

// Tags: every collective a device runs takes the next tag from its
// sequence; SPMD programs run their collectives in the same order on every
// device, so tags match without negotiation.

Expected<PendingPtr> StartAllGather(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, int64_t dimension);
Expected<PendingPtr> StartReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                                        const Tensor& input, int64_t dimension, Reducer reducer);
Expected<PendingPtr> StartAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, Reducer reducer);
// With a split dimension: block i of the input goes to member i, and the
// blocks received are concatenated in group order along the same dimension.
Expected<PendingPtr> StartAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                                   const Tensor& input, int64_t dimension);
// The tuple form: element i of `inputs` goes to member i; element j of the
// result came from member j.
Expected<PendingPtr> StartAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                                        const std::vector<Tensor>& inputs);
// `pairs` are (source, target) global ids. A device that no pair targets
// receives zeros.
Expected<PendingPtr> StartCollectivePermute(Communicator& comm, uint64_t tag,
                                            std::span<const std::pair<int64_t, int64_t>> pairs,
                                            const Tensor& input);

// Block `index` of `count` equal blocks of `tensor` along `dimension`.
Expected<Tensor> SliceBlock(const Tensor& tensor, int64_t dimension, int64_t index, int64_t count);
// Concatenates same-shaped tensors along `dimension`.
Expected<Tensor> ConcatenateBlocks(const std::vector<Tensor>& blocks, int64_t dimension);

}  // namespace loom::exec
