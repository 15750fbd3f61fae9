#include "exec/collectives.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace loom::exec {
namespace {

Expected<int64_t> PositionIn(const Group& group, int64_t device) {
  auto it = std::find(group.begin(), group.end(), device);
  if (it == group.end()) return Error{fmt::format("device {} is not in its group", device)};
  return static_cast<int64_t>(it - group.begin());
}

int64_t Mod(int64_t a, int64_t n) { return ((a % n) + n) % n; }

// Posts a receive from `from` into `into` and a send of `data` to `to`, and
// waits for both: one step of a ring.
Status Exchange(Communicator& comm, uint64_t tag, int64_t to, std::span<const std::byte> data,
                int64_t from, std::span<std::byte> into) {
  LOOM_ASSIGN_OR_RETURN(const RequestId recv, comm.StartRecvInto(from, tag, into));
  LOOM_ASSIGN_OR_RETURN(const RequestId send, comm.StartSendFrom(to, tag, data));
  LOOM_RETURN_IF_ERROR(comm.Wait(recv).status());
  return comm.Wait(send).status();
}

// Block `index` of `count` along the cut dimension, gathered from every run
// into `out` (contiguous).
void CopyBlockOut(std::span<const std::byte> whole, const Slabs& slabs, int64_t index,
                  int64_t count, std::byte* out) {
  const int64_t piece = slabs.inner_bytes / count;
  for (int64_t o = 0; o < slabs.outer; ++o) {
    std::memcpy(out + o * piece, whole.data() + o * slabs.inner_bytes + index * piece,
                static_cast<size_t>(piece));
  }
}

// The inverse: a contiguous block into its place in every run of `whole`.
void CopyBlockIn(const std::byte* block, const Slabs& slabs, int64_t index, int64_t count,
                 std::span<std::byte> whole) {
  const int64_t piece = slabs.inner_bytes / count;
  for (int64_t o = 0; o < slabs.outer; ++o) {
    std::memcpy(whole.data() + o * slabs.inner_bytes + index * piece, block + o * piece,
                static_cast<size_t>(piece));
  }
}

// The N blocks of `whole` along the cut as contiguous spans: in place when
// there is one run, else copied into `staging` block by block.
std::vector<std::span<const std::byte>> BlocksOf(std::span<const std::byte> whole,
                                                 const Slabs& slabs, int64_t count,
                                                 std::vector<std::byte>& staging) {
  const int64_t block_bytes = static_cast<int64_t>(whole.size()) / count;
  std::vector<std::span<const std::byte>> blocks;
  if (slabs.outer != 1) {
    staging.resize(whole.size());
    for (int64_t i = 0; i < count; ++i)
      CopyBlockOut(whole, slabs, i, count, staging.data() + i * block_bytes);
  }
  const std::byte* base = slabs.outer == 1 ? whole.data() : staging.data();
  for (int64_t i = 0; i < count; ++i) blocks.emplace_back(base + i * block_bytes, block_bytes);
  return blocks;
}

Status CheckSize(size_t got, size_t want, const char* what) {
  if (got == want) return OkStatus();
  return Error{fmt::format("{}: {} bytes where {} are needed", what, got, want)};
}

}  // namespace

Expected<Slabs> SlabsOf(const ir::Shape& shape, int64_t dimension) {
  if (shape.IsTuple() || dimension < 0 || dimension >= shape.rank()) {
    return Error{fmt::format("dimension {} is out of range for {}", dimension, shape.ToString())};
  }
  Slabs slabs;
  slabs.inner_bytes = ir::PrimitiveTypeBits(shape.type()) / 8;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (d < dimension) slabs.outer *= shape.dim(d);
    if (d >= dimension) slabs.inner_bytes *= shape.dim(d);
  }
  return slabs;
}

Status RingAllGather(Communicator& comm, uint64_t tag, const Group& group,
                     std::span<const std::byte> input, const Slabs& slabs,
                     std::span<std::byte> output) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_ASSIGN_OR_RETURN(const int64_t me, PositionIn(group, comm.rank()));
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size() * n, "all-gather output"));
  const int64_t block_bytes = static_cast<int64_t>(input.size());
  // One run: block i is a contiguous piece of the output, received in place.
  // Several: blocks are staged contiguously and put in place at the end.
  const Slabs out_slabs{slabs.outer, slabs.inner_bytes * n};
  std::vector<std::byte> staging(slabs.outer == 1 ? 0 : output.size());
  auto block = [&](int64_t i) {
    std::byte* base = slabs.outer == 1 ? output.data() : staging.data();
    return std::span<std::byte>(base + i * block_bytes, block_bytes);
  };
  if (block_bytes > 0) std::memcpy(block(me).data(), input.data(), input.size());
  const int64_t next = group[Mod(me + 1, n)], prev = group[Mod(me - 1, n)];
  for (int64_t step = 0; step + 1 < n; ++step) {
    LOOM_RETURN_IF_ERROR(
        Exchange(comm, tag, next, block(Mod(me - step, n)), prev, block(Mod(me - step - 1, n))));
  }
  if (slabs.outer != 1) {
    for (int64_t i = 0; i < n; ++i) CopyBlockIn(block(i).data(), out_slabs, i, n, output);
  }
  return OkStatus();
}

Status RingReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                         std::span<const std::byte> input, const Slabs& slabs,
                         int64_t element_bytes, const ReduceBytes& reduce,
                         std::span<std::byte> output) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_ASSIGN_OR_RETURN(const int64_t me, PositionIn(group, comm.rank()));
  if (slabs.inner_bytes % (n * element_bytes) != 0) {
    return Error{fmt::format("reduce-scatter: the dimension does not split into {} blocks", n)};
  }
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size() / n, "reduce-scatter output"));
  std::vector<std::byte> staging;
  const std::vector<std::span<const std::byte>> own = BlocksOf(input, slabs, n, staging);
  if (n == 1) {
    if (!output.empty()) std::memcpy(output.data(), own[0].data(), output.size());
    return OkStatus();
  }
  // The partial sum of block q starts at member q+1 and travels forward;
  // each member adds its own contribution on the right.
  std::vector<std::byte> buffers[2] = {std::vector<std::byte>(output.size()),
                                       std::vector<std::byte>(output.size())};
  const int64_t next = group[Mod(me + 1, n)], prev = group[Mod(me - 1, n)];
  for (int64_t step = 0; step + 1 < n; ++step) {
    const std::span<const std::byte> send =
        step == 0 ? own[Mod(me - 1, n)] : std::span<const std::byte>(buffers[(step - 1) % 2]);
    const std::span<std::byte> received(buffers[step % 2]);
    LOOM_RETURN_IF_ERROR(Exchange(comm, tag, next, send, prev, received));
    const std::span<std::byte> sum = step + 2 == n ? output : received;
    LOOM_RETURN_IF_ERROR(reduce(sum, received, own[Mod(me - 2 - step, n)]));
  }
  return OkStatus();
}

Status RingAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                     std::span<const std::byte> input, int64_t element_bytes,
                     const ReduceBytes& reduce, std::span<std::byte> output) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_ASSIGN_OR_RETURN(const int64_t me, PositionIn(group, comm.rank()));
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size(), "all-reduce output"));
  if (n == 1) {
    if (!output.empty()) std::memcpy(output.data(), input.data(), output.size());
    return OkStatus();
  }
  const int64_t elements = static_cast<int64_t>(input.size()) / element_bytes;
  auto begin = [&](int64_t q) { return q * elements / n * element_bytes; };
  auto size = [&](int64_t q) { return begin(q + 1) - begin(q); };
  auto own = [&](int64_t q) { return input.subspan(begin(q), size(q)); };
  auto result = [&](int64_t q) { return output.subspan(begin(q), size(q)); };
  int64_t largest = 0;
  for (int64_t q = 0; q < n; ++q) largest = std::max(largest, size(q));
  std::vector<std::byte> buffers[2] = {std::vector<std::byte>(largest),
                                       std::vector<std::byte>(largest)};
  const int64_t next = group[Mod(me + 1, n)], prev = group[Mod(me - 1, n)];
  // Reduce-scatter of the chunks: chunk q is complete at member q.
  for (int64_t step = 0; step + 1 < n; ++step) {
    const int64_t sent = Mod(me - 1 - step, n), arriving = Mod(me - 2 - step, n);
    const std::span<const std::byte> send =
        step == 0 ? own(sent)
                  : std::span<const std::byte>(buffers[(step - 1) % 2]).first(size(sent));
    const std::span<std::byte> received =
        std::span<std::byte>(buffers[step % 2]).first(size(arriving));
    LOOM_RETURN_IF_ERROR(Exchange(comm, tag, next, send, prev, received));
    const std::span<std::byte> sum = step + 2 == n ? result(arriving) : received;
    LOOM_RETURN_IF_ERROR(reduce(sum, received, own(arriving)));
  }
  // All-gather of the reduced chunks, each received in its place.
  for (int64_t step = 0; step + 1 < n; ++step) {
    LOOM_RETURN_IF_ERROR(
        Exchange(comm, tag, next, result(Mod(me - step, n)), prev, result(Mod(me - step - 1, n))));
  }
  return OkStatus();
}

Status NativeAllGather(NativeCollectives& native, const std::vector<Group>& groups,
                       const Group& group, int64_t me, std::span<const std::byte> input,
                       const Slabs& slabs, std::span<std::byte> output) {
  (void)me;
  const auto n = static_cast<int64_t>(group.size());
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size() * n, "all-gather output"));
  if (slabs.outer == 1) return native.AllGather(groups, input, output);
  std::vector<std::byte> staging(output.size());
  LOOM_RETURN_IF_ERROR(native.AllGather(groups, input, staging));
  const Slabs out_slabs{slabs.outer, slabs.inner_bytes * n};
  for (int64_t i = 0; i < n; ++i) {
    CopyBlockIn(staging.data() + i * input.size(), out_slabs, i, n, output);
  }
  return OkStatus();
}

Status NativeReduceScatterSum(NativeCollectives& native, const std::vector<Group>& groups,
                              int64_t n, bool is_double, std::span<const std::byte> input,
                              const Slabs& slabs, std::span<std::byte> output) {
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size() / n, "reduce-scatter output"));
  std::vector<std::byte> staging;
  const std::vector<std::span<const std::byte>> blocks = BlocksOf(input, slabs, n, staging);
  // The blocks are contiguous one after the other, in place or staged.
  const std::span<const std::byte> all(blocks.front().data(), input.size());
  return native.ReduceScatterSum(groups, is_double, all, output);
}

Status NativeAllReduceSum(NativeCollectives& native, const std::vector<Group>& groups,
                          bool is_double, std::span<const std::byte> input,
                          std::span<std::byte> output) {
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size(), "all-reduce output"));
  return native.AllReduceSum(groups, is_double, input, output);
}

Status PairwiseAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                        std::span<const std::byte> input, const Slabs& slabs,
                        std::span<std::byte> output) {
  const int64_t n = static_cast<int64_t>(group.size());
  if (slabs.inner_bytes % n != 0) {
    return Error{fmt::format("all-to-all: the dimension does not split into {} blocks", n)};
  }
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size(), "all-to-all output"));
  std::vector<std::byte> staging;
  const std::vector<std::span<const std::byte>> sends = BlocksOf(input, slabs, n, staging);
  std::vector<std::byte> received(slabs.outer == 1 ? 0 : output.size());
  const int64_t block_bytes = static_cast<int64_t>(output.size()) / n;
  std::vector<std::span<std::byte>> outputs;
  for (int64_t j = 0; j < n; ++j) {
    std::byte* base = slabs.outer == 1 ? output.data() : received.data();
    outputs.emplace_back(base + j * block_bytes, block_bytes);
  }
  LOOM_RETURN_IF_ERROR(PairwiseAllToAllTuple(comm, tag, group, sends, outputs));
  if (slabs.outer != 1) {
    for (int64_t j = 0; j < n; ++j) CopyBlockIn(outputs[j].data(), slabs, j, n, output);
  }
  return OkStatus();
}

Status PairwiseAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                             std::span<const std::span<const std::byte>> inputs,
                             std::span<const std::span<std::byte>> outputs) {
  const int64_t n = static_cast<int64_t>(group.size());
  LOOM_ASSIGN_OR_RETURN(const int64_t me, PositionIn(group, comm.rank()));
  if (static_cast<int64_t>(inputs.size()) != n || static_cast<int64_t>(outputs.size()) != n) {
    return Error{fmt::format("all-to-all of {} operands over a group of {}", inputs.size(), n)};
  }
  std::vector<RequestId> requests;
  for (int64_t j = 0; j < n; ++j) {
    if (j == me) continue;
    LOOM_ASSIGN_OR_RETURN(const RequestId recv, comm.StartRecvInto(group[j], tag, outputs[j]));
    requests.push_back(recv);
  }
  // Send to the members after us first, so that the pairs are spread out.
  for (int64_t k = 1; k < n; ++k) {
    const int64_t j = Mod(me + k, n);
    LOOM_ASSIGN_OR_RETURN(const RequestId send, comm.StartSendFrom(group[j], tag, inputs[j]));
    requests.push_back(send);
  }
  LOOM_RETURN_IF_ERROR(CheckSize(outputs[me].size(), inputs[me].size(), "all-to-all block"));
  if (!inputs[me].empty()) std::memcpy(outputs[me].data(), inputs[me].data(), inputs[me].size());
  Status status;
  for (RequestId request : requests) {
    Status waited = comm.Wait(request).status();
    if (status.ok() && !waited.ok()) status = waited;
  }
  return status;
}

Expected<std::unique_ptr<PostedPermute>> PostedPermute::Post(
    Communicator& comm, uint64_t tag, std::span<const std::pair<int64_t, int64_t>> pairs,
    std::span<const std::byte> input, std::span<std::byte> output) {
  LOOM_RETURN_IF_ERROR(CheckSize(output.size(), input.size(), "collective-permute output"));
  auto permute = std::unique_ptr<PostedPermute>(new PostedPermute(comm));
  const int64_t me = comm.rank();
  bool received = false;
  for (const auto& [source, target] : pairs) {
    if (target != me) continue;
    if (received) return Error{fmt::format("device {} receives from two sources", me)};
    received = true;
    if (source == me) {
      if (!input.empty()) std::memcpy(output.data(), input.data(), input.size());
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(const RequestId recv, comm.StartRecvInto(source, tag, output));
    permute->requests_.push_back(recv);
  }
  if (!received && !output.empty()) std::memset(output.data(), 0, output.size());
  for (const auto& [source, target] : pairs) {
    if (source != me || target == me) continue;
    LOOM_ASSIGN_OR_RETURN(const RequestId send, comm.StartSendFrom(target, tag, input));
    permute->requests_.push_back(send);
  }
  return permute;
}

Status PostedPermute::Finish() {
  Status status;
  for (RequestId request : requests_) {
    Status waited = comm_.Wait(request).status();
    if (status.ok() && !waited.ok()) status = waited;
  }
  requests_.clear();
  return status;
}

// --- the worker ------------------------------------------------------------------

CollectiveWorker::CollectiveWorker() : thread_([this] { Loop(); }) {}

CollectiveWorker::~CollectiveWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

CollectiveWorker::Ticket CollectiveWorker::Submit(std::function<Status()> job) {
  Ticket ticket;
  ticket.state_ = std::make_shared<Ticket::State>();
  {
    std::lock_guard lock(mutex_);
    queue_.emplace_back(std::move(job), ticket.state_);
  }
  work_.notify_all();
  return ticket;
}

Status CollectiveWorker::Ticket::Wait() {
  std::unique_lock lock(state_->mutex);
  state_->done_signal.wait(lock, [&] { return state_->done; });
  return state_->status;
}

void CollectiveWorker::Loop() {
  for (;;) {
    std::function<Status()> job;
    std::shared_ptr<Ticket::State> state;
    {
      std::unique_lock lock(mutex_);
      work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing is left
      job = std::move(queue_.front().first);
      state = std::move(queue_.front().second);
      queue_.pop_front();
    }
    Status status = OutOfMemoryAsError(job);
    {
      std::lock_guard lock(state->mutex);
      state->status = std::move(status);
      state->done = true;
    }
    state->done_signal.notify_all();
  }
}

// --- on Tensors --------------------------------------------------------------------

namespace {

// One collective on a thread of its own, from Start to Finish.
class TensorPending : public PendingCollective {
 public:
  TensorPending(Tensor output, std::function<Status(Tensor&)> run) : output_(std::move(output)) {
    ticket_ = worker_.Submit([this, run = std::move(run)] { return run(output_); });
  }
  Expected<Tensor> Finish() override {
    LOOM_RETURN_IF_ERROR(ticket_.Wait());
    return std::move(output_);
  }

 private:
  Tensor output_;
  CollectiveWorker worker_;
  CollectiveWorker::Ticket ticket_;
};

ir::Shape WithDim(const ir::Shape& shape, int64_t dimension, int64_t size) {
  std::vector<int64_t> dims = shape.dims();
  dims[static_cast<size_t>(dimension)] = size;
  return ir::Shape(shape.type(), std::move(dims));
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

// The Tensor reducer on bytes of `type`, as a flat array.
ReduceBytes BytesReducer(Reducer reducer, ir::PrimitiveType type) {
  return
      [reducer = std::move(reducer), type](std::span<std::byte> out, std::span<const std::byte> a,
                                           std::span<const std::byte> b) -> Status {
        const int64_t width = ir::PrimitiveTypeBits(type) / 8;
        const ir::Shape shape(type, {static_cast<int64_t>(a.size()) / width});
        LOOM_ASSIGN_OR_RETURN(Tensor x,
                              Tensor::FromBytes(shape, std::vector<std::byte>(a.begin(), a.end())));
        LOOM_ASSIGN_OR_RETURN(Tensor y,
                              Tensor::FromBytes(shape, std::vector<std::byte>(b.begin(), b.end())));
        LOOM_ASSIGN_OR_RETURN(Tensor z, reducer(x, y));
        if (z.bytes().size() != out.size()) return Error{"the reducer changed the size"};
        std::memcpy(out.data(), z.bytes().data(), out.size());
        return OkStatus();
      };
}

}  // namespace

Expected<PendingPtr> StartAllGather(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, int64_t dimension) {
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, 1, "all-gather"));
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs, SlabsOf(input.shape(), dimension));
  const auto n = static_cast<int64_t>(group.size());
  LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(WithDim(input.shape(), dimension,
                                                             input.shape().dim(dimension) * n)));
  return PendingPtr(std::make_unique<TensorPending>(
      std::move(output), [&comm, tag, group, input, slabs](Tensor& out) {
        return RingAllGather(comm, tag, group, input.bytes(), slabs, out.mutable_bytes());
      }));
}

Expected<PendingPtr> StartReduceScatter(Communicator& comm, uint64_t tag, const Group& group,
                                        const Tensor& input, int64_t dimension, Reducer reducer) {
  const auto n = static_cast<int64_t>(group.size());
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, n, "reduce-scatter"));
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs, SlabsOf(input.shape(), dimension));
  LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(WithDim(input.shape(), dimension,
                                                             input.shape().dim(dimension) / n)));
  const ReduceBytes reduce = BytesReducer(std::move(reducer), input.type());
  return PendingPtr(std::make_unique<TensorPending>(
      std::move(output), [&comm, tag, group, input, slabs, reduce](Tensor& out) {
        return RingReduceScatter(comm, tag, group, input.bytes(), slabs, input.ElementBytes(),
                                 reduce, out.mutable_bytes());
      }));
}

Expected<PendingPtr> StartAllReduce(Communicator& comm, uint64_t tag, const Group& group,
                                    const Tensor& input, Reducer reducer) {
  if (input.IsTuple()) return Error{"all-reduce of a tuple must be split per element"};
  LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(input.shape()));
  const ReduceBytes reduce = BytesReducer(std::move(reducer), input.type());
  return PendingPtr(std::make_unique<TensorPending>(
      std::move(output), [&comm, tag, group, input, reduce](Tensor& out) {
        return RingAllReduce(comm, tag, group, input.bytes(), input.ElementBytes(), reduce,
                             out.mutable_bytes());
      }));
}

Expected<PendingPtr> StartAllToAll(Communicator& comm, uint64_t tag, const Group& group,
                                   const Tensor& input, int64_t dimension) {
  const auto n = static_cast<int64_t>(group.size());
  LOOM_RETURN_IF_ERROR(CheckDivisible(input, dimension, n, "all-to-all"));
  LOOM_ASSIGN_OR_RETURN(const Slabs slabs, SlabsOf(input.shape(), dimension));
  LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(input.shape()));
  return PendingPtr(std::make_unique<TensorPending>(
      std::move(output), [&comm, tag, group, input, slabs](Tensor& out) {
        return PairwiseAllToAll(comm, tag, group, input.bytes(), slabs, out.mutable_bytes());
      }));
}

Expected<PendingPtr> StartAllToAllTuple(Communicator& comm, uint64_t tag, const Group& group,
                                        const std::vector<Tensor>& inputs) {
  if (inputs.size() != group.size() || inputs.empty()) {
    return Error{
        fmt::format("all-to-all of {} operands over a group of {}", inputs.size(), group.size())};
  }
  std::vector<Tensor> outputs;
  for (const Tensor& input : inputs) {
    if (!input.shape().Compatible(inputs.front().shape()) || input.IsTuple()) {
      return Error{"all-to-all operands differ in shape"};
    }
    LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(input.shape()));
    outputs.push_back(std::move(output));
  }
  // The elements travel inside one tuple tensor; the job fills them.
  return PendingPtr(std::make_unique<TensorPending>(
      Tensor::Tuple(std::move(outputs)), [&comm, tag, group, inputs](Tensor& result) -> Status {
        std::vector<std::span<const std::byte>> sends;
        std::vector<std::span<std::byte>> receives;
        for (const Tensor& input : inputs) sends.push_back(input.bytes());
        for (Tensor& element : result.mutable_tuple_elements()) {
          receives.push_back(element.mutable_bytes());
        }
        return PairwiseAllToAllTuple(comm, tag, group, sends, receives);
      }));
}

Expected<PendingPtr> StartCollectivePermute(Communicator& comm, uint64_t tag,
                                            std::span<const std::pair<int64_t, int64_t>> pairs,
                                            const Tensor& input) {
  if (input.IsTuple()) return Error{"collective-permute of a tuple must be split per element"};
  LOOM_ASSIGN_OR_RETURN(Tensor output, Tensor::Zeros(input.shape()));
  const std::vector<std::pair<int64_t, int64_t>> copied(pairs.begin(), pairs.end());
  return PendingPtr(std::make_unique<TensorPending>(
      std::move(output), [&comm, tag, copied, input](Tensor& out) -> Status {
        LOOM_ASSIGN_OR_RETURN(
            std::unique_ptr<PostedPermute> permute,
            PostedPermute::Post(comm, tag, copied, input.bytes(), out.mutable_bytes()));
        return permute->Finish();
      }));
}

namespace {

// Row-major view of a tensor around one dimension: `outer` runs of
// `dim_size` rows of `row_bytes` each.
struct Rows {
  int64_t outer = 1;
  int64_t dim_size = 0;
  int64_t row_bytes = 0;
};

Expected<Rows> RowsAround(const ir::Shape& shape, int64_t dimension, int64_t element_bytes) {
  if (shape.IsTuple() || dimension < 0 || dimension >= shape.rank()) {
    return Error{fmt::format("dimension {} is out of range for {}", dimension, shape.ToString())};
  }
  Rows rows;
  rows.row_bytes = element_bytes;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    if (d < dimension) rows.outer *= shape.dim(d);
    if (d > dimension) rows.row_bytes *= shape.dim(d);
  }
  rows.dim_size = shape.dim(dimension);
  return rows;
}

}  // namespace

Expected<Tensor> SliceBlock(const Tensor& tensor, int64_t dimension, int64_t index, int64_t count) {
  LOOM_RETURN_IF_ERROR(CheckDivisible(tensor, dimension, count, "slice"));
  LOOM_ASSIGN_OR_RETURN(const Rows slabs,
                        RowsAround(tensor.shape(), dimension, tensor.ElementBytes()));
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
  LOOM_ASSIGN_OR_RETURN(const Rows slabs,
                        RowsAround(first.shape(), dimension, first.ElementBytes()));
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

}  // namespace loom::exec
