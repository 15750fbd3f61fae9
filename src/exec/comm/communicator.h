// The communicator interface: asynchronous point-to-point transfers between
// the devices of one run. Collectives are built on it (exec/collectives.h),
// and each backend implements it: in-process threads (the default) and MPI
// processes. A transfer posted with Start* progresses while the device
// computes; Wait blocks until it is done, the run is aborted, or the
// communicator's timeout passes, so that a failing device never leaves the
// others hanging.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "support/status.h"

namespace loom::exec {

using Bytes = std::vector<std::byte>;

// Identifies one posted transfer on one communicator. A communicator may be
// used from several threads of its device (the device's compute thread and
// its collective worker); each request is waited on by one of them.
using RequestId = int64_t;

// Collectives the transport runs itself (MPI's own), where a backend has
// them. Each call is collective over every device of the run: `groups`
// partitions the devices (global ids, each group in ring order) and every
// device passes the same partition; the call blocks until this device's part
// is done. Sums are the transport's, in its own order: they need not be
// bitwise equal to Loom's rings.
class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // `output` is the group's inputs concatenated in group order.
  virtual Status AllGather(const std::vector<std::vector<int64_t>>& groups,
                           std::span<const std::byte> input, std::span<std::byte> output) = 0;
  // Sums of f32 (`is_double` false) or f64 elements.
  virtual Status AllReduceSum(const std::vector<std::vector<int64_t>>& groups, bool is_double,
                              std::span<const std::byte> input, std::span<std::byte> output) = 0;
  // Block (my position) of the sum of the group's inputs, cut in equal
  // contiguous blocks.
  virtual Status ReduceScatterSum(const std::vector<std::vector<int64_t>>& groups, bool is_double,
                                  std::span<const std::byte> input,
                                  std::span<std::byte> output) = 0;
};

// Tags from kControlTagBase on carry control messages (a run's reports,
// its closing barrier), those below it a collective's data. Backends keep
// the two apart (MPI on separate communicators, whatever tag bits it
// keeps), so a collective's message sent by a device that is still in it
// can never be taken for a control message by a device that moved on.
inline constexpr uint64_t kControlTagBase = uint64_t{1} << 40;

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This device's global id and the number of devices.
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;

  // Posts a send of `data` to `peer`. Messages between two devices with the
  // same tag arrive in the order they were sent.
  virtual Expected<RequestId> StartSend(int64_t peer, uint64_t tag, Bytes data) = 0;
  // Posts a receive of `bytes` bytes from `peer`.
  virtual Expected<RequestId> StartRecv(int64_t peer, uint64_t tag, size_t bytes) = 0;
  // The same without copies of the caller's memory: `data` (sent) and
  // `destination` (received into) must stay valid, and `data` unchanged,
  // until Wait on the request returns. A received message of another size
  // than `destination` is an error.
  virtual Expected<RequestId> StartSendFrom(int64_t peer, uint64_t tag,
                                            std::span<const std::byte> data) = 0;
  virtual Expected<RequestId> StartRecvInto(int64_t peer, uint64_t tag,
                                            std::span<std::byte> destination) = 0;
  // Completes a request: the received bytes (empty for a send, or for a
  // receive into caller memory).
  virtual Expected<Bytes> Wait(RequestId request) = 0;

  // Fails the whole run: every device's waits return `error` promptly. A
  // device that fails calls this before it stops.
  virtual void Abort(const Error& error) = 0;
  // The error the run was aborted with, if it was; cheap enough to poll.
  virtual std::optional<Error> Aborted() const = 0;

  // The transport's own collectives, or null when it has none.
  virtual NativeCollectives* native_collectives() { return nullptr; }
};

}  // namespace loom::exec
