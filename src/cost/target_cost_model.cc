#include "cost/target_cost_model.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "analysis/flops.h"
#include "analysis/fusion.h"
#include "cost/collective_algorithm.h"
#include "ir/async.h"
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

// How many of a permute's messages cross each link of their routes. Kept
// as a sorted list of the links crossed, not a count for every link of the
// target: a round of a 16-device group's all-to-all touches a few dozen of
// a 16,384-device cluster's 65,536 links, and the step estimate prices
// every round of every group.
class LinkLoads {
 public:
  template <typename Kept>
  LinkLoads(const Target& target, const std::vector<std::pair<int64_t, int64_t>>& pairs,
            Kept&& kept) {
    for (const auto& [source, destination] : pairs) {
      if (source == destination || !kept(source, destination)) continue;
      ForEachRouteLink(target, source, destination, [&](int64_t link) { links_.push_back(link); });
    }
    std::sort(links_.begin(), links_.end());
  }
  int64_t Messages(int64_t link) const {
    const auto [first, last] = std::equal_range(links_.begin(), links_.end(), link);
    return last - first;
  }

 private:
  std::vector<int64_t> links_;
};

}  // namespace

double TargetCostModel::MemorySeconds(double bytes) const {
  return bytes / target_.compute().memory_bytes_per_second;
}

double TargetCostModel::DotSeconds(const analysis::KernelDots& dots, double bytes) const {
  const ComputeSpec& compute = target_.compute();
  double spent = 0;
  for (const analysis::DotDims& dot : dots.dims) {
    spent += compute.tiling.SpentFlops(dot.batch, dot.m, dot.n, dot.k);
  }
  const double rate = compute.MatrixFlops(dots.type.value_or(ir::PrimitiveType::kF32));
  return std::max(spent / rate, MemorySeconds(bytes)) + compute.launch_seconds;
}

// XLA expands both in blocks (and cuSOLVER and LAPACK run them so) that do
// almost all of their arithmetic as matrix products of panels: the FLOPs at
// the element type's matrix peak, or the bytes if they take longer. The
// steps' dependences (a small solve is latency-bound) are not priced.
double TargetCostModel::LinearAlgebraSeconds(const ir::Instruction& instruction,
                                             double bytes) const {
  const ComputeSpec& compute = target_.compute();
  const double flops = static_cast<double>(analysis::LinearAlgebraFlops(instruction));
  const double rate = compute.MatrixFlops(instruction.shape().type());
  return std::max(flops / rate, MemorySeconds(bytes)) + compute.launch_seconds;
}

double TargetCostModel::ComputeSeconds(const ir::Instruction& instruction) const {
  const Opcode opcode = instruction.opcode();
  if (IsFree(opcode)) return 0;
  // Scalar arithmetic (a ring's block offsets, a loop's counter) folds into
  // the fusion of the op that uses it, as XLA compiles it: no launch of its
  // own.
  if (analysis::FoldsIntoUsers(instruction)) return 0;
  const double result_bytes = static_cast<double>(instruction.shape().ByteSize());
  if (opcode == Opcode::kDot || opcode == Opcode::kConvolution || opcode == Opcode::kFusion) {
    // A fusion is one kernel: it reads its operands and writes its result
    // once, what it computes in between stays on chip.
    const analysis::KernelDots dots = analysis::KernelDotsOf(instruction);
    if (dots.type) return DotSeconds(dots, OperandBytes(instruction) + result_bytes);
  }
  double bytes = OperandBytes(instruction) + result_bytes;
  if (opcode == Opcode::kTriangularSolve || opcode == Opcode::kCholesky) {
    return LinearAlgebraSeconds(instruction, bytes);
  }
  if (opcode == Opcode::kDynamicUpdateSlice) {
    bytes = 2 * static_cast<double>(instruction.operand(1)->shape().ByteSize());  // in place
  } else if (opcode == Opcode::kGather) {
    // The windows it reads, the indices, the result.
    bytes = 2 * result_bytes + static_cast<double>(instruction.operand(1)->shape().ByteSize());
  } else if (opcode == Opcode::kScatter && instruction.operand_count() == 3) {
    // In place: the indices and the updates read, the windows they land on
    // read and written.
    bytes = static_cast<double>(instruction.operand(1)->shape().ByteSize()) +
            3 * static_cast<double>(instruction.operand(2)->shape().ByteSize());
  } else if (opcode == Opcode::kDynamicSlice || opcode == Opcode::kSlice ||
             opcode == Opcode::kBroadcast || opcode == Opcode::kIota) {
    bytes = 2 * result_bytes;
  }
  return MemorySeconds(bytes) + target_.compute().launch_seconds;
}

namespace {

// What an op that updates operand 0 in place writes: dynamic-update-slice's
// update, a scatter's updates; nullopt for any other op.
std::optional<double> InPlaceUpdateBytes(const ir::Instruction& instruction) {
  if (instruction.opcode() == Opcode::kDynamicUpdateSlice) {
    return static_cast<double>(instruction.operand(1)->shape().ByteSize());
  }
  if (instruction.opcode() == Opcode::kScatter && instruction.operand_count() == 3) {
    return static_cast<double>(instruction.operand(2)->shape().ByteSize());
  }
  return std::nullopt;
}

// Bytes `instruction` reads of its operand `index` in a kernel of its own.
double OperandReadBytes(const ir::Instruction& instruction, int64_t index) {
  const ir::Instruction& operand = *instruction.operand(index);
  switch (instruction.opcode()) {
    case Opcode::kDynamicSlice:
    case Opcode::kSlice:
      // The window only.
      if (index == 0) return static_cast<double>(instruction.shape().ByteSize());
      break;
    case Opcode::kDynamicUpdateSlice:
      if (index == 0) return 0;  // updated in place
      break;
    case Opcode::kGather:
      // The windows only.
      if (index == 0) return static_cast<double>(instruction.shape().ByteSize());
      break;
    case Opcode::kScatter:
      // In place: the windows the updates land on.
      if (index == 0 && instruction.operand_count() == 3) {
        return static_cast<double>(instruction.operand(2)->shape().ByteSize());
      }
      break;
    default:
      break;
  }
  return static_cast<double>(operand.shape().ByteSize());
}

}  // namespace

double TargetCostModel::FusedComputeSeconds(const ir::Instruction& instruction,
                                            const analysis::FusionPlan& fusion) const {
  // A kernel's whole time is its root's: what is fused into it costs nothing
  // of its own.
  if (fusion.FusedIntoUsers(instruction)) return 0;
  const Opcode opcode = instruction.opcode();
  if (opcode == Opcode::kFusion) return ComputeSeconds(instruction);  // the program's own kernel
  // A reshape or bitcast renames its operand for free, unless what it
  // renames is computed in its kernel: then it is that kernel's root.
  const bool roots_a_kernel =
      std::any_of(instruction.operands().begin(), instruction.operands().end(),
                  [&](const ir::Instruction* operand) { return fusion.FusedIntoUsers(*operand); });
  if (ComputeSeconds(instruction) == 0 && !roots_a_kernel) return 0;  // free or scalar
  // The kernel reads each value from outside it once (as much of it as its
  // readers take), and writes its root's result.
  // (In the order the plan lists them, so that the sum is the same on
  // every run.)
  std::vector<std::pair<const ir::Instruction*, double>> read;
  for (const analysis::OperandRead& operand : fusion.KernelReads(instruction)) {
    const ir::Instruction* value = operand.reader->operand(operand.index);
    const double value_bytes = OperandReadBytes(*operand.reader, operand.index);
    auto seen =
        std::find_if(read.begin(), read.end(), [&](const auto& r) { return r.first == value; });
    if (seen == read.end()) {
      read.emplace_back(value, value_bytes);
    } else {
      seen->second = std::max(seen->second, value_bytes);
    }
  }
  double bytes = 0;
  for (const auto& [value, value_bytes] : read) bytes += value_bytes;
  // A dot's kernel, or an add's that sums a dot in it (output fusion: the
  // addend among what it reads).
  const ir::Instruction* product = opcode == Opcode::kDot || opcode == Opcode::kConvolution
                                       ? &instruction
                                       : fusion.OutputFusedProduct(instruction);
  // (A dynamic-update-slice that stores a product writes only its window.)
  const std::optional<double> in_place = InPlaceUpdateBytes(instruction);
  bytes += in_place ? *in_place : static_cast<double>(instruction.shape().ByteSize());
  if (product != nullptr) return DotSeconds(analysis::KernelDotsOf(*product), bytes);
  if (opcode == Opcode::kTriangularSolve || opcode == Opcode::kCholesky) {
    return LinearAlgebraSeconds(instruction, bytes);
  }
  return MemorySeconds(bytes) + target_.compute().launch_seconds;
}

namespace {

// Per group, the bytes of the all-gather whose phases the collective runs:
// an all-gather's gathered result; a reduce-scatter's or all-reduce's input.
std::vector<double> GatheredBytes(Opcode opcode, double operand_bytes,
                                  const std::vector<std::vector<int64_t>>& groups) {
  std::vector<double> bytes;
  bytes.reserve(groups.size());
  for (const auto& group : groups) {
    bytes.push_back(opcode == Opcode::kAllGather ? operand_bytes * static_cast<double>(group.size())
                                                 : operand_bytes);
  }
  return bytes;
}

}  // namespace

namespace {

// Everything a transfer's price depends on: its synchronous opcode, its
// operand bytes, how its ids are read and which they are, and the grid; as
// raw words, since a 16,384-device permute's pairs are 32,768 of them.
std::string TransferKey(const ir::Instruction& op, const ir::DeviceGrid& grid) {
  std::vector<int64_t> words;
  auto add = [&](int64_t word) { words.push_back(word); };
  auto add_all = [&](const std::vector<int64_t>& values) {
    add(static_cast<int64_t>(values.size()));
    words.insert(words.end(), values.begin(), values.end());
  };
  const auto mode = ir::CollectiveGroupMode(op);
  const double bytes = OperandBytes(op);
  int64_t bytes_word = 0;
  static_assert(sizeof bytes == sizeof bytes_word);
  std::memcpy(&bytes_word, &bytes, sizeof bytes);
  add(static_cast<int64_t>(ir::SynchronousOpcode(op.opcode())));
  add(bytes_word);
  add(mode.ok() ? static_cast<int64_t>(*mode) : -1);
  add(grid.replica_count);
  add(grid.partition_count);
  const ir::Attributes& attrs = op.attrs();
  if (!attrs.replica_groups) {
    add(-1);
  } else if (const auto& iota = attrs.replica_groups->iota()) {
    add(-2);
    add(iota->num_groups);
    add(iota->group_size);
    add_all(iota->reshape_dims);
    add_all(iota->transpose);
  } else {
    add(static_cast<int64_t>(attrs.replica_groups->explicit_groups().size()));
    for (const auto& group : attrs.replica_groups->explicit_groups()) add_all(group);
  }
  if (attrs.source_target_pairs) {
    for (const auto& [source, target] : *attrs.source_target_pairs) {
      add(source);
      add(target);
    }
  }
  return std::string(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(int64_t));
}

// The most bytes of prices a model keeps (16,384 devices' prices are about
// 200 KiB a transfer); past it the memo starts again.
constexpr size_t kMemoBytes = size_t{256} << 20;

size_t BytesOf(const std::shared_ptr<const std::vector<double>>& seconds) {
  return seconds->size() * sizeof(double);
}
size_t BytesOf(const std::shared_ptr<const std::vector<int64_t>>& links) {
  return links->size() * sizeof(int64_t);
}
size_t BytesOf(const std::shared_ptr<const TransferSegmentTable>& table) {
  size_t bytes = table->row_of_device.size() * sizeof(int32_t);
  for (const auto& row : table->distinct) bytes += row.size() * sizeof(TransferSegment);
  return bytes;
}
size_t BytesOf(const std::optional<double>&) { return sizeof(double); }

}  // namespace

template <typename Value, typename Compute>
Value TargetCostModel::Memoized(const ir::Instruction& op, const ir::DeviceGrid& grid,
                                Value Prices::*field, Compute&& compute) const {
  std::string key = TransferKey(op, grid);
  {
    const std::lock_guard<std::mutex> lock(memo_->mutex);
    if (auto it = memo_->prices.find(key); it != memo_->prices.end() && it->second.*field) {
      return it->second.*field;
    }
  }
  Value value = compute();  // outside the lock: a price may ask for another
  const std::lock_guard<std::mutex> lock(memo_->mutex);
  const size_t added = key.size() + BytesOf(value);
  if (memo_->bytes + added > kMemoBytes) {
    memo_->prices.clear();
    memo_->bytes = 0;
  }
  memo_->bytes += added;
  memo_->prices[std::move(key)].*field = value;
  return value;
}

std::shared_ptr<const std::vector<double>> TargetCostModel::SecondsByDevice(
    const ir::Instruction& op, const ir::DeviceGrid& grid) const {
  return Memoized(op, grid, &Prices::seconds, [&] {
    return std::make_shared<const std::vector<double>>(ComputeTransferSecondsByDevice(op, grid));
  });
}

double TargetCostModel::TransferSeconds(const ir::Instruction& instruction,
                                        const ir::DeviceGrid& grid) const {
  const ir::Instruction* op = TransferOp(instruction);
  if (op == nullptr) return 0;
  return *Memoized(*op, grid, &Prices::slowest, [&] {
    const std::shared_ptr<const std::vector<double>> by_device = SecondsByDevice(*op, grid);
    return std::optional<double>(
        by_device->empty() ? 0 : *std::max_element(by_device->begin(), by_device->end()));
  });
}

std::vector<double> TargetCostModel::TransferSecondsByDevice(const ir::Instruction& instruction,
                                                             const ir::DeviceGrid& grid) const {
  const ir::Instruction* op = TransferOp(instruction);
  if (op == nullptr) return std::vector<double>(static_cast<size_t>(grid.size()), 0.0);
  return *SecondsByDevice(*op, grid);
}

std::vector<double> TargetCostModel::ComputeTransferSecondsByDevice(
    const ir::Instruction& op, const ir::DeviceGrid& grid) const {
  std::vector<double> seconds(static_cast<size_t>(grid.size()), 0.0);
  const Opcode opcode = ir::SynchronousOpcode(op.opcode());
  const double bytes = OperandBytes(op);
  if (opcode == Opcode::kCollectivePermute) {
    auto pairs = ir::GlobalSourceTargetPairs(op, grid);
    return pairs.ok() ? PermuteSecondsByDevice(*pairs, bytes, grid.size()) : seconds;
  }
  auto groups = ir::ParticipantGroups(op, grid);
  if (!groups.ok()) return seconds;
  const bool gathers = opcode == Opcode::kAllGather || opcode == Opcode::kReduceScatter ||
                       opcode == Opcode::kAllReduce;
  const std::vector<std::vector<CollectivePhase>> phases =
      gathers ? AllGatherPhasesOfGroups(*groups, GatheredBytes(opcode, bytes, *groups), target_)
              : std::vector<std::vector<CollectivePhase>>{};
  for (size_t g = 0; g < groups->size(); ++g) {
    const std::vector<int64_t>& group = (*groups)[g];
    double time = 0;
    if (gathers) {
      for (const CollectivePhase& phase : phases[g]) time += phase.Seconds();
      // An all-reduce is a reduce-scatter, then an all-gather.
      if (opcode == Opcode::kAllReduce) time *= 2;
    } else if (opcode == Opcode::kAllToAll) {
      time = AllToAllSeconds(group, bytes, grid.size());
    }
    for (int64_t device : group) {
      if (device >= 0 && device < grid.size()) seconds[static_cast<size_t>(device)] = time;
    }
  }
  return seconds;
}

std::vector<int64_t> TargetCostModel::TransferLinks(const ir::Instruction& instruction,
                                                    const ir::DeviceGrid& grid) const {
  const ir::Instruction* op = TransferOp(instruction);
  if (op == nullptr || ir::SynchronousOpcode(op->opcode()) != Opcode::kCollectivePermute) return {};
  return *Memoized(*op, grid, &Prices::links, [&] {
    return std::make_shared<const std::vector<int64_t>>(ComputeTransferLinks(*op, grid));
  });
}

std::vector<int64_t> TargetCostModel::ComputeTransferLinks(const ir::Instruction& op,
                                                           const ir::DeviceGrid& grid) const {
  auto pairs = ir::GlobalSourceTargetPairs(op, grid);
  if (!pairs.ok()) return {};
  std::vector<int64_t> links;
  for (const auto& [source, target] : *pairs) {
    if (source < 0 || target < 0 || source >= target_.device_count() ||
        target >= target_.device_count()) {
      return {};
    }
    const std::vector<int64_t> route = RouteLinks(target_, source, target);
    links.insert(links.end(), route.begin(), route.end());
  }
  std::sort(links.begin(), links.end());
  links.erase(std::unique(links.begin(), links.end()), links.end());
  return links;
}

namespace {

// A device's ports in a permute (those of its routes out and in), and the
// most of the permute's messages on any link of those routes.
struct PortUse {
  PortMask ports = 0;
  double flows = 1;
};
// Per device that sends or receives in `pairs` (each a device in
// [0, devices) other than its peer): its PortUse, by device.
std::map<int64_t, PortUse> PermutePorts(const Target& target,
                                        const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                        int64_t devices) {
  auto kept = [&](int64_t source, int64_t destination) {
    return source >= 0 && destination >= 0 && source < devices && destination < devices;
  };
  const LinkLoads loads(target, pairs, kept);
  std::map<int64_t, PortUse> use;
  for (const auto& [source, destination] : pairs) {
    if (source == destination || !kept(source, destination)) continue;
    PortMask route_ports = 0;
    double busiest = 1;
    ForEachRouteLink(target, source, destination, [&](int64_t link) {
      route_ports |= PortMask{1} << PortOfLink(target, link);
      busiest = std::max(busiest, static_cast<double>(loads.Messages(link)));
    });
    for (const int64_t end : {source, destination}) {
      PortUse& at = use[end];
      at.ports |= route_ports;
      at.flows = std::max(at.flows, busiest);
    }
  }
  return use;
}

// The table of `by_device`, devices with equal segments sharing a row.
TransferSegmentTable Tabulate(std::vector<std::vector<TransferSegment>> by_device) {
  TransferSegmentTable table;
  std::map<std::vector<TransferSegment>, int32_t> rows;
  table.row_of_device.reserve(by_device.size());
  for (auto& segments : by_device) {
    if (segments.empty()) {
      table.row_of_device.push_back(-1);
      continue;
    }
    auto [it, inserted] = rows.try_emplace(segments, static_cast<int32_t>(rows.size()));
    if (inserted) table.distinct.push_back(std::move(segments));
    table.row_of_device.push_back(it->second);
  }
  return table;
}

}  // namespace

TransferSegmentTable TargetCostModel::TransferSegmentsByDevice(const ir::Instruction& instruction,
                                                               const ir::DeviceGrid& grid) const {
  const ir::Instruction* op = TransferOp(instruction);
  if (op == nullptr) {
    TransferSegmentTable none;
    none.row_of_device.assign(static_cast<size_t>(std::max<int64_t>(grid.size(), 0)), -1);
    return none;
  }
  return *Memoized(*op, grid, &Prices::segments, [&] {
    return std::make_shared<const TransferSegmentTable>(ComputeTransferSegmentsByDevice(*op, grid));
  });
}

TransferSegmentTable TargetCostModel::ComputeTransferSegmentsByDevice(
    const ir::Instruction& op, const ir::DeviceGrid& grid) const {
  const int64_t devices = grid.size();
  std::vector<std::vector<TransferSegment>> by_device(static_cast<size_t>(devices));
  auto add = [&](int64_t device, double seconds, PortMask ports, double flows) {
    if (device >= 0 && device < devices && seconds > 0) {
      by_device[static_cast<size_t>(device)].push_back({seconds, ports, flows});
    }
  };
  const Opcode opcode = ir::SynchronousOpcode(op.opcode());
  const double bytes = OperandBytes(op);
  if (opcode == Opcode::kCollectivePermute) {
    auto pairs = ir::GlobalSourceTargetPairs(op, grid);
    if (!pairs.ok()) return Tabulate(std::move(by_device));
    const std::vector<double> seconds = PermuteSecondsByDevice(*pairs, bytes, devices);
    for (const auto& [device, use] : PermutePorts(target_, *pairs, devices)) {
      add(device, seconds[static_cast<size_t>(device)], use.ports, use.flows);
    }
    return Tabulate(std::move(by_device));
  }
  auto groups = ir::ParticipantGroups(op, grid);
  if (!groups.ok()) return Tabulate(std::move(by_device));
  const bool gathers = opcode == Opcode::kAllGather || opcode == Opcode::kReduceScatter ||
                       opcode == Opcode::kAllReduce;
  const std::vector<std::vector<CollectivePhase>> gather_phases =
      gathers ? AllGatherPhasesOfGroups(*groups, GatheredBytes(opcode, bytes, *groups), target_)
              : std::vector<std::vector<CollectivePhase>>(groups->size());
  for (size_t g = 0; g < groups->size(); ++g) {
    const std::vector<int64_t>& group = (*groups)[g];
    if (opcode == Opcode::kAllToAll) {
      // Round by round, each as long as its slowest pair (AllToAllSeconds).
      const double block = bytes / static_cast<double>(std::max<size_t>(group.size(), 1));
      for (const auto& round : AllToAllRounds(group)) {
        const double slowest = SlowestPairSeconds(round, block, devices);
        const std::map<int64_t, PortUse> use = PermutePorts(target_, round, devices);
        for (const auto& [source, destination] : round) {
          const auto at = use.find(source);
          if (at != use.end()) add(source, slowest, at->second.ports, at->second.flows);
        }
      }
      continue;
    }
    const std::vector<CollectivePhase>& phases = gather_phases[g];
    // A reduce-scatter runs an all-gather's phases backwards; an all-reduce
    // a reduce-scatter, then an all-gather.
    std::vector<size_t> order;
    if (opcode == Opcode::kReduceScatter || opcode == Opcode::kAllReduce) {
      for (size_t i = phases.size(); i-- > 0;) order.push_back(i);
    }
    if (opcode == Opcode::kAllGather || opcode == Opcode::kAllReduce) {
      for (size_t i = 0; i < phases.size(); ++i) order.push_back(i);
    }
    for (size_t i : order) {
      const double seconds = phases[i].Seconds();
      for (const auto& [device, ports] : PhasePorts(phases[i], target_)) {
        add(device, seconds, ports, phases[i].sharing);
      }
    }
  }
  return Tabulate(std::move(by_device));
}

double TargetCostModel::AllReduceSeconds(const std::vector<int64_t>& group, double bytes) const {
  return 2 * AllGatherSeconds(group, bytes);
}

double TargetCostModel::AllGatherSeconds(const std::vector<int64_t>& group, double bytes) const {
  double seconds = 0;
  for (const CollectivePhase& phase : AllGatherPhases(group, bytes, target_)) {
    seconds += phase.Seconds();
  }
  return seconds;
}

double TargetCostModel::AllToAllSeconds(const std::vector<int64_t>& group, double bytes,
                                        int64_t devices) const {
  const double block = bytes / static_cast<double>(std::max<size_t>(group.size(), 1));
  double seconds = 0;
  for (const auto& round : AllToAllRounds(group))
    seconds += SlowestPairSeconds(round, block, devices);
  return seconds;
}

double TargetCostModel::SlowestPairSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                           double bytes, int64_t devices) const {
  const std::vector<double> seconds = PermutePairSeconds(pairs, bytes);
  double slowest = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [source, destination] = pairs[i];
    const bool counted =
        (source >= 0 && source < devices) || (destination >= 0 && destination < devices);
    if (counted) slowest = std::max(slowest, seconds[i]);
  }
  return slowest;
}

double TargetCostModel::PermuteSeconds(const std::vector<std::pair<int64_t, int64_t>>& pairs,
                                       double bytes) const {
  int64_t devices = 0;
  for (const auto& [source, target] : pairs) devices = std::max({devices, source + 1, target + 1});
  const std::vector<double> by_device = PermuteSecondsByDevice(pairs, bytes, devices);
  return by_device.empty() ? 0 : *std::max_element(by_device.begin(), by_device.end());
}

std::vector<double> TargetCostModel::PermuteSecondsByDevice(
    const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes, int64_t devices) const {
  std::vector<double> seconds(static_cast<size_t>(std::max<int64_t>(devices, 0)), 0.0);
  auto note = [&](int64_t device, double time) {
    if (device >= 0 && device < devices) {
      seconds[static_cast<size_t>(device)] = std::max(seconds[static_cast<size_t>(device)], time);
    }
  };
  const std::vector<double> by_pair = PermutePairSeconds(pairs, bytes);
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (pairs[i].first == pairs[i].second) continue;
    note(pairs[i].first, by_pair[i]);
    note(pairs[i].second, by_pair[i]);
  }
  return seconds;
}

std::vector<double> TargetCostModel::PermutePairSeconds(
    const std::vector<std::pair<int64_t, int64_t>>& pairs, double bytes) const {
  std::vector<double> seconds(pairs.size(), 0.0);
  if (const auto* bus = std::get_if<BusTopology>(&target_.topology())) {
    // Every pair's bytes share the medium: everyone involved waits for all.
    double moved = 0;
    for (const auto& [source, target] : pairs) moved += source == target ? 0 : bytes;
    if (moved == 0) return seconds;
    const double time = bus->bus.latency_seconds + moved / bus->bus.bytes_per_second;
    for (size_t i = 0; i < pairs.size(); ++i) {
      if (pairs[i].first != pairs[i].second) seconds[i] = time;
    }
    return seconds;
  }
  if (const auto* torus = std::get_if<TorusTopology>(&target_.topology())) {
    // Messages whose dimension-ordered routes cross the same link share
    // it: each takes as long as its busiest link's share (what the
    // simulator's max-min sharing gives the flows of that link).
    const LinkLoads loads(target_, pairs, [](int64_t, int64_t) { return true; });
    for (size_t i = 0; i < pairs.size(); ++i) {
      const auto [source, target] = pairs[i];
      if (source == target) continue;
      int64_t sharing = 1, route = 0;
      ForEachTorusRouteLink(target_, source, target, [&](int64_t link) {
        sharing = std::max(sharing, loads.Messages(link));
        ++route;
      });
      const auto hops = static_cast<double>(route);
      seconds[i] = hops * torus->link.latency_seconds +
                   static_cast<double>(sharing) * bytes / torus->link.bytes_per_second;
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
  // Each flow as slow as the busier of its two ports.
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [source, target] = pairs[i];
    if (source == target) continue;
    const bool inter = source / switched.devices_per_node != target / switched.devices_per_node;
    const Link& link = inter ? switched.inter_node : switched.intra_node;
    const double busiest =
        std::max(port_bytes[{source, true, inter}], port_bytes[{target, false, inter}]);
    seconds[i] = link.latency_seconds + busiest / link.bytes_per_second;
  }
  return seconds;
}

}  // namespace loom::cost
