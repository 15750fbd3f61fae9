// What a simulation is asked to do beyond the module and the target:
// stragglers, slow links, a trace, and the bound on its own cost; with the
// parsers of the CLI's spellings of them.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "sim/network.h"
#include "support/status.h"

namespace loom::sim {

struct SimOptions {
  // Per device multiplier of compute time (1.5: a straggler 50% slower).
  // Devices beyond the end of the vector run at 1.
  std::vector<double> compute_scale;
  // Per link bandwidth multiplier (0.5: a link at half speed), keyed by
  // (from device, to device); see LinkScales in network.h for what a pair
  // names on each topology. ParseLinkScale reads the CLI's form.
  LinkScales link_scale;
  // Write a Chrome trace-event timeline into SimReport::trace_json.
  bool trace = false;
  // Only the first trace_devices devices appear in the trace, and at most
  // max_trace_events events (the report says when it was cut short).
  int64_t trace_devices = 64;
  int64_t max_trace_events = 2'000'000;
  // A simulation that would move more point-to-point messages than this
  // (the replay's: one device per class of symmetric devices, loops that
  // transfer replayed trip by trip) is refused up front instead of running
  // for hours; 0: no limit. A refused one plans nothing (the tape is first
  // compiled with its plans only counted); 10^8 keeps an accepted one under
  // a minute or so (Llama 3 405B on 16128 GPUs: 7.5e7 messages, 30 s).
  int64_t max_messages = 100'000'000;
  // The same for the steps of the program walked, summed over devices (a
  // loop whose collectives move nothing walks its steps every trip).
  int64_t max_steps = 1'000'000'000;
  // Replay one device of each class of symmetric devices (sim/symmetry.h)
  // rather than every device: the same step, device times and op kinds
  // (to rounding), at a fraction of the cost; a trace then shows the
  // representatives of the first trace_devices classes. Off, or with
  // compute scales or link scales, every device is replayed. Both counts
  // above are of the replay made (messages of one device per class).
  bool exploit_symmetry = true;
};

// "5=1.5": device 5's compute takes 1.5 times as long. Sets
// options->compute_scale[5], growing the vector with 1s.
Status ParseComputeScale(std::string_view spec, SimOptions* options);
// "3-4=0.5": the link(s) between devices 3 and 4, both directions, at half
// bandwidth; "3>4=0.5": only from 3 to 4.
Status ParseLinkScale(std::string_view spec, SimOptions* options);

}  // namespace loom::sim
