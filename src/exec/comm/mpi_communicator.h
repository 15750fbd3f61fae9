// The MPI backend: one process per device under `mpirun`, the way to run
// across machines. Open MPI makes no progress on a non-blocking transfer
// while the application computes outside MPI calls, so every MPI call is
// made by one communication thread per process: it posts the transfers the
// device asks for and polls them to completion, sleeping between polls
// rather than spinning so that it does not steal the core the device
// computes on. The device thread only queues requests and waits.
//
// A device that fails calls Abort, which prints its error and ends the
// whole job with MPI_Abort, so no rank is left waiting for it.
#pragma once

#include <chrono>
#include <memory>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct MpiOptions {
  // How long Wait may block before the run is declared hung.
  std::chrono::milliseconds timeout{60000};
  // The longest the communication thread sleeps between polls of MPI when
  // nothing completes (it starts at a few microseconds and backs off).
  // Measured with bench/overlap: 20 us took enough CPU from a concurrent
  // dot to cost 14% of overlap; 200 us, about 6%.
  std::chrono::microseconds poll_interval{200};
};

// Initialises MPI (once per process) and starts the communication thread.
Expected<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options);

// The rank and size MPI would give this process, read from the launcher's
// environment without initialising MPI (-1 when not under mpirun).
int64_t MpiWorldRankFromEnvironment();

}  // namespace loom::exec
