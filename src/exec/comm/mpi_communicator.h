// The MPI backend: one process per device under `mpirun`, the way to run
// across machines. Open MPI makes no progress on a non-blocking transfer
// while the application computes outside MPI calls, so every MPI call is
// made by one communication thread per process: it posts the transfers the
// device asks for and polls them to completion (sleeping `poll_interval`
// between polls rather than spinning, so that it does not steal the core
// the device computes on). The device thread only queues requests and waits.
//
// A device that fails calls Abort, which prints nothing itself and ends the
// whole job with MPI_Abort, so no rank is left waiting for it.
#pragma once

#include <chrono>
#include <memory>

#include "exec/comm/communicator.h"

namespace loom::exec {

struct MpiOptions {
  // How long Wait may block before the run is declared hung.
  std::chrono::milliseconds timeout{60000};
  // How long the communication thread sleeps when no transfer completed.
  std::chrono::microseconds poll_interval{20};
};

// Initialises MPI (once per process) and starts the communication thread.
Expected<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiOptions& options);

// The rank and size MPI would give this process, read from the launcher's
// environment without initialising MPI (-1 when not under mpirun).
int64_t MpiWorldRankFromEnvironment();

}  // namespace loom::exec
