#include "exec/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <mpi.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>

namespace loom::exec {
namespace {

// MPI guarantees tags up to 32767; sequence tags wrap, which is safe because
// messages with equal (source, tag) never overtake each other and no two
// transfers 32768 collectives apart are in flight at once. Control messages
// (tags from kControlTagBase) travel on a communicator of their own, so
// that wrapping never mixes them with a collective's.
constexpr uint64_t kTagModulus = 32768;

// One MPI operation the communication thread posts and polls: a send, a
// receive, one of MPI's non-blocking collectives, or the creation of the
// communicators of a partition of the devices (MPI_Comm_split, blocking).
enum class Kind { kSend, kRecv, kAllGather, kAllReduce, kReduceScatter, kSplit };

struct Transfer {
  Kind kind = Kind::kSend;
  bool is_send = false;
  int peer = 0;
  int tag = 0;
  Bytes data;  // the payload of a send, the buffer of a receive
  // Caller memory to send from or receive into instead of `data`.
  std::byte* external = nullptr;
  size_t external_bytes = 0;
  // Collectives: the buffers, the element count (bytes for all-gather, per
  // block for reduce-scatter), the element type, the communicator.
  const std::byte* send_buffer = nullptr;
  std::byte* recv_buffer = nullptr;
  int count = 0;
  bool is_double = false;
  MPI_Comm comm = MPI_COMM_NULL;
  // kSplit: this device's color and key, and where the new comm goes.
  int color = 0, key = 0;
  MPI_Comm* split_result = nullptr;
  MPI_Request request = MPI_REQUEST_NULL;
  bool posted = false;
  bool done = false;
  std::string error;
};

class MpiCommunicator : public Communicator, public NativeCollectives {
 public:
  // `data` and `control`: MPI_COMM_WORLD's duplicates this object frees.
  MpiCommunicator(const MpiOptions& options, int rank, int size, MPI_Comm data, MPI_Comm control)
      : options_(options),
        rank_(rank),
        size_(size),
        data_comm_(data),
        control_comm_(control),
        thread_([this] { Progress(); }) {}

  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    work_.notify_all();
    thread_.join();
    if (abandoned_) {
      // A transfer nobody waits for any more (its waiter timed out) would
      // keep MPI_Finalize waiting for a peer that never comes: end the job.
      std::fprintf(stderr, "device %d: ending the job: transfers with peers are still pending\n",
                   rank_);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (auto& [partition, comm] : communicators_) MPI_Comm_free(&comm);
    MPI_Comm_free(&data_comm_);
    MPI_Comm_free(&control_comm_);
    MPI_Finalize();
  }

  NativeCollectives* native_collectives() override { return this; }

  Status AllGather(const std::vector<std::vector<int64_t>>& groups,
                   std::span<const std::byte> input, std::span<std::byte> output) override {
    auto transfer = std::make_unique<Transfer>();
    transfer->kind = Kind::kAllGather;
    LOOM_ASSIGN_OR_RETURN(transfer->comm, CommunicatorOf(groups));
    LOOM_ASSIGN_OR_RETURN(transfer->count, CountOf(input.size()));
    transfer->send_buffer = input.data();
    transfer->recv_buffer = output.data();
    return Wait(Queue(std::move(transfer))).status();
  }

  Status AllReduceSum(const std::vector<std::vector<int64_t>>& groups, bool is_double,
                      std::span<const std::byte> input, std::span<std::byte> output) override {
    auto transfer = std::make_unique<Transfer>();
    transfer->kind = Kind::kAllReduce;
    LOOM_ASSIGN_OR_RETURN(transfer->comm, CommunicatorOf(groups));
    LOOM_ASSIGN_OR_RETURN(transfer->count, CountOf(input.size() / (is_double ? 8 : 4)));
    transfer->is_double = is_double;
    transfer->send_buffer = input.data();
    transfer->recv_buffer = output.data();
    return Wait(Queue(std::move(transfer))).status();
  }

  Status ReduceScatterSum(const std::vector<std::vector<int64_t>>& groups, bool is_double,
                          std::span<const std::byte> input, std::span<std::byte> output) override {
    auto transfer = std::make_unique<Transfer>();
    transfer->kind = Kind::kReduceScatter;
    LOOM_ASSIGN_OR_RETURN(transfer->comm, CommunicatorOf(groups));
    LOOM_ASSIGN_OR_RETURN(transfer->count, CountOf(output.size() / (is_double ? 8 : 4)));
    transfer->is_double = is_double;
    transfer->send_buffer = input.data();
    transfer->recv_buffer = output.data();
    return Wait(Queue(std::move(transfer))).status();
  }

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return size_; }

  Expected<RequestId> StartSend(int64_t peer, uint64_t tag, Bytes data) override {
    return Post(true, peer, tag, std::move(data));
  }
  Expected<RequestId> StartRecv(int64_t peer, uint64_t tag, size_t bytes) override {
    return Post(false, peer, tag, Bytes(bytes));
  }
  Expected<RequestId> StartSendFrom(int64_t peer, uint64_t tag,
                                    std::span<const std::byte> data) override {
    // MPI only reads a send buffer.
    return Post(true, peer, tag, Bytes{}, const_cast<std::byte*>(data.data()), data.size());
  }
  Expected<RequestId> StartRecvInto(int64_t peer, uint64_t tag,
                                    std::span<std::byte> destination) override {
    return Post(false, peer, tag, Bytes{}, destination.data(), destination.size());
  }

  Expected<Bytes> Wait(RequestId id) override {
    std::unique_lock lock(mutex_);
    auto it = transfers_.find(id);
    if (it == transfers_.end()) return Error{fmt::format("device {}: unknown request", rank_)};
    Transfer& transfer = *it->second;
    const bool finished =
        completed_.wait_for(lock, options_.timeout, [&] { return transfer.done; });
    if (!finished) {
      if (transfer.kind != Kind::kSend && transfer.kind != Kind::kRecv) {
        return Error{fmt::format("timed out after {} ms waiting for a collective of MPI's",
                                 options_.timeout.count())};
      }
      return Error{fmt::format("timed out after {} ms waiting for {} device {}",
                               options_.timeout.count(),
                               transfer.is_send ? "a send to" : "data from", transfer.peer)};
    }
    if (!transfer.error.empty()) return Error{transfer.error};
    Bytes data = transfer.is_send || transfer.external ? Bytes{} : std::move(transfer.data);
    transfers_.erase(it);
    return data;
  }

  // An aborted MPI job has ended this process already.
  std::optional<Error> Aborted() const override { return std::nullopt; }

  void Abort(const Error& error) override {
    std::fprintf(stderr, "%s\n", error.ToString().c_str());
    std::fflush(stderr);
    // MPI runs SERIALIZED: the communication thread must be out of MPI
    // before this thread calls it, or MPI_Abort may hang inside MPI's
    // progress engine and leave the peers to their timeouts. The thread
    // leaves within one poll; a second is the bound in case it is inside a
    // blocking call (MPI_Comm_split waiting for peers).
    {
      std::unique_lock lock(mutex_);
      abort_ = true;
      work_.notify_all();
      completed_.wait_for(lock, std::chrono::seconds(1), [&] { return progress_stopped_; });
    }
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 private:
  Expected<RequestId> Post(bool is_send, int64_t peer, uint64_t tag, Bytes data,
                           std::byte* external = nullptr, size_t external_bytes = 0) {
    if (peer < 0 || peer >= size_) {
      return Error{fmt::format("device {}: peer {} is out of range [0, {})", rank_, peer, size_)};
    }
    auto transfer = std::make_unique<Transfer>();
    transfer->kind = is_send ? Kind::kSend : Kind::kRecv;
    transfer->is_send = is_send;
    transfer->peer = static_cast<int>(peer);
    transfer->tag = static_cast<int>(tag % kTagModulus);
    transfer->comm = tag >= kControlTagBase ? control_comm_ : data_comm_;
    transfer->data = std::move(data);
    transfer->external = external;
    transfer->external_bytes = external_bytes;
    return Queue(std::move(transfer));
  }

  RequestId Queue(std::unique_ptr<Transfer> transfer) {
    RequestId id;
    {
      std::lock_guard lock(mutex_);
      id = next_id_++;
      queued_.push_back(transfer.get());
      transfers_.emplace(id, std::move(transfer));
    }
    work_.notify_all();
    return id;
  }

  static Expected<int> CountOf(size_t count) {
    if (count > static_cast<size_t>(std::numeric_limits<int>::max())) {
      return Error{fmt::format("{} elements are more than one MPI call takes", count)};
    }
    return static_cast<int>(count);
  }

  // The MPI communicator of this device's group in `groups`, created for the
  // partition the first time it is used (every device reaches the same
  // collective, so every device creates it at the same point), ranked in
  // group order.
  Expected<MPI_Comm> CommunicatorOf(const std::vector<std::vector<int64_t>>& groups) {
    const std::string partition = fmt::format("{}", groups);
    if (auto it = communicators_.find(partition); it != communicators_.end()) return it->second;
    auto transfer = std::make_unique<Transfer>();
    transfer->kind = Kind::kSplit;
    transfer->color = -1;
    for (const std::vector<int64_t>& group : groups) {
      for (size_t position = 0; position < group.size(); ++position) {
        if (group[position] != rank_) continue;
        transfer->color = static_cast<int>(*std::min_element(group.begin(), group.end()));
        transfer->key = static_cast<int>(position);
      }
    }
    if (transfer->color < 0) return Error{fmt::format("device {} is in no group", rank_)};
    MPI_Comm comm = MPI_COMM_NULL;
    transfer->split_result = &comm;
    LOOM_RETURN_IF_ERROR(Wait(Queue(std::move(transfer))).status());
    communicators_[partition] = comm;
    return comm;
  }

  // The communication thread: posts queued transfers, polls active ones.
  // Between polls that complete nothing it sleeps, doubling the pause from
  // kFirstPause up to options_.poll_interval: short transfers finish with
  // little latency, long ones take little CPU from the device's compute.
  void Progress() {
    constexpr std::chrono::microseconds kFirstPause{5};
    // At stop, transfers still active have no waiter (it timed out or gave
    // up); they get this long to complete before they count as abandoned.
    constexpr std::chrono::seconds kGraceAtStop{1};
    std::vector<Transfer*> active;
    std::chrono::microseconds pause = kFirstPause;
    std::optional<std::chrono::steady_clock::time_point> stop_deadline;
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        if (active.empty()) {
          work_.wait(lock, [&] { return stop_ || abort_ || !queued_.empty(); });
        }
        if (abort_) {
          progress_stopped_ = true;
          completed_.notify_all();
          return;
        }
        if (stop_ && queued_.empty() && active.empty()) return;
        if (stop_ && queued_.empty()) {
          const auto now = std::chrono::steady_clock::now();
          if (!stop_deadline) stop_deadline = now + kGraceAtStop;
          if (now > *stop_deadline) {
            abandoned_ = true;
            return;
          }
        }
        if (!queued_.empty()) pause = kFirstPause;
        while (!queued_.empty()) {
          active.push_back(queued_.front());
          queued_.pop_front();
        }
      }
      if (PollOnce(active)) {
        pause = kFirstPause;
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, options_.poll_interval);
      }
    }
  }

  // Posts new transfers and tests every active one once; true when any
  // completed. A transfer leaves `active` before it is marked done: from
  // then on its waiter may free it.
  bool PollOnce(std::vector<Transfer*>& active) {
    std::vector<std::pair<Transfer*, std::string>> finished;
    for (Transfer* transfer : active) {
      if (!transfer->posted) {
        transfer->posted = true;
        const int rc = PostToMpi(*transfer);
        if (rc != MPI_SUCCESS) {
          finished.emplace_back(transfer, fmt::format("device {}: MPI error {}", rank_, rc));
          continue;
        }
      }
      int flag = 0;
      MPI_Status status;
      const int rc = MPI_Test(&transfer->request, &flag, &status);
      if (rc != MPI_SUCCESS) {
        finished.emplace_back(transfer, fmt::format("device {}: MPI error {}", rank_, rc));
      } else if (flag) {
        finished.emplace_back(transfer, ReceivedSizeError(*transfer, status));
      }
    }
    for (const auto& [transfer, error] : finished) std::erase(active, transfer);
    for (auto& [transfer, error] : finished) Complete(*transfer, std::move(error));
    return !finished.empty();
  }

  // "" unless a receive got another number of bytes than it asked for.
  std::string ReceivedSizeError(const Transfer& transfer, const MPI_Status& status) const {
    if (transfer.kind != Kind::kRecv) return "";
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    const size_t expected = transfer.external ? transfer.external_bytes : transfer.data.size();
    if (static_cast<size_t>(count) == expected) return "";
    return fmt::format("device {}: expected {} bytes from device {}, got {}", rank_, expected,
                       transfer.peer, count);
  }

  int PostToMpi(Transfer& transfer) {
    const MPI_Datatype floats = transfer.is_double ? MPI_DOUBLE : MPI_FLOAT;
    switch (transfer.kind) {
      case Kind::kAllGather:
        return MPI_Iallgather(transfer.send_buffer, transfer.count, MPI_BYTE, transfer.recv_buffer,
                              transfer.count, MPI_BYTE, transfer.comm, &transfer.request);
      case Kind::kAllReduce:
        return MPI_Iallreduce(transfer.send_buffer, transfer.recv_buffer, transfer.count, floats,
                              MPI_SUM, transfer.comm, &transfer.request);
      case Kind::kReduceScatter:
        return MPI_Ireduce_scatter_block(transfer.send_buffer, transfer.recv_buffer, transfer.count,
                                         floats, MPI_SUM, transfer.comm, &transfer.request);
      case Kind::kSplit:  // blocking; the request stays null, so it tests as done
        return MPI_Comm_split(MPI_COMM_WORLD, transfer.color, transfer.key, transfer.split_result);
      default:
        break;
    }
    std::byte* buffer = transfer.external ? transfer.external : transfer.data.data();
    const size_t bytes = transfer.external ? transfer.external_bytes : transfer.data.size();
    if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) return MPI_ERR_COUNT;
    const int count = static_cast<int>(bytes);
    return transfer.is_send ? MPI_Isend(buffer, count, MPI_BYTE, transfer.peer, transfer.tag,
                                        transfer.comm, &transfer.request)
                            : MPI_Irecv(buffer, count, MPI_BYTE, transfer.peer, transfer.tag,
                                        transfer.comm, &transfer.request);
  }

  void Complete(Transfer& transfer, std::string error) {
    {
      std::lock_guard lock(mutex_);
      transfer.error = std::move(error);
      transfer.done = true;
    }
    completed_.notify_all();
  }

  const MpiOptions options_;
  const int rank_;
  const int size_;
  MPI_Comm data_comm_;
  MPI_Comm control_comm_;
  std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable completed_;
  std::deque<Transfer*> queued_;
  std::unordered_map<RequestId, std::unique_ptr<Transfer>> transfers_;
  // Touched only by the threads that run collectives, one at a time (the
  // device's collective worker).
  std::unordered_map<std::string, MPI_Comm> communicators_;
  RequestId next_id_ = 0;
  bool stop_ = false;
  bool abort_ = false;             // Abort asks the thread to leave MPI
  bool progress_stopped_ = false;  // and it has
  bool abandoned_ = false;         // stopped with transfers still pending
  std::thread thread_;             // last: starts after every other member is ready
};

}  // namespace

Expected<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return Error{"MPI is already initialised in this process"};
  int provided = 0;
  // SERIALIZED: the device thread only calls MPI for MPI_Abort; every other
  // call is made by the communication thread.
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
    return Error{"MPI_Init_thread failed"};
  }
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    return Error{"this MPI library does not support MPI_THREAD_SERIALIZED"};
  }
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm control = MPI_COMM_NULL;
  if (MPI_Comm_dup(MPI_COMM_WORLD, &data) != MPI_SUCCESS ||
      MPI_Comm_dup(MPI_COMM_WORLD, &control) != MPI_SUCCESS) {
    MPI_Finalize();
    return Error{"MPI_Comm_dup failed"};
  }
  return std::unique_ptr<Communicator>(
      std::make_unique<MpiCommunicator>(options, rank, size, data, control));
}

int64_t MpiWorldRankFromEnvironment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* value = std::getenv(name)) return std::atoll(value);
  }
  return -1;
}

}  // namespace loom::exec
