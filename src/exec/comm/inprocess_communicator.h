// The in-process backend: one thread per device, shared memory. A send
// copies its bytes into the receiver's mailbox at once (the transfer is a
// memcpy), a receive waits for the matching message.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "exec/comm/communicator.h"

namespace loom::exec {

// The shared state of one run: every device's mailboxes and the abort flag.
class InProcessWorld : public std::enable_shared_from_this<InProcessWorld> {
 public:
  static std::shared_ptr<InProcessWorld> Create(int64_t size, std::chrono::milliseconds timeout);

  int64_t size() const { return size_; }
  // The communicator of device `rank` (one per device thread).
  std::unique_ptr<Communicator> Connect(int64_t rank);

  void Deliver(int64_t from, int64_t to, uint64_t tag, Bytes data);
  // Takes the next message from `from` to `to` with `tag`, waiting for it.
  Expected<Bytes> Take(int64_t from, int64_t to, uint64_t tag);
  void Abort(const Error& error);
  std::optional<Error> Aborted();

 private:
  InProcessWorld(int64_t size, std::chrono::milliseconds timeout)
      : size_(size), timeout_(timeout), waiting_for_(static_cast<size_t>(size), -1) {}

  using Key = std::tuple<int64_t, int64_t, uint64_t>;  // from, to, tag
  const int64_t size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, std::deque<Bytes>> mailboxes_;
  std::optional<Error> abort_;
  // Whom each device is waiting for, or timed out waiting for (-1: nobody),
  // so that in a chain of waits (a ring whose member never arrived) the
  // device at the end of the chain reports the hang, naming the device that
  // is really missing.
  std::vector<int64_t> waiting_for_;
};

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessWorld> world, int64_t rank)
      : world_(std::move(world)), rank_(rank) {}

  int64_t rank() const override { return rank_; }
  int64_t size() const override { return world_->size(); }
  Expected<RequestId> StartSend(int64_t peer, uint64_t tag, Bytes data) override;
  Expected<RequestId> StartRecv(int64_t peer, uint64_t tag, size_t bytes) override;
  Expected<RequestId> StartSendFrom(int64_t peer, uint64_t tag,
                                    std::span<const std::byte> data) override;
  Expected<RequestId> StartRecvInto(int64_t peer, uint64_t tag,
                                    std::span<std::byte> destination) override;
  Expected<Bytes> Wait(RequestId request) override;
  void Abort(const Error& error) override { world_->Abort(error); }
  std::optional<Error> Aborted() const override { return world_->Aborted(); }

 private:
  struct PendingRecv {
    int64_t peer;
    uint64_t tag;
    size_t bytes;
    std::byte* destination;  // null: Wait returns the bytes
  };
  Status CheckPeer(int64_t peer) const;
  RequestId Register(std::optional<PendingRecv> recv);

  std::shared_ptr<InProcessWorld> world_;
  const int64_t rank_;
  std::mutex mutex_;  // the requests: the device and its collective worker post both
  RequestId next_request_ = 0;
  // Sends complete when posted; only receives are pending.
  std::unordered_map<RequestId, std::optional<PendingRecv>> requests_;
};

}  // namespace loom::exec
