// What the replay (event_engine.h) counts as it goes: per op kind, the ops
// run, the compute they took, the time devices were blocked on them and the
// time they were in flight; the dots' FLOPs; and the engine's own work.
// Kept apart from the engine so that the engine's code is only about when
// things happen.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/report.h"

namespace loom::sim {

class StepStatistics {
 public:
  explicit StepStatistics(size_t op_kinds)
      : count_(op_kinds, 0),
        compute_(op_kinds, 0),
        exposed_(op_kinds, 0),
        communication_(op_kinds, 0) {}

  void Ran(int32_t kind, int64_t count = 1) { count_[Index(kind)] += count; }
  void Computed(int32_t kind, double seconds) { compute_[Index(kind)] += seconds; }
  void Blocked(int32_t kind, double seconds) { exposed_[Index(kind)] += seconds; }
  void InFlight(int32_t kind, double seconds) { communication_[Index(kind)] += seconds; }
  // A dot's FLOPs and the seconds they would take at the peak FLOP/s.
  void Dots(double flops, double ideal_seconds) {
    flops_ += flops;
    ideal_ += ideal_seconds;
  }

  void Event() { ++events_; }
  void Flow() { ++flows_; }
  void Collective() { ++collectives_; }
  void ConcurrentFlows(int64_t flows) { max_concurrent_ = std::max(max_concurrent_, flows); }

  // Fills the report's op kinds, MFU and simulation counts, for a step of
  // `step_seconds` on `devices` devices, each device counted standing for
  // `multiplicity` (the devices of its class, when one device of each
  // class was replayed).
  void Fill(const std::vector<std::string>& op_kind_names, int64_t devices, int64_t multiplicity,
            double step_seconds, SimReport* report) const {
    const auto n = static_cast<double>(devices);
    const auto times = static_cast<double>(multiplicity);
    report->dot_flops = flops_ * times;
    report->mfu = step_seconds > 0 ? ideal_ * times / (step_seconds * n) : 0;
    for (size_t k = 0; k < op_kind_names.size(); ++k) {
      OpKindReport kind;
      kind.count = count_[k] * multiplicity;
      kind.compute_seconds = compute_[k] * times;
      kind.exposed_seconds = exposed_[k] * times;
      kind.communication_seconds = communication_[k] * times;
      report->op_kinds[op_kind_names[k]] = kind;
      report->seconds_by_op_kind[op_kind_names[k]] =
          (kind.compute_seconds + kind.exposed_seconds) / n;
    }
    report->events = events_;
    report->flows = flows_;
    report->collectives = collectives_;
    report->max_concurrent_flows = max_concurrent_;
  }

 private:
  static size_t Index(int32_t kind) { return static_cast<size_t>(kind); }

  std::vector<int64_t> count_;
  std::vector<double> compute_;
  std::vector<double> exposed_;
  std::vector<double> communication_;
  double flops_ = 0;
  double ideal_ = 0;
  int64_t events_ = 0;
  int64_t flows_ = 0;
  int64_t collectives_ = 0;
  int64_t max_concurrent_ = 0;
};

}  // namespace loom::sim
