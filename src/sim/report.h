// What a simulation found (simulator.h), and its two forms: JSON for tools
// and a table for people.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom::sim {

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
  // The translations that made devices one class (sim/symmetry.h), and the
  // devices replayed: one per class (device_count when none).
  std::string symmetry;
  int64_t simulated_devices = 0;
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

// The report as JSON (everything but the trace).
std::string ReportJson(const SimReport& report);
// A readable summary: step time, device times (all devices up to 16, else
// the spread and the slowest), op kinds, and the simulation's own cost.
// The mean of one DeviceReport field over the report's devices (0 for none).
double MeanOverDevices(const SimReport& report, double DeviceReport::*field);

std::string ReportTable(const SimReport& report);

}  // namespace loom::sim
