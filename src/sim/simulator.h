// A discrete-event simulator of one SPMD module on every device of a
// target (cost/target.h): each device replays the scheduled per-device
// program (the entry computation in text order), computing on one stream
// and moving data as flows over the links of the topology, which share a
// link's bandwidth max-min fairly (network.h) while they cross it at the
// same time. Contention between concurrent collectives (two mesh axes, data
// and tensor parallel traffic), stragglers and slow links come out of the
// replay rather than being written in.
//
// What a device does with each instruction:
//   - a compute op occupies its compute stream for the cost model's
//     ComputeSeconds times the device's compute scale; parameters,
//     constants, tuples and other aliasing ops are free;
//   - a synchronous collective blocks it until its part of the collective
//     is done: every message it sends has been sent and every message it
//     receives has arrived;
//   - a -start (all-gather-start, all-reduce-start,
//     collective-permute-start, or an async-start wrapping a collective)
//     joins the collective and goes on; the matching -done blocks until the
//     device's part is done;
//   - native collectives run the point-to-point algorithms of plan.h (the
//     ones cost/target_cost_model.h prices); collective-permute is one flow
//     per (source, target) pair, the sender's done waiting for its send and
//     the receiver's for its receive;
//   - a message starts once both its devices have reached the collective
//     and what it forwards has arrived; it takes its route's latency (hops
//     x link latency), then moves its bytes at its fair share of every
//     link it crosses, recomputed whenever a flow starts or ends;
//   - a while runs its condition and body KnownTripCount times, then the
//     condition once more (unknown: once, listed in the report); a call
//     runs its callee; a conditional runs its slowest branch by the cost
//     model (cost::Timeline), the same one on every device; a fusion is one
//     op.
// Device id d of the module (replica r, partition p: d = r x partitions +
// p) runs on target device d.
//
// Time per device: compute (its stream busy), exposed communication (its
// stream blocked in a collective or a -done, including waiting for a late
// peer) and idle (after it finished, until the step ends). The three add up
// to the step time.
//
// Cost: a device runs ahead through compute ops without events, stopping
// only at transfers; a while loop that makes no transfer is one stretch of
// compute however many trips it has; flows cost two events each (start of
// motion, finish) plus one rate recomputation per instant, of the affected
// component only. A loop with transfers is replayed trip by trip.
// Devices that the network and every collective cannot tell apart (a class
// of symmetric devices, symmetry.h) are replayed once: one device of each
// class, each of its flows weighted by the flows of its class on each link
// it crosses. The step, every device's times and the op kinds are those of
// the replay of every device (to rounding); a trace shows the
// representatives; a straggler or a slowed link replays every device
// (SimOptions::exploit_symmetry).
//
// The parts: tape.h flattens the program and prices its compute;
// symmetry.h finds the classes of devices; plan.h turns each collective
// into messages (between classes); event_engine.h replays the tape on
// every device over network.h's links; statistics.h counts what happened;
// report.h is what comes out; trace/chrome_trace.h writes the timeline.
#pragma once

#include "cost/target.h"
#include "ir/module.h"
#include "sim/options.h"
#include "sim/report.h"
#include "support/status.h"

namespace loom::sim {

// Fails when the module does not verify, needs more devices than the
// target has, names a bad link or scale, or deadlocks (a device waits on a
// collective some peer never reaches).
Expected<SimReport> Simulate(const ir::Module& module, const cost::Target& target,
                             const SimOptions& options = {});

}  // namespace loom::sim
