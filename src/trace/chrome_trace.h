// The one writer of timelines, for the executor (what really ran) and the
// simulator (what would run): Chrome trace-event JSON
// (`{"traceEvents":[...]}`), which Perfetto and chrome://tracing open.
//
// Each device is a process (pid = device id, named "device N"). Its compute
// is one track (tid 0): slices there never partly overlap, though a while
// loop's slice may contain those of its body. Its transfers overlap each
// other (several collectives in flight), and Perfetto rejects partial
// overlaps on one track, so the writer packs them onto as many tracks
// ("transfers 1", "transfers 2", ...) as the most that are in flight at
// once: each slice, in order of start, takes the lowest track free at its
// start.
//
// Counter samples (link occupancy in the simulator's trace) become counter
// tracks of their device's process, one per track name.
//
// Times are whole picoseconds, printed as exact decimal microseconds, so a
// slice that starts where another ends never appears to overlap it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::trace {

enum class Lane : uint8_t { kCompute, kTransfers };

// The strings are views: they must outlive the call that writes them.
struct Slice {
  int64_t device = 0;
  Lane lane = Lane::kCompute;
  std::string_view name;      // the instruction
  std::string_view category;  // its opcode, or what the slice is ("wait", "transfer")
  std::string_view op;        // written as args.op when not empty
  int64_t start_ps = 0;
  int64_t end_ps = 0;
};

// Seconds (simulated) or microseconds (measured) as whole picoseconds.
int64_t PicosecondsFromSeconds(double seconds);
int64_t PicosecondsFromMicros(double micros);

// One value of a counter track from `time_ps` until its next sample: a
// link's occupancy (the fraction of its bandwidth in use), shown in its
// device's process as a counter event ("ph":"C") named `track`, with the
// value as args.`series`.
struct CounterSample {
  int64_t device = 0;
  std::string_view track;   // "link chip 5 (1,1,0) +x"
  std::string_view series;  // "busy"
  int64_t time_ps = 0;
  double value = 0;
};

struct Timeline {
  // Devices named (with their compute track) even when they have no
  // slices; those with slices are named anyway.
  std::vector<int64_t> devices;
  std::vector<Slice> slices;
  std::vector<CounterSample> counters;
};

std::string ChromeTraceJson(const Timeline& timeline);

}  // namespace loom::trace
