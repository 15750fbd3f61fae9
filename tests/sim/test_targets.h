// Targets with round numbers for the simulator's tests: compute at 1 TFLOP/s
// in f32 (4 in bf16), torus links of 1 GB/s and 1 us per hop, a switch of
// 10 GB/s and 1 us inside a node and 1 GB/s and 10 us across, a bus of
// 100 MB/s and 100 us.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cost/target.h"

namespace loom::test {

inline constexpr double kAlpha = 1e-6;  // per torus hop
inline constexpr double kBw = 1e9;      // bytes per second per torus link and direction

inline cost::ComputeSpec SimpleCompute() {
  cost::ComputeSpec spec;
  spec.peak_flops = {{"f32", 1e12}, {"bf16", 4e12}};
  spec.memory_bytes_per_second = 1e12;
  spec.memory_bytes = 1e9;
  spec.launch_seconds = 1e-6;
  return spec;
}

inline cost::Target Torus(std::vector<int64_t> dims, std::vector<bool> wrap) {
  cost::TorusTopology torus;
  torus.dims = std::move(dims);
  torus.wraparound = std::move(wrap);
  torus.link = {kBw, kAlpha};
  return cost::Target("torus", "", SimpleCompute(), torus);
}

inline cost::Target Switched(int64_t devices_per_node, int64_t nodes) {
  cost::SwitchedTopology switched;
  switched.devices_per_node = devices_per_node;
  switched.nodes = nodes;
  switched.intra_node = {1e10, 1e-6};
  switched.inter_node = {1e9, 1e-5};
  return cost::Target("switched", "", SimpleCompute(), switched);
}

inline cost::Target Bus() {
  cost::BusTopology bus;
  bus.bus = {1e8, 1e-4};
  return cost::Target("bus", "", SimpleCompute(), bus);
}

}  // namespace loom::test
