// Launching a run on a backend: in-process threads (every device here) or
// MPI (this process is one device; mpirun starts the rest). The CLI's run
// and compare commands go through this one interface, so both behave the
// same on both backends.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "exec/runner.h"

namespace loom::exec {

enum class Backend { kThreads, kMpi };

class Launch {
 public:
  virtual ~Launch() = default;

  // Threads: the in-process backend for `devices` devices. MPI: initialises
  // MPI; the world size must equal `devices`.
  static Expected<std::unique_ptr<Launch>> Create(Backend backend, int64_t devices,
                                                  std::chrono::milliseconds timeout);

  // Runs `module` on every device and returns the results this process holds:
  // every device's with threads, its own under MPI. A failure under MPI ends
  // the whole job (after printing the error) and does not return.
  virtual Expected<std::vector<DeviceResult>> Run(const ir::Module& module,
                                                  const ir::DeviceGrid& grid,
                                                  const RunOptions& options) = 0;

  // Collects one text per device at the root process, in device order
  // (empty elsewhere). `mine` holds one text per device this process ran.
  virtual Expected<std::vector<std::string>> GatherAtRoot(std::vector<std::string> mine) = 0;

  // Whether this process prints the run's report.
  virtual bool is_root() const = 0;

  // Returns once the root has everything (after GatherAtRoot): from then on
  // every device finished, so outputs may be published as complete.
  virtual Status AwaitRoot() = 0;

  // A failure of this process after Run and before AwaitRoot returned
  // (writing outputs, the report exchange), while its peers may wait for
  // it: under MPI, prints `error` and ends the whole job at once
  // (MPI_Abort), and does not return; with threads, returns (the caller
  // reports the error as usual).
  virtual void Fail(const Error& error) = 0;
};

}  // namespace loom::exec
