// A run's timeline: per device, what computed and what communicated when,
// recorded as the run goes and written by the one timeline writer
// (trace/chrome_trace.h), which the simulator's traces share.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/status.h"
#include "trace/chrome_trace.h"

namespace loom::exec {

struct TraceEvent {
  std::string name;      // the instruction
  std::string category;  // its opcode
  int64_t device = 0;
  trace::Lane lane = trace::Lane::kCompute;
  double start_us = 0;
  double duration_us = 0;
};

// Collects one device's events, timed from a clock origin shared by every
// device of the run (in one process) or by the process (under MPI).
class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  TraceRecorder(int64_t device, Clock::time_point origin) : device_(device), origin_(origin) {}

  double NowUs() const {
    return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
  }
  void Add(std::string name, std::string category, trace::Lane lane, double start_us,
           double end_us) {
    events_.push_back(
        {std::move(name), std::move(category), device_, lane, start_us, end_us - start_us});
  }
  std::vector<TraceEvent>& events() { return events_; }

 private:
  int64_t device_;
  Clock::time_point origin_;
  std::vector<TraceEvent> events_;
};

// Events to and from JSON text, to carry them between processes.
std::string TraceEventsToJson(const std::vector<TraceEvent>& events);
Expected<std::vector<TraceEvent>> TraceEventsFromJson(const std::string& text);

// Writes every device's events; the file appears only when complete.
Status WriteChromeTrace(const std::string& path, const std::vector<TraceEvent>& events);

}  // namespace loom::exec
