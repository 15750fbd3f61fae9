// A hardware target: what one device computes, and how devices are joined.
//
// Three kinds of topology cover the machines Loom models:
//   torus     TPU slices: a 3D torus of chips, each with a link per
//             direction to its neighbours; a dimension wraps around only
//             where the slice is a whole cube edge (optical switches).
//   switched  GPU clusters: nodes of devices joined all-to-all by NVSwitch,
//             nodes joined by an InfiniBand fat tree (full bisection, one
//             NIC per device).
//   bus       the bandwidth-shaped loopback testbed (BRIEF section 5): every
//             transfer shares one medium.
//
// Device id d of a module runs on target device d. On a torus, device ids
// are laid out with the first dimension fastest (x, then y, then z), as
// TPU device assignments number the chips of a slice, unless the target
// gives its own order.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "ir/shape.h"
#include "support/status.h"

namespace loom::cost {

struct Link {
  double bytes_per_second = 0;  // per direction
  double latency_seconds = 0;   // per hop
};

// How a device's matrix units cut a product into work (tile and wave
// quantization, as NVIDIA's "Matrix Multiplication Background" guide
// describes GEMMs on its GPUs): the [m, n] result of each of a dot's batch
// of products in tiles of tile_m x tile_n (either way round, whichever
// takes fewer waves), each tile contracting k in steps of tile_k, and
// `units` tiles at a time (one per SM) until all are done. Every wave
// takes as long as a full one: a product runs at the peak only when its
// sizes fill whole tiles and its tiles whole waves. Absent (units 0), a
// product of any shape runs at the peak.
struct MatrixTiling {
  int64_t units = 0;
  int64_t tile_m = 0;
  int64_t tile_n = 0;
  int64_t tile_k = 0;

  bool present() const { return units > 0; }
  // The FLOPs the device spends on `batch` products of [m, k] x [k, n]:
  // 2 m n k each, padded to whole tiles and whole waves.
  double SpentFlops(int64_t batch, int64_t m, int64_t n, int64_t k) const;
};

struct ComputeSpec {
  // Dense peak FLOP/s by element type name: "bf16" (also used for f16),
  // "f32", "f64", "f8", "s8". A type without an entry uses f32's.
  std::map<std::string, double> peak_flops;
  double memory_bytes_per_second = 0;
  double memory_bytes = 0;    // capacity
  double launch_seconds = 0;  // fixed cost of every op
  // Whether the target's compiler fuses chains of elementwise ops into one
  // kernel (analysis/fusion.h): XLA on TPUs and GPUs does; Loom's executor
  // does not.
  bool fuses_elementwise = false;
  MatrixTiling tiling;
  // The fraction of the dense peak that products sustain where they fill
  // whole waves of whole tiles: the best measured rate of large,
  // well-shaped products over the datasheet's (the "maximum achievable
  // matmul FLOPS" that the MAMF finder of Bekman's ml-engineering measures).
  // It is below 1 because the datasheet counts every matrix unit busy at
  // the boost clock, which a chip cannot hold at its power limit, and
  // because loading the operands and writing the result take cycles of
  // their own. 1 means products run at the datasheet peak. MFU is still
  // measured against the datasheet peak, as published runs report it.
  double matrix_efficiency = 1;

  double PeakFlops(ir::PrimitiveType type) const;
  // What products of `type` run at: the peak times matrix_efficiency.
  double MatrixFlops(ir::PrimitiveType type) const { return PeakFlops(type) * matrix_efficiency; }
};

struct TorusTopology {
  std::vector<int64_t> dims;     // chips per dimension
  std::vector<bool> wraparound;  // per dimension
  Link link;
  // device_order[i]: the device id of the chip at linear position i (first
  // dimension fastest). Empty: the identity.
  std::vector<int64_t> device_order;
};

struct SwitchedTopology {
  int64_t devices_per_node = 8;
  int64_t nodes = 1;
  Link intra_node;  // NVLink through NVSwitch, per device
  Link inter_node;  // InfiniBand, per device (its own NIC)
};

struct BusTopology {
  Link bus;  // shared by every transfer
};

using Topology = std::variant<TorusTopology, SwitchedTopology, BusTopology>;

class Target {
 public:
  Target(std::string name, std::string description, ComputeSpec compute, Topology topology);

  const std::string& name() const { return name_; }
  const std::string& description() const { return description_; }
  const ComputeSpec& compute() const { return compute_; }
  const Topology& topology() const { return topology_; }
  int64_t device_count() const { return device_count_; }
  std::string_view kind() const;

  // Torus: the coordinates of `device`; switched: {node, index in node};
  // bus: {device}.
  std::vector<int64_t> Coordinates(int64_t device) const;
  // Torus only: the chip's linear position (x fastest), the coordinates'
  // mixed-radix number; what Coordinates decodes.
  int64_t TorusPosition(int64_t device) const;
  // The device at torus coordinates `coords`.
  int64_t DeviceAt(const std::vector<int64_t>& coords) const;

 private:
  std::string name_;
  std::string description_;
  ComputeSpec compute_;
  Topology topology_;
  int64_t device_count_ = 0;
  std::vector<int64_t> position_of_device_;  // torus: inverse of device_order
};

// The built-in targets, in the order `loom targets` lists them.
const std::vector<Target>& BuiltinTargets();

// A target by its spec: a built-in name ("tpu-v4-4x4x4", "dgx-h100-x4"); a
// family at any size ("tpu-v4:4x4x8" chips, "dgx-h100:16" nodes of 8 GPUs,
// likewise dgx-a100 and dgx-h200, or the catalog's spelling "tpu-v4-4x4x8",
// "dgx-h100-x16"); a family with ":auto" ("tpu-v4:auto", "dgx-h100:auto";
// "tpu-v4" alone too, which names no built-in), sized to `devices` (the module's device count: the
// most cubic TPU v4 slice whose long sides wrap around, or as many DGX nodes as needed); or a JSON
// file (a path ending in .json).
Expected<Target> FindTarget(const std::string& spec, int64_t devices = 0);

// Reads one target from JSON text (see targets/*.json in the repository for
// the format); errors name the field.
Expected<Target> ParseTargetJson(const std::string& text, const std::string& source);

// The target as JSON, in the format ParseTargetJson reads.
std::string TargetToJson(const Target& target);

}  // namespace loom::cost
