// The transfers in flight on one device while the step estimate replays it
// (cost/step_time.h), and what they share: the device's ports.
//
// A transfer runs its segments (CostModel::TransferSegmentsByDevice) one
// after another from its begin. While a segment runs, each port it uses is
// shared equally among the flows of every segment running on it (a segment
// of f flows, TransferSegment::flows, holds f shares), and it advances at
// f over the most flows on any of its ports: alone, at full speed (its time
// already pays for its own f); beside a one-flow transfer on a port of
// f = 4, at 4/5. That is the rate of a flow at its busiest port, which
// max-min sharing gives at least. A segment with no ports runs at full
// speed. So an all-reduce's ring across nodes slows a ring of
// collective-permutes inside the node only while it runs over NVLink, and
// two rings of one torus dimension share its links while rings of
// different dimensions do not.
//
// Ends are projections from what has been launched so far: a transfer
// launched later begins at or after the moment it is launched, so it can
// only delay what is still running then. For example, two transfers of 2 us
// on the same port, the second launched 1 us after the first:
//
//   first   0..1 us alone, 1..3 us at half speed: ends at 3 us
//   second  1..3 us at half speed, 3..4 us alone:  ends at 4 us
//
// (each ends 1 us later than it would alone; the port moved 4 us of work in
// 4 us).
#pragma once

#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cost/cost_model.h"

namespace loom::cost {

class TransferFlights {
 public:
  using Id = int64_t;
  static constexpr int kKinds = 6;  // cost::kTransferKindCount

  // Launches a transfer of `kind` over `links` (CostModel::TransferLinks)
  // at `now`, to begin at `begin` (no earlier than `now`, nor than any
  // launch before it), running `segments`.
  Id Launch(double now, double begin, int kind, std::vector<int64_t> links,
            std::vector<TransferSegment> segments);
  // The projected end of a launched transfer not yet released.
  double End(Id id) const;
  // Nobody will ask for its end again: once it has finished it is dropped.
  void Release(Id id);
  // The latest projected end among transfers of `kind` whose links are not
  // disjoint from `links` (cost::LinksDisjoint), or `now` when none is later.
  double LatestEndOfKind(int kind, const std::vector<int64_t>& links, double now) const;
  // Per kind, how long after `now` its last transfer ends (0 when none).
  std::array<double, kKinds> Backlog(double now) const;
  // Moves everything still in flight at `now` `seconds` later (a while
  // loop's skipped iterations, cost/step_time.h).
  void Delay(double now, double seconds);

 private:
  // Where a transfer is: what a projection copies and runs forward.
  struct Progress {
    size_t segment = 0;  // the running one; segments.size(): finished
    double left = 0;     // seconds of the running segment still to run alone
    double end = 0;      // when it finishes (so far, or projected)
  };
  struct Flight {
    Id id = 0;
    int kind = 0;
    double begin = 0;
    std::vector<int64_t> links;
    std::vector<TransferSegment> segments;
    Progress now;    // at clock_
    double end = 0;  // projected
    bool released = false;
  };
  // Runs `progress` (one per flight) from `clock` to `until`, setting the
  // end of each that finishes by then.
  static void Advance(const std::vector<Flight>& flights, std::vector<Progress>& progress,
                      double& clock, double until);
  std::vector<Progress> ProgressNow() const;
  // Moves the state to `now`, keeping the ends of finished transfers that
  // are still asked for.
  void Commit(double now);
  // Projects every end from the state at clock_.
  void Project();

  double clock_ = 0;
  std::vector<Flight> flights_;              // launched, not finished at clock_
  std::unordered_map<Id, double> finished_;  // finished at clock_, not released
  Id next_id_ = 0;
};

}  // namespace loom::cost
