// A run's timeline: per device, what computed and what communicated when,
// written as Chrome trace-event JSON (`{"traceEvents":[...]}`, complete
// events `ph:"X"` with `ts`/`dur` in microseconds) that Perfetto and
// chrome://tracing open. Compute and communication go on separate tracks
// (tids) of each device's process (pid), since Perfetto rejects overlapping
// events on one track.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/status.h"

namespace loom::exec {

enum class Track { kCompute = 0, kCommunication = 1 };

struct TraceEvent {
  std::string name;      // the instruction
  std::string category;  // its opcode
  int64_t device = 0;
  Track track = Track::kCompute;
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
  void Add(std::string name, std::string category, Track track, double start_us, double end_us) {
    events_.push_back(
        {std::move(name), std::move(category), device_, track, start_us, end_us - start_us});
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
