#include "cost/target_cost_model.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <tuple>

#include "analysis/flops.h"
#include "ir/computation.h"

namespace loom::cost {

namespace {

using ir::Opcode;

// Ops that only name, alias or reinterpret values, or whose work is costed
// elsewhere (collectives by TransferSeconds, loop and call bodies op by op).
bool IsFree(Opcode opcode) {
  switch (opcode) {
    case Opcode::kParameter:
    case Opcode::kConstant:
    case Opcode::kGetTupleElement:
    case Opcode::kTuple:
    case Opcode::kBitcast:
    case Opcode::kReshape:  // a layout-preserving reshape is a bitcast in XLA
    case Opcode::kPartitionId:
    case Opcode::kReplicaId:
    case Opcode::kAfterAll:
    case Opcode::kAddDependency:
    case Opcode::kOptimizationBarrier:
    case Opcode::kWhile:
    case Opcode::kCall:
    case Opcode::kConditional:
      return true;
    default:
      return ir::IsCollective(opcode) || ir::IsAsyncStart(opcode) || ir::IsAsyncDone(opcode) ||
             opcode == Opcode::kAsyncUpdate;
  }
}

}  // namespace

double TargetCostModel::MemorySeconds(double bytes) const {
  return bytes / target_.compute().memory_bytes_per_second;
}

double TargetCostModel::DotSeconds(double flops, double bytes, ir::PrimitiveType type) const {
  const ComputeSpec& compute = target_.compute();
  return std::max(flops / compute.PeakFlops(type), MemorySeconds(bytes)) + compute.launch_seconds;
}

double TargetCostModel::ComputeSeconds(const ir::Instruction& instruction) const {
  const Opcode opcode = instruction.opcode();
  if (IsFree(opcode)) return 0;
  const double result_bytes = static_cast<double>(instruction.shape().ByteSize());
  if (opcode == Opcode::kDot) {
    const auto flops = static_cast<double>(analysis::DotFlops(instruction));
    return DotSeconds(flops, OperandBytes(instruction) + result_bytes,
                      instruction.operand(0)->shape().type());
  }
  double bytes = OperandBytes(instruction) + result_bytes;
  if (opcode == Opcode::kDynamicUpdateSlice) {
    bytes = 2 * static_cast<double>(instruction.operand(1)->shape().ByteSize());  // in place
  } else if (opcode == Opcode::kDynamicSlice || opcode == Opcode::kSlice ||
             opcode == Opcode::kBroadcast || opcode == Opcode::kIota) {
    bytes = 2 * result_bytes;
  }
  return MemorySeconds(bytes) + target_.compute().launch_seconds;
}

double TargetCostModel::TransferSeconds(const ir::Instruction& instruction,
                                        const ir::DeviceGrid& grid) const {
  const ir::Instruction* op = TransferOp(instruction);
  if (op == nullptr) return 0;
  const Opcode opcode = SynchronousOpcode(op->opcode());
  const double bytes = OperandBytes(*op);
  if (opcode == Opcode::kCollectivePermute) {
    auto pairs = ir::GlobalSourceTargetPairs(*op, grid);
    return pairs.ok() ? PermuteSeconds(*pairs, bytes) : 0;
  }
  auto groups = ir::ParticipantGroups(*op, grid);
  if (!groups.ok()) return 0;
  double seconds = 0;
  for (const auto& group : *groups) {
    const auto n = static_cast<double>(group.size());
    switch (opcode) {
      case Opcode::kAllGather:
        seconds = std::max(seconds, AllGatherSeconds(group, bytes * n));
        break;
      case Opcode::kReduceScatter:
      case Opcode::kAllToAll:
        seconds = std::max(seconds, AllGatherSeconds(group, bytes));
        break;
      case Opcode::kAllReduce:
        seconds = std::max(seconds, AllReduceSeconds(group, bytes));
        break;
      default:
        break;
    }
  }
  return seconds;
}

double TargetCostModel::AllReduceSeconds(const std::vector<int64_t>& group, double bytes) const {
  return 2 * AllGatherSeconds(group, bytes);
}

double TargetCostModel::AllGatherSeconds(const std::vector<int64_t>& group, double bytes) const {
  const auto n = static_cast<double>(group.size());
  if (group.size() < 2) return 0;
  if (const auto* torus = std::get_if<TorusTopology>(&target_.topology())) {
    return TorusGatherSeconds(*torus, group, bytes);
  }
  if (const auto* switched = std::get_if<SwitchedTopology>(&target_.topology())) {
    return SwitchedGatherSeconds(*switched, group, bytes);
  }
  const Link& bus = std::get<BusTopology>(target_.topology()).bus;
  return (n - 1) * bus.latency_seconds + (n - 1) * bytes / bus.bytes_per_second;
}

double TargetCostModel::TorusGatherSeconds(const TorusTopology& torus,
                                           const std::vector<int64_t>& group, double bytes) const {
  const auto n = static_cast<double>(group.size());
  const size_t rank = torus.dims.size();
  std::vector<std::set<int64_t>> spans(rank);
  for (int64_t device : group) {
    const auto coords = target_.Coordinates(device);
    for (size_t d = 0; d < rank; ++d) spans[d].insert(coords[d]);
  }
  double box = 1;
  bool contiguous = true;
  for (size_t d = 0; d < rank; ++d) {
    box *= static_cast<double>(spans[d].size());
    contiguous &=
        *spans[d].rbegin() - *spans[d].begin() + 1 == static_cast<int64_t>(spans[d].size());
  }
  const Link& link = torus.link;
  if (box == n && contiguous) {
    // One ring phase per dimension the group spans.
    double seconds = 0;
    double gathered = 1;
    for (size_t d = 0; d < rank; ++d) {
      const auto size = static_cast<double>(spans[d].size());
      if (size < 2) continue;
      gathered *= size;
      const bool wraps =
          torus.wraparound[d] && spans[d].size() == static_cast<size_t>(torus.dims[d]);
      const double width = wraps ? 2 : 1;
      seconds += (size - 1) * link.latency_seconds +
                 (size - 1) / size * (bytes * gathered / n) / (width * link.bytes_per_second);
    }
    return seconds;
  }
  // A ring in group order, as slow as its longest hop path.
  int64_t hops = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    hops = std::max(hops, TorusHops(torus, group[i], group[(i + 1) % group.size()]));
  }
  return (n - 1) *
         (static_cast<double>(hops) * link.latency_seconds + bytes / n / link.bytes_per_second);
}

double TargetCostModel::SwitchedGatherSeconds(const SwitchedTopology& switched,
                                              const std::vector<int64_t>& group,
                                              double bytes) const {
  std::map<int64_t, int64_t> per_node;
  for (int64_t device : group) ++per_node[device / switched.devices_per_node];
  const auto nodes = static_cast<double>(per_node.size());
  double local = 0;
  for (const auto& [node, count] : per_node) local = std::max(local, static_cast<double>(count));
  const auto ring = [](double size, const Link& link, double ring_bytes) {
    return size < 2 ? 0.0
                    : (size - 1) * link.latency_seconds +
                          (size - 1) / size * ring_bytes / link.bytes_per_second;
  };
  // Across nodes first, each device with its peers of the same local index
  // (one NIC each, shards of B/N); then inside each node, blocks that have
  // grown to B/local.
  return ring(nodes, switched.inter_node, bytes / local) + ring(local, switched.intra_node, bytes);
}

int64_t TargetCostModel::TorusHops(const TorusTopology& torus, int64_t a, int64_t b) const {
  const auto ca = target_.Coordinates(a);
  const auto cb = target_.Coordinates(b);
  int64_t hops = 0;
  for (size_t d = 0; d < ca.size(); ++d) {
    const int64_t straight = std::abs(ca[d] - cb[d]);
    hops += torus.wraparound[d] ? std::min(straight, torus.dims[d] - straight) : straight;
  }
  return hops;
}

double TargetCostModel::PermuteSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                       double bytes) const {
  if (const auto* bus = std::get_if<BusTopology>(&target_.topology())) {
    double moved = 0;
    for (const auto& [source, target] : pairs) moved += source == target ? 0 : bytes;
    return moved == 0 ? 0 : bus->bus.latency_seconds + moved / bus->bus.bytes_per_second;
  }
  if (const auto* torus = std::get_if<TorusTopology>(&target_.topology())) {
    double seconds = 0;
    for (const auto& [source, target] : pairs) {
      if (source == target) continue;
      const auto hops = static_cast<double>(TorusHops(*torus, source, target));
      seconds = std::max(seconds,
                         hops * torus->link.latency_seconds + bytes / torus->link.bytes_per_second);
    }
    return seconds;
  }
  // A device's NVLink (or NIC) carries all its outgoing flows one way and
  // its incoming ones the other: a device sending to two peers at once
  // shares its port between them.
  const auto& switched = std::get<SwitchedTopology>(target_.topology());
  std::map<std::tuple<int64_t, bool, bool>, double> port_bytes;  // (device, out?, inter-node?)
  for (const auto& [source, target] : pairs) {
    if (source == target) continue;
    const bool inter = source / switched.devices_per_node != target / switched.devices_per_node;
    port_bytes[{source, true, inter}] += bytes;
    port_bytes[{target, false, inter}] += bytes;
  }
  double seconds = 0;
  for (const auto& [port, port_total] : port_bytes) {
    const Link& link = std::get<2>(port) ? switched.inter_node : switched.intra_node;
    seconds = std::max(seconds, link.latency_seconds + port_total / link.bytes_per_second);
  }
  return seconds;
}

}  // namespace loom::cost
