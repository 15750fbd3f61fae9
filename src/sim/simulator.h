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
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost/target.h"
#include "ir/module.h"
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
  // (all devices, loops that transfer replayed trip by trip) is refused up
  // front instead of running for hours; 0: no limit.
  int64_t max_messages = 200'000'000;
};

// "5=1.5": device 5's compute takes 1.5 times as long. Sets
// options->compute_scale[5], growing the vector with 1s.
Status ParseComputeScale(std::string_view spec, SimOptions* options);
// "3-4=0.5": the link(s) between devices 3 and 4, both directions, at half
// bandwidth; "3>4=0.5": only from 3 to 4.
Status ParseLinkScale(std::string_view spec, SimOptions* options);

struct DeviceReport {
  int64_t device = 0;
  double compute = 0;                // seconds its compute stream was busy
  double exposed_communication = 0;  // seconds blocked in collectives and -dones
  double idle = 0;                   // step time after it finished
  double finish = 0;                 // when it ran its last instruction
  double communication = 0;          // seconds its collectives were in flight (join to done)
  double compute_scale = 1;
};

// One op kind (an opcode for compute, a collective kind for transfers),
// summed over every device.
struct OpKindReport {
  int64_t count = 0;                 // ops run, over all devices
  double compute_seconds = 0;        // compute stream busy
  double exposed_seconds = 0;        // compute stream blocked on this kind of transfer
  double communication_seconds = 0;  // transfers in flight (join to done)
};

struct SimReport {
  std::string module;
  std::string target;
  int64_t device_count = 0;
  int64_t replica_count = 1;
  int64_t partition_count = 1;

  double step_seconds = 0;
  // The cost model's estimate of the same program (cost::EstimateStep):
  // one device, no contention, transfers of one kind one after another.
  double cost_model_step_seconds = 0;
  std::vector<DeviceReport> devices;
  // Dot FLOPs of all devices over (step time x devices x the peak FLOP/s
  // for each dot's element type).
  double mfu = 0;
  double dot_flops = 0;  // all devices
  // Per op kind, seconds on an average device's compute stream: compute
  // ops' busy time, and for each collective kind the time the stream was
  // blocked on it.
  std::map<std::string, double> seconds_by_op_kind;
  std::map<std::string, OpKindReport> op_kinds;

  // The simulation itself.
  int64_t events = 0;       // events processed
  int64_t flows = 0;        // point-to-point messages moved
  int64_t collectives = 0;  // collective instances (one per instruction run)
  int64_t max_concurrent_flows = 0;
  int64_t reallocations = 0;  // instants at which rates were recomputed
  // Links recomputed per reallocation: the components the events of one
  // instant touched, all together.
  double mean_component_links = 0;
  double wall_seconds = 0;
  std::string fairness = "max-min fair (progressive filling, per connected component)";

  // Loops counted once because their trip count is unknown; other things a
  // reader should know (the branch a conditional took, ops not modelled).
  std::vector<std::string> unknown_trip_counts;
  std::vector<std::string> notes;
  // One line per collective instruction: how it was expanded.
  std::vector<std::string> collective_plans;

  std::string trace_json;  // when SimOptions::trace
  bool trace_truncated = false;
};

// Fails when the module does not verify, needs more devices than the
// target has, names a bad link or scale, or deadlocks (a device waits on a
// collective some peer never reaches).
Expected<SimReport> Simulate(const ir::Module& module, const cost::Target& target,
                             const SimOptions& options = {});

// The report as JSON (everything but the trace).
std::string ReportJson(const SimReport& report);
// A readable summary: step time, device times (all devices up to 16, else
// the spread and the slowest), op kinds, and the simulation's own cost.
std::string ReportTable(const SimReport& report);

}  // namespace loom::sim
