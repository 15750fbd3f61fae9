#include "exec/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "exec/comm/mpi_communicator.h"
#include "exec/cpu/cpu_device.h"

namespace loom::exec {
namespace {

class ThreadsLaunch : public Launch {
 public:
  Expected<std::vector<DeviceResult>> Run(const ir::Module& module, const ir::DeviceGrid& grid,
                                          const RunOptions& options) override {
    // One device per thread already fills the cores, unless asked otherwise
    // (the count is then that of the process's one OpenBLAS pool, which the
    // device threads share).
    if (options.compute_threads > 0) {
      cpu::SetBlasThreads(options.compute_threads);
    } else if (grid.size() > 1) {
      cpu::SetBlasThreads(1);
    }
    return RunOnThreads(module, grid, options);
  }
  Expected<std::vector<std::string>> GatherAtRoot(std::vector<std::string> mine) override {
    return mine;
  }
  bool is_root() const override { return true; }
  Status AwaitRoot() override { return OkStatus(); }
  void Fail(const Error&) override {}
};

// Tags for the report exchange: control messages, apart from collectives'.
constexpr uint64_t kReportTag = kControlTagBase;

class MpiLaunch : public Launch {
 public:
  explicit MpiLaunch(std::unique_ptr<Communicator> comm) : comm_(std::move(comm)) {}

  Expected<std::vector<DeviceResult>> Run(const ir::Module& module, const ir::DeviceGrid& grid,
                                          const RunOptions& options) override {
    // One process per device: by default leave the other cores to the others.
    cpu::SetBlasThreads(options.compute_threads > 0 ? options.compute_threads : 1);
    const auto origin = TraceRecorder::Clock::now();
    // The processes may share a machine: budget for all of them.
    const Status memory = CheckMemory(module, comm_->size());
    Expected<DeviceResult> result = memory.ok() ? RunDevice(module, grid, *comm_, options, origin)
                                                : Expected<DeviceResult>(memory);
    if (!result.ok()) {  // ends the job, naming the file like the CLI does
      comm_->Abort(Error{options.source.empty() ? result.error().ToString()
                                                : result.error().ToString(options.source)});
    }
    std::vector<DeviceResult> results;
    results.push_back(std::move(result).value());
    return results;
  }

  Expected<std::vector<std::string>> GatherAtRoot(std::vector<std::string> mine) override {
    if (mine.size() != 1) return Error{"an MPI process reports for exactly one device"};
    const uint64_t tag = kReportTag + 2 * reports_++;
    if (!is_root()) {
      Bytes text(reinterpret_cast<const std::byte*>(mine[0].data()),
                 reinterpret_cast<const std::byte*>(mine[0].data() + mine[0].size()));
      const uint64_t size = text.size();
      Bytes header(sizeof(size));
      std::memcpy(header.data(), &size, sizeof(size));
      LOOM_ASSIGN_OR_RETURN(RequestId first, comm_->StartSend(0, tag, std::move(header)));
      LOOM_ASSIGN_OR_RETURN(RequestId second, comm_->StartSend(0, tag + 1, std::move(text)));
      LOOM_RETURN_IF_ERROR(WaitForPeer(first).status());
      LOOM_RETURN_IF_ERROR(WaitForPeer(second).status());
      return std::vector<std::string>{};
    }
    std::vector<std::string> texts = {std::move(mine[0])};
    for (int64_t peer = 1; peer < comm_->size(); ++peer) {
      uint64_t size = 0;
      LOOM_ASSIGN_OR_RETURN(RequestId first, comm_->StartRecv(peer, tag, sizeof(size)));
      LOOM_ASSIGN_OR_RETURN(Bytes header, WaitForPeer(first));
      std::memcpy(&size, header.data(), sizeof(size));
      LOOM_ASSIGN_OR_RETURN(RequestId second, comm_->StartRecv(peer, tag + 1, size));
      LOOM_ASSIGN_OR_RETURN(Bytes text, WaitForPeer(second));
      texts.emplace_back(reinterpret_cast<const char*>(text.data()), text.size());
    }
    return texts;
  }

  bool is_root() const override { return comm_->rank() == 0; }

  void Fail(const Error& error) override {
    comm_->Abort(Error{fmt::format("device {}: {}", comm_->rank(), error.message), error.loc});
  }

  Status AwaitRoot() override {
    const uint64_t tag = kReportTag + 2 * reports_++;
    if (is_root()) {
      std::vector<RequestId> sends;
      for (int64_t peer = 1; peer < comm_->size(); ++peer) {
        LOOM_ASSIGN_OR_RETURN(RequestId send, comm_->StartSend(peer, tag, Bytes(1)));
        sends.push_back(send);
      }
      for (RequestId send : sends) LOOM_RETURN_IF_ERROR(WaitForPeer(send).status());
      return OkStatus();
    }
    LOOM_ASSIGN_OR_RETURN(RequestId recv, comm_->StartRecv(0, tag, 1));
    return WaitForPeer(recv).status();
  }

 private:
  // The report exchange waits on peers that may still be running: for two
  // timeouts, so that a device stuck in a collective, which gives up after
  // one, ends the job naming itself before a peer could name it instead.
  // The MPI communicator keeps a request that timed out posted, and one that
  // failed answers its error again at once: a second Wait adds a timeout
  // only where the peer is still running.
  Expected<Bytes> WaitForPeer(RequestId id) {
    Expected<Bytes> first = comm_->Wait(id);
    if (first.ok()) return first;
    return comm_->Wait(id);
  }

  std::unique_ptr<Communicator> comm_;
  uint64_t reports_ = 0;
};

}  // namespace

Expected<std::unique_ptr<Launch>> Launch::Create(Backend backend, int64_t devices,
                                                 std::chrono::milliseconds timeout) {
  if (backend == Backend::kThreads) return std::unique_ptr<Launch>(new ThreadsLaunch());
  MpiOptions options;
  options.timeout = timeout;
  // How often the communication thread polls MPI: a trade between transfer
  // progress and the CPU taken from the device's compute (bench/overlap).
  if (const char* poll = std::getenv("LOOM_MPI_POLL_US")) {
    options.poll_interval = std::chrono::microseconds(std::max(1, std::atoi(poll)));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateMpiCommunicator(options));
  if (comm->size() != devices) {
    Error error{fmt::format("--devices {} but mpirun started {} processes", devices, comm->size())};
    comm->Abort(error);
  }
  return std::unique_ptr<Launch>(std::make_unique<MpiLaunch>(std::move(comm)));
}

}  // namespace loom::exec
