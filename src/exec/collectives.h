// XLA's collectives as the algorithms NCCL and MPI run, on host memory over
// the point-to-point Communicator: ring all-gather, ring reduce-scatter, ring
// all-reduce (a reduce-scatter ring, then an all-gather ring of the reduced
// chunks), pairwise all-to-all, and collective-permute. Each device sends
// (N-1)/N of the data through its ring neighbours (twice that for
// all-reduce), never the whole buffer to every peer.
//
// Groups are ordered lists of global device ids (ir/collective_groups.h);
// the group order is the ring order, the concatenation order of all-gather
// and the block order of reduce-scatter and all-to-all. Every member sends to
// its successor in the group and receives from its predecessor.
//
// Reductions fold in ring order, as NCCL's ring does: block q of a
// reduce-scatter, which member q keeps, is ((c[q+1] + c[q+2]) + ...) + c[q]
// over group positions mod N (the partial sum starts at member q+1 and each
// member adds its own contribution on the right as it passes). An all-reduce
// cuts its flattened buffer into N contiguous chunks (chunk q: elements
// [q*E/N, (q+1)*E/N)) and folds chunk q in the same order. The order depends
// only on the chunk, so every member computes bitwise the same result on
// every backend, and a program that runs the ring itself (collective-matmul)
// reproduces it exactly.
//
// The functions below run one collective to completion on the calling
// thread, blocking on the communicator; a device that must compute while its
// collectives progress runs them on a CollectiveWorker.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "exec/comm/communicator.h"
#include "exec/tensor.h"

namespace loom::exec {

using Group = std::vector<int64_t>;

// A row-major array cut along one dimension: `outer` runs (the product of
// the dimensions before it), each of `inner_bytes` (the dimension and every
// dimension after it).
struct Slabs {
  int64_t outer = 1;
  int64_t inner_bytes = 0;
};
// The slabs of `shape` around `dimension`; an error when it is out of range.
Expected<Slabs> SlabsOf(const ir::Shape& shape, int64_t dimension);

// out = a (+) b element-wise, where out may be a: the collective's reducer.
using ReduceBytes = std::function<Status(std::span<std::byte> out, std::span<const std::byte> a,
                                         std::span<const std::byte> b)>;

// all-gather: `output` (N blocks of the input along the dimension that
// `slabs` describes, in group order) from every member's `input`.
Status RingAllGather(Communicator& comm, uint64_t tag, const Group& group,
                     std::span<const std::byte> input, const Slabs& slabs,
                     std::span<std::byte> output);
// reduce-scatter: `output` is block (my position) of the reduction of every
// member's `input` (N blocks along the dimension; `slabs` describes the
// input around it).
Status RingReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                         std::span<const std::byte> input, const Slabs& slabs,
                         int64_t element_bytes, const ReduceBytes& reduce,
                         std::span<std::byte> output);
// all-reduce of the flattened buffers.
Status RingAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                     std::span<const std::byte> input, int64_t element_bytes,
                     const ReduceBytes& reduce, std::span<std::byte> output);
// all-to-all with a split dimension: block i of the input (along the
// dimension `slabs` describes) goes to member i; block j of the output came
// from member j.
Status PairwiseAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                        std::span<const std::byte> input, const Slabs& slabs,
                        std::span<std::byte> output);
// The tuple form: inputs[i] goes to member i, outputs[j] comes from member j.
Status PairwiseAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                             std::span<const std::span<const std::byte>> inputs,
                             std::span<const std::span<std::byte>> outputs);

// The same three through the transport's own collectives (MPI's), where the
// communicator has them; `groups` is the whole partition of the devices.
// Sums are the transport's (f32 and f64 only), in its order.
Status NativeAllGather(NativeCollectives& native, const std::vector<Group>& groups,
                       const Group& group, int64_t me, std::span<const std::byte> input,
                       const Slabs& slabs, std::span<std::byte> output);
Status NativeReduceScatterSum(NativeCollectives& native, const std::vector<Group>& groups,
                              int64_t n, bool is_double, std::span<const std::byte> input,
                              const Slabs& slabs, std::span<std::byte> output);
Status NativeAllReduceSum(NativeCollectives& native, const std::vector<Group>& groups,
                          bool is_double, std::span<const std::byte> input,
                          std::span<std::byte> output);

// A collective-permute whose transfers are posted: every send of `input` to
// a target, and the receive of `output` from the source (a device that no
// pair targets receives zeros). Finish waits for them.
class PostedPermute {
 public:
  static Expected<std::unique_ptr<PostedPermute>> Post(
      Communicator& comm, uint64_t tag, std::span<const std::pair<int64_t, int64_t>> pairs,
      std::span<const std::byte> input, std::span<std::byte> output);
  Status Finish();

 private:
  explicit PostedPermute(Communicator& comm) : comm_(comm) {}
  Communicator& comm_;
  std::vector<RequestId> requests_;
};

// Runs a device's collectives in the order they were submitted, on a thread
// of its own (NCCL's stream, the communication thread of a hand-written
// ring), so that the device computes while they progress. SPMD devices
// submit their collectives in the same order, so the rings match.
class CollectiveWorker {
 public:
  CollectiveWorker();
  ~CollectiveWorker();  // finishes what was submitted, then joins
  CollectiveWorker(const CollectiveWorker&) = delete;
  CollectiveWorker& operator=(const CollectiveWorker&) = delete;

  // One submitted job; Wait blocks until it has run and returns its status.
  class Ticket {
   public:
    Status Wait();

   private:
    friend class CollectiveWorker;
    struct State {
      std::mutex mutex;
      std::condition_variable done_signal;
      bool done = false;
      Status status;
    };
    std::shared_ptr<State> state_;
  };

  Ticket Submit(std::function<Status()> job);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<std::pair<std::function<Status()>, std::shared_ptr<Ticket::State>>> queue_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after every other member is ready
};

// --- the same collectives on Tensors, for tests and tools ---------------------

// Combines two contributions of the same shape element-wise.
using Reducer = std::function<Expected<Tensor>(const Tensor& lhs, const Tensor& rhs)>;

// A collective whose transfers are under way (on a thread of its own).
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Waits for the transfers and returns the collective's result.
  virtual Expected<Tensor> Finish() = 0;
};
using PendingPtr = std::unique_ptr<PendingCollective>;

Expected<PendingPtr> StartAllGather(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, int64_t dimension);
Expected<PendingPtr> StartReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                                        const Tensor& input, int64_t dimension, Reducer reducer);
Expected<PendingPtr> StartAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, Reducer reducer);
Expected<PendingPtr> StartAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                                   const Tensor& input, int64_t dimension);
// The tuple form: element i of `inputs` goes to member i; element j of the
// result came from member j.
Expected<PendingPtr> StartAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                                        const std::vector<Tensor>& inputs);
Expected<PendingPtr> StartCollectivePermute(Communicator& comm, uint64_t tag,
                                            std::span<const std::pair<int64_t, int64_t>> pairs,
                                            const Tensor& input);

// Block `index` of `count` equal blocks of `tensor` along `dimension`.
Expected<Tensor> SliceBlock(const Tensor& tensor, int64_t dimension, int64_t index, int64_t count);
// Concatenates same-shaped tensors along `dimension`.
Expected<Tensor> ConcatenateBlocks(const std::vector<Tensor>& blocks, int64_t dimension);

}  // namespace loom::exec
