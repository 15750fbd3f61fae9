#include "exec/comm/inprocess_communicator.h"

#include <fmt/format.h>

#include <cstring>

namespace loom::exec {

std::shared_ptr<InProcessWorld> InProcessWorld::Create(int64_t size,
                                                       std::chrono::milliseconds timeout) {
  return std::shared_ptr<InProcessWorld>(new InProcessWorld(size, timeout));
}

std::unique_ptr<Communicator> InProcessWorld::Connect(int64_t rank) {
  return std::make_unique<InProcessCommunicator>(shared_from_this(), rank);
}

void InProcessWorld::Deliver(int64_t from, int64_t to, uint64_t tag, Bytes data) {
  {
    std::lock_guard lock(mutex_);
    mailboxes_[{from, to, tag}].push_back(std::move(data));
  }
  arrived_.notify_all();
}

Expected<Bytes> InProcessWorld::Take(int64_t from, int64_t to, uint64_t tag) {
  std::unique_lock lock(mutex_);
  const Key key{from, to, tag};
  auto arrived = [&] {
    if (abort_) return true;
    auto it = mailboxes_.find(key);
    return it != mailboxes_.end() && !it->second.empty();
  };
  waiting_for_[to] = from;
  bool ready = arrived_.wait_for(lock, timeout_, arrived);
  // The peer is itself waiting: it is not the one missing. Give the device
  // at the end of the chain the time to say who is.
  if (!ready && waiting_for_[from] >= 0) ready = arrived_.wait_for(lock, timeout_, arrived);
  // A device that timed out stays marked as waiting: it was not missing.
  if (ready) waiting_for_[to] = -1;
  if (abort_) return *abort_;
  if (!ready) {
    return Error{fmt::format("timed out after {} ms waiting for data from device {}",
                             timeout_.count(), from)};
  }
  auto it = mailboxes_.find(key);
  Bytes data = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) mailboxes_.erase(it);
  return data;
}

void InProcessWorld::Abort(const Error& error) {
  {
    std::lock_guard lock(mutex_);
    if (!abort_) abort_ = error;
  }
  arrived_.notify_all();
}

std::optional<Error> InProcessWorld::Aborted() {
  std::lock_guard lock(mutex_);
  return abort_;
}

Status InProcessCommunicator::CheckPeer(int64_t peer) const {
  if (peer >= 0 && peer < size()) return OkStatus();
  return Error{fmt::format("device {}: peer {} is out of range [0, {})", rank_, peer, size())};
}

RequestId InProcessCommunicator::Register(std::optional<PendingRecv> recv) {
  std::lock_guard lock(mutex_);
  const RequestId id = next_request_++;
  requests_.emplace(id, recv);
  return id;
}

Expected<RequestId> InProcessCommunicator::StartSend(int64_t peer, uint64_t tag, Bytes data) {
  LOOM_RETURN_IF_ERROR(CheckPeer(peer));
  world_->Deliver(rank_, peer, tag, std::move(data));
  return Register(std::nullopt);
}

Expected<RequestId> InProcessCommunicator::StartRecv(int64_t peer, uint64_t tag, size_t bytes) {
  LOOM_RETURN_IF_ERROR(CheckPeer(peer));
  return Register(PendingRecv{peer, tag, bytes, nullptr});
}

// The send is the copy into the receiver's mailbox: it completes at once.
Expected<RequestId> InProcessCommunicator::StartSendFrom(int64_t peer, uint64_t tag,
                                                         std::span<const std::byte> data) {
  return StartSend(peer, tag, Bytes(data.begin(), data.end()));
}

Expected<RequestId> InProcessCommunicator::StartRecvInto(int64_t peer, uint64_t tag,
                                                         std::span<std::byte> destination) {
  LOOM_RETURN_IF_ERROR(CheckPeer(peer));
  return Register(PendingRecv{peer, tag, destination.size(), destination.data()});
}

Expected<Bytes> InProcessCommunicator::Wait(RequestId request) {
  std::optional<PendingRecv> recv;
  {
    std::lock_guard lock(mutex_);
    auto it = requests_.find(request);
    if (it == requests_.end()) {
      return Error{fmt::format("device {}: wait on unknown request {}", rank_, request)};
    }
    recv = it->second;
    requests_.erase(it);
  }
  if (!recv) return Bytes{};
  LOOM_ASSIGN_OR_RETURN(Bytes data, world_->Take(recv->peer, rank_, recv->tag));
  if (data.size() != recv->bytes) {
    return Error{fmt::format("device {}: expected {} bytes from device {}, got {}", rank_,
                             recv->bytes, recv->peer, data.size())};
  }
  if (recv->destination == nullptr) return data;
  if (!data.empty()) std::memcpy(recv->destination, data.data(), data.size());
  return Bytes{};
}

}  // namespace loom::exec
