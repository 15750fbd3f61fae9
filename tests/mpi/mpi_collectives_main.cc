// The collective checks of tests/exec/collective_checks.h on the MPI
// backend, and MPI's own collectives (--collectives native): run as
// `mpirun -np N loom_mpi_tests`. Every rank checks its own
// results; rank 0 prints the totals as "P passed, F failed".
#include <cstdio>
#include <cstring>

#include "exec/collective_checks.h"
#include "exec/comm/mpi_communicator.h"

int main() {
  using namespace loom::exec;
  MpiOptions options;
  options.timeout = std::chrono::milliseconds(30000);
  auto comm = CreateMpiCommunicator(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.error().ToString().c_str());
    return 1;
  }
  int checks = 0;
  std::vector<std::string> failures = testing::RunCollectiveChecks(**comm, &checks);
  for (std::string& failure : testing::RunNativeCollectiveChecks(**comm, &checks)) {
    failures.push_back(std::move(failure));
  }
  for (const std::string& failure : failures) std::fprintf(stderr, "FAILED %s\n", failure.c_str());
  // Totals over ranks: each rank sends its counts to rank 0.
  const int64_t rank = (*comm)->rank();
  int32_t mine[2] = {checks - static_cast<int>(failures.size()), static_cast<int>(failures.size())};
  Bytes bytes(sizeof(mine));
  std::memcpy(bytes.data(), mine, sizeof(mine));
  int32_t total[2] = {mine[0], mine[1]};
  constexpr uint64_t kTotalsTag = 1000000;
  if (rank != 0) {
    auto send = (*comm)->StartSend(0, kTotalsTag, bytes);
    if (!send.ok() || !(*comm)->Wait(*send).ok()) return 1;
  } else {
    for (int64_t peer = 1; peer < (*comm)->size(); ++peer) {
      auto recv = (*comm)->StartRecv(peer, kTotalsTag, sizeof(mine));
      if (!recv.ok()) return 1;
      auto data = (*comm)->Wait(*recv);
      if (!data.ok()) return 1;
      int32_t theirs[2];
      std::memcpy(theirs, data->data(), sizeof(theirs));
      total[0] += theirs[0];
      total[1] += theirs[1];
    }
    std::printf("%d passed, %d failed\n", total[0], total[1]);
  }
  return failures.empty() && total[1] == 0 ? 0 : 1;
}
