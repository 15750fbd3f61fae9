// The discrete-event replay of a tape (tape.h) on every device of a
// target: the heart of the simulator (simulator.h says what a device does
// with each step).
//
// Three kinds of event, each a type of its own:
//   - ResumeDevice: a device reaches its next transfer after a stretch of
//     compute, or is unblocked, and runs on from there;
//   - MessageStarts: a message's latency has passed (its route's hops x
//     link latency) and its bytes start to move as a flow;
//   - FlowArrives: a flow's last byte arrives, unless its rate changed
//     since the event was queued (the network bumps a flow's version then).
// Between the events of one instant and the next the network recomputes
// the rates of the flows they touched (network.h).
//
// A device runs ahead through compute without events, stopping only at
// transfers; flows cost two events each plus one rate recomputation per
// instant, of the affected component only.
#pragma once

#include <cstdint>

#include "sim/network.h"
#include "sim/options.h"
#include "sim/report.h"
#include "sim/symmetry.h"
#include "sim/tape.h"
#include "support/status.h"

namespace loom::sim {

// Replays `tape` on one device of each class of `symmetry` over `network`
// (every device with Symmetry::None; the tape's plans must be over the same
// classes), and fills the report's step time, device times (every device,
// as its class's), op kinds (summed over every device), simulation counts
// (the replay's own) and (with options.trace) the trace. Fails on a
// deadlock: a device that waits on a collective some peer never reaches.
Status ReplayTape(const Tape& tape, const Network& network, const Symmetry& symmetry,
                  const SimOptions& options, SimReport* report);

}  // namespace loom::sim
