// Runs a per-device (SPMD) program on N devices: inputs drawn from a seed or
// read from .npy files, one interpreter per device, the devices joined by a
// communicator. In-process, each device is a thread; under MPI this process
// is one device (RunDevice) and mpirun starts the others.
//
// A device that fails aborts the run: every other device stops at its next
// wait (or when the timeout passes) and the error names the failing device.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "exec/comm/communicator.h"
#include "exec/tensor.h"
#include "exec/trace.h"
#include "ir/collective_groups.h"
#include "ir/module.h"

namespace loom::exec {

struct RunOptions {
  uint64_t seed = 0;
  // When set, parameter I of device D is read from DIR/device<D>/param<I>.npy,
  // or from DIR/param<I>.npy when every device takes the same value.
  std::string inputs_dir;
  // OpenBLAS threads per device (0: one per device when several share the
  // machine, as many as OpenBLAS likes for a single device). On the threads
  // backend the devices share one OpenBLAS pool of this size.
  int compute_threads = 0;
  // Dots with the deterministic kernel: a fixed summation order per element,
  // so results are bitwise reproducible on any CPU.
  bool deterministic = false;
  // The longest any device waits for a peer before the run is declared hung,
  // and the longest any one while loop may run.
  std::chrono::milliseconds timeout{60000};
  // At most this many instructions per device and run (0: no bound).
  int64_t max_steps = 0;
  bool trace = false;
  // The MPI backend's own collectives (MPI_Iallgather, and MPI_Iallreduce /
  // MPI_Ireduce_scatter_block for f32/f64 sums) instead of Loom's rings.
  // MPI's sums have an order of their own: results are then no longer
  // bitwise equal to the threads backend's.
  bool native_collectives = false;
  // Runs of the entry computation: with more than 1, one warm-up run first,
  // and each device reports the median of the timed runs.
  int repeat = 1;
  // The file the module came from, to name it in errors.
  std::string source;
};

struct DeviceResult {
  int64_t device = 0;
  Tensor output;
  double seconds = 0;  // wall time of the entry computation (median of the repeats)
  std::vector<TraceEvent> trace;
};

// The device grid a module runs on with `devices` devices: the header's
// counts when it gives them (which must multiply to `devices`), else the
// verifier's inferred replica count with the partitions filling the rest.
Expected<ir::DeviceGrid> GridFor(const ir::Module& module, int64_t devices);

// The entry parameters of `device`: read from options.inputs_dir, or drawn
// from options.seed. The same seed gives the same inputs to two programs
// whose entry parameters have the same shapes.
Expected<std::vector<Tensor>> DeviceInputs(const ir::Module& module, int64_t device,
                                           const RunOptions& options);

// An upper bound of the bytes one device holds while it runs `module`: the
// sum of every instruction's result size (the executor frees buffers after
// their last use, so it usually holds much less). Saturates at INT64_MAX.
int64_t DeviceMemoryBound(const ir::Module& module);

// How much memory a run may take, and which limit says so.
struct MemoryBudget {
  int64_t bytes = 0;
  std::string what;
};
// The least of half the physical memory and what the address-space and
// data-size limits leave this process.
MemoryBudget MemoryThisProcessMayUse();

// Fails with a clear message, before anything is allocated, when `devices`
// devices of `module` could not fit in `budget` (none given: the
// MemoryThisProcessMayUse() of this process).
Status CheckMemory(const ir::Module& module, int64_t devices, MemoryBudget budget = {});

// Runs the entry computation as device comm.rank() of `grid`.
Expected<DeviceResult> RunDevice(const ir::Module& module, const ir::DeviceGrid& grid,
                                 Communicator& comm, const RunOptions& options,
                                 TraceRecorder::Clock::time_point origin);

// Runs every device of `grid` in this process, one thread each. On failure,
// the error of the device that failed first.
Expected<std::vector<DeviceResult>> RunOnThreads(const ir::Module& module,
                                                 const ir::DeviceGrid& grid,
                                                 const RunOptions& options);

// The leaves of a (possibly tuple) output in depth-first order.
std::vector<const Tensor*> OutputLeaves(const Tensor& output);

}  // namespace loom::exec
