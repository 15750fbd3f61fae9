#include "pass/schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ir/async.h"
#include "ir/verifier.h"
#include "support/units.h"

namespace loom::pass {

using cost::TransferRole;
using ir::Instruction;

namespace {

// A ready instruction's rank: the longest critical path first, then the
// earliest in the original order.
struct Rank {
  double critical_path;
  size_t index;
  bool operator<(const Rank& other) const {
    if (critical_path != other.critical_path) return critical_path > other.critical_path;
    return index < other.index;
  }
};

// One computation's instructions and the edges that constrain their order
// (operands and control predecessors), shared by both schedulers.
struct Graph {
  struct Node {
    const Instruction* instruction = nullptr;
    TransferRole role = TransferRole::kNone;
    int kind = -1;  // of a transfer, start or done
    std::vector<size_t> predecessors;
    std::vector<size_t> successors;
  };
  std::vector<Node> nodes;
  std::vector<size_t> topological;  // an order of the nodes that respects the edges
  std::optional<size_t> root;       // held back to the end: nothing uses it
};

// Kahn's algorithm; shorter than `nodes` when the edges have a cycle.
std::vector<size_t> TopologicalOrder(const std::vector<Graph::Node>& nodes) {
  std::vector<size_t> order;
  std::vector<size_t> waiting(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    waiting[i] = nodes[i].predecessors.size();
    if (waiting[i] == 0) order.push_back(i);
  }
  for (size_t at = 0; at < order.size(); ++at) {
    for (size_t s : nodes[order[at]].successors) {
      if (--waiting[s] == 0) order.push_back(s);
    }
  }
  return order;
}

Expected<Graph> BuildGraph(const ir::Computation& computation) {
  Graph graph;
  const auto& instructions = computation.instructions();
  graph.nodes.resize(instructions.size());
  std::unordered_map<const Instruction*, size_t> index;
  for (size_t i = 0; i < instructions.size(); ++i) index[instructions[i].get()] = i;
  for (size_t i = 0; i < instructions.size(); ++i) {
    Graph::Node& node = graph.nodes[i];
    node.instruction = instructions[i].get();
    node.role = cost::TransferRoleOf(*node.instruction);
    if (std::optional<cost::TransferKind> kind = cost::TransferKindOf(*node.instruction)) {
      node.kind = static_cast<int>(*kind);
    }
    std::vector<size_t>& predecessors = node.predecessors;
    for (const Instruction* operand : node.instruction->operands()) {
      auto it = index.find(operand);
      if (it == index.end()) {
        return Error{fmt::format("schedule: %{} uses %{}, which is not in %{}",
                                 node.instruction->name(), operand->name(), computation.name())};
      }
      predecessors.push_back(it->second);
    }
    for (const Instruction* predecessor : node.instruction->attrs().control_predecessors) {
      auto it = index.find(predecessor);
      if (it != index.end()) predecessors.push_back(it->second);
    }
    std::sort(predecessors.begin(), predecessors.end());
    predecessors.erase(std::unique(predecessors.begin(), predecessors.end()), predecessors.end());
    for (size_t p : predecessors) graph.nodes[p].successors.push_back(i);
  }
  const Instruction* root = computation.root();
  if (root && root->opcode() != ir::Opcode::kParameter && index.count(root) &&
      graph.nodes[index[root]].successors.empty()) {
    graph.root = index[root];
  }
  graph.topological = TopologicalOrder(graph.nodes);
  if (graph.topological.size() != graph.nodes.size()) {
    return Error{fmt::format("schedule: %{} has a dependency cycle", computation.name())};
  }
  return graph;
}

class TopDownScheduler {
 public:
  TopDownScheduler(const Graph& graph, const cost::CostModel& model, const ir::DeviceGrid& grid,
                   const ScheduleOptions& options, const cost::ComputeTimes& compute,
                   cost::TransferTimes& transfers)
      : graph_(graph),
        model_(model),
        grid_(grid),
        options_(options),
        compute_times_(compute),
        transfers_(transfers),
        timeline_(model, grid, compute_times_, transfers) {}

  Expected<std::vector<const Instruction*>> Run() {
    InitNodes();
    CriticalPaths();
    // Parameters first, in their order.
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].instruction->opcode() == ir::Opcode::kParameter && nodes_[i].waiting == 0) {
        Place(i);
      }
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!nodes_[i].placed && nodes_[i].waiting == 0) MakeReady(i);
    }
    while (order_.size() < nodes_.size()) {
      std::optional<size_t> next = Pick();
      if (!next) {
        if (root_ready_ && order_.size() + 1 == nodes_.size()) {
          next = *root_;
        } else {
          return Error{"schedule: internal error: nothing ready to place"};
        }
      }
      Place(*next);
    }
    return order_;
  }

  int64_t over_limit() const { return over_limit_; }

 private:
  struct Node {
    const Instruction* instruction = nullptr;
    TransferRole role = TransferRole::kNone;
    int kind = -1;  // of a transfer, start or done
    double critical_path = 0;
    int64_t waiting = 0;  // predecessors not yet placed
    std::vector<size_t> successors;
    bool ready = false;  // operands and control predecessors placed
    bool placed = false;
  };

  void InitNodes() {
    nodes_.resize(graph_.nodes.size());
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const Graph::Node& from = graph_.nodes[i];
      Node& node = nodes_[i];
      node.instruction = from.instruction;
      node.role = from.role;
      node.kind = from.kind;
      node.waiting = static_cast<int64_t>(from.predecessors.size());
      node.successors = from.successors;
    }
    root_ = graph_.root;
  }

  // The longest path from each instruction to the end of the computation,
  // the instruction included.
  void CriticalPaths() {
    for (auto it = graph_.topological.rbegin(); it != graph_.topological.rend(); ++it) {
      Node& node = nodes_[*it];
      double longest = 0;
      for (size_t s : node.successors) longest = std::max(longest, nodes_[s].critical_path);
      node.critical_path =
          cost::IsolatedSeconds(*node.instruction, model_, grid_, compute_times_, transfers_) +
          longest;
    }
  }

  Rank RankOf(size_t i) const { return Rank{nodes_[i].critical_path, i}; }

  void MakeReady(size_t i) {
    Node& node = nodes_[i];
    if (node.ready) return;
    node.ready = true;
    if (root_ && i == *root_) {
      root_ready_ = true;
      return;
    }
    switch (node.role) {
      case TransferRole::kStart:
        starts_[node.kind].insert(RankOf(i));
        return;
      case TransferRole::kDone: {
        const Instruction* start = ir::StartOf(*node.instruction);
        const std::optional<double> finish =
            start ? timeline_.TransferFinish(*start) : std::nullopt;
        pending_dones_.insert({finish.value_or(0), i});
        return;
      }
      default:
        compute_.insert(RankOf(i));
        return;
    }
  }

  bool HasRoom(int kind) const { return open_[kind] < options_.max_in_flight[kind]; }

  std::optional<size_t> Pick() {
    // Dones whose transfer is over by the clock join the finished pool.
    const double now = timeline_.now();
    while (!pending_dones_.empty() && pending_dones_.begin()->first <= now * (1 + 1e-12)) {
      const size_t i = pending_dones_.begin()->second;
      pending_dones_.erase(pending_dones_.begin());
      finished_[nodes_[i].kind].insert(RankOf(i));
      finished_all_.insert(RankOf(i));
    }
    // 1. A start whose kind has room.
    std::optional<Rank> best;
    for (int k = 0; k < cost::kTransferKindCount; ++k) {
      if (!starts_[k].empty() && HasRoom(k) && (!best || *starts_[k].begin() < *best)) {
        best = *starts_[k].begin();
      }
    }
    if (best) return Take(*best);
    // 2. A finished done that frees room for a waiting start.
    for (int k = 0; k < cost::kTransferKindCount; ++k) {
      if (!starts_[k].empty() && !finished_[k].empty()) return Take(*finished_[k].begin());
    }
    // 3. Compute or a finished done, by critical path.
    if (!compute_.empty()) best = *compute_.begin();
    if (!finished_all_.empty() && (!best || *finished_all_.begin() < *best)) {
      best = *finished_all_.begin();
    }
    if (best) return Take(*best);
    // 4. The done whose transfer ends first.
    if (!pending_dones_.empty()) {
      const size_t i = pending_dones_.begin()->second;
      pending_dones_.erase(pending_dones_.begin());
      return i;
    }
    // 5. Only starts without room are ready: the best of them, past the limit.
    for (int k = 0; k < cost::kTransferKindCount; ++k) {
      if (!starts_[k].empty() && (!best || *starts_[k].begin() < *best)) best = *starts_[k].begin();
    }
    if (best) {
      ++over_limit_;
      return Take(*best);
    }
    return std::nullopt;
  }

  // Removes a ranked instruction from whichever pool holds it.
  // By value: the caller may pass an element of the set it is erased from
  // (the fuzzer found `Take(*finished_[k].begin())` reading freed memory).
  size_t Take(Rank rank) {
    const Node& node = nodes_[rank.index];
    if (node.role == TransferRole::kStart) {
      starts_[node.kind].erase(rank);
    } else if (node.role == TransferRole::kDone) {
      finished_[node.kind].erase(rank);
      finished_all_.erase(rank);
    } else {
      compute_.erase(rank);
    }
    return rank.index;
  }

  void Place(size_t i) {
    Node& node = nodes_[i];
    node.placed = true;
    order_.push_back(node.instruction);
    timeline_.Run(*node.instruction);
    if (node.role == TransferRole::kStart) ++open_[node.kind];
    if (node.role == TransferRole::kDone && open_[node.kind] > 0) --open_[node.kind];
    for (size_t s : node.successors) {
      if (--nodes_[s].waiting == 0) MakeReady(s);
    }
  }

  const Graph& graph_;
  const cost::CostModel& model_;
  const ir::DeviceGrid& grid_;
  const ScheduleOptions& options_;
  cost::ComputeTimes compute_times_;  // before timeline_, which shares its plans
  cost::TransferTimes& transfers_;
  cost::Timeline timeline_;

  std::vector<Node> nodes_;
  std::vector<const Instruction*> order_;
  std::optional<size_t> root_;  // held back to the end
  bool root_ready_ = false;

  std::array<std::set<Rank>, cost::kTransferKindCount> starts_;
  std::set<Rank> compute_;
  std::set<std::pair<double, size_t>> pending_dones_;  // (finish, index)
  std::array<std::set<Rank>, cost::kTransferKindCount> finished_;
  std::set<Rank> finished_all_;
  std::array<int64_t, cost::kTransferKindCount> open_{};
  int64_t over_limit_ = 0;
};

// Placed from the end upwards, as XLA's latency hiding scheduler works: a
// reverse clock counts the time from the end of the computation.
class BottomUpScheduler {
 public:
  BottomUpScheduler(const Graph& graph, const cost::CostModel& model, const ir::DeviceGrid& grid,
                    const ScheduleOptions& options, const cost::ComputeTimes& compute,
                    cost::TransferTimes& transfers)
      : graph_(graph),
        model_(model),
        grid_(grid),
        options_(options),
        compute_times_(compute),
        transfers_(transfers),
        waiting_(graph.nodes.size()),
        depth_(graph.nodes.size()),
        placed_(graph.nodes.size(), false) {}

  Expected<std::vector<const Instruction*>> Run() {
    Depths();
    std::vector<size_t> parameters;
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      waiting_[i] = static_cast<int64_t>(graph_.nodes[i].successors.size());
      if (graph_.nodes[i].instruction->opcode() == ir::Opcode::kParameter) parameters.push_back(i);
    }
    if (graph_.root) Place(*graph_.root);
    for (size_t i = 0; i < graph_.nodes.size(); ++i) {
      if (!placed_[i] && waiting_[i] == 0) MakeReady(i);
    }
    // Parameters stay first, in their order: placed last, in reverse.
    const size_t others = graph_.nodes.size() - parameters.size();
    while (reversed_.size() < others) {
      std::optional<size_t> next = Pick();
      if (!next) return Error{"schedule: internal error: nothing ready to place"};
      Place(*next);
    }
    for (auto it = parameters.rbegin(); it != parameters.rend(); ++it) {
      if (!placed_[*it]) Place(*it);
    }
    return std::vector<const Instruction*>(reversed_.rbegin(), reversed_.rend());
  }

  int64_t over_limit() const { return over_limit_; }

 private:
  // The deepest first (the longest path from the start of the computation),
  // then the later instruction of the original order: what goes last.
  struct Depth {
    double depth;
    size_t index;
    bool operator<(const Depth& other) const {
      if (depth != other.depth) return depth > other.depth;
      return index > other.index;
    }
  };

  void Depths() {
    for (size_t i : graph_.topological) {
      double longest = 0;
      for (size_t p : graph_.nodes[i].predecessors) longest = std::max(longest, depth_[p]);
      depth_[i] = cost::IsolatedSeconds(*graph_.nodes[i].instruction, model_, grid_, compute_times_,
                                        transfers_) +
                  longest;
    }
  }

  Depth DepthOf(size_t i) const { return Depth{depth_[i], i}; }

  void MakeReady(size_t i) {
    const Graph::Node& node = graph_.nodes[i];
    if (node.instruction->opcode() == ir::Opcode::kParameter) return;  // placed at the end
    switch (node.role) {
      case TransferRole::kDone:
        dones_[node.kind].insert(DepthOf(i));
        return;
      case TransferRole::kStart: {
        auto it = covered_at_.find(i);
        starts_.insert({it == covered_at_.end() ? clock_ : it->second, i});
        return;
      }
      default:
        compute_.insert(DepthOf(i));
        return;
    }
  }

  bool HasRoom(int kind) const { return open_[kind] < options_.max_in_flight[kind]; }

  std::optional<size_t> Pick() {
    // 1. A done whose kind has room: dones go as late as their users allow.
    std::optional<Depth> best;
    for (int k = 0; k < cost::kTransferKindCount; ++k) {
      if (!dones_[k].empty() && HasRoom(k) && (!best || *dones_[k].begin() < *best)) {
        best = *dones_[k].begin();
      }
    }
    if (best) return TakeDone(*best);
    // 2. A start whose transfer the ops placed since its done cover.
    if (!starts_.empty() && starts_.begin()->first <= clock_ * (1 + 1e-12)) return TakeStart();
    // 3. Compute, the deepest first.
    if (!compute_.empty()) {
      const size_t i = compute_.begin()->index;
      compute_.erase(compute_.begin());
      return i;
    }
    // 4. The start closest to being covered (its transfer partly exposed).
    if (!starts_.empty()) return TakeStart();
    // 5. Only dones without room are ready: the deepest, past the limit.
    for (int k = 0; k < cost::kTransferKindCount; ++k) {
      if (!dones_[k].empty() && (!best || *dones_[k].begin() < *best)) best = *dones_[k].begin();
    }
    if (best) {
      ++over_limit_;
      return TakeDone(*best);
    }
    return std::nullopt;
  }

  size_t TakeDone(const Depth& depth) {
    dones_[graph_.nodes[depth.index].kind].erase(depth);
    return depth.index;
  }

  size_t TakeStart() {
    const size_t i = starts_.begin()->second;
    starts_.erase(starts_.begin());
    return i;
  }

  void Place(size_t i) {
    const Graph::Node& node = graph_.nodes[i];
    placed_[i] = true;
    reversed_.push_back(node.instruction);
    clock_ += compute_times_.Of(*node.instruction);
    switch (node.role) {
      case TransferRole::kSynchronous:
        clock_ += model_.TransferSeconds(*node.instruction, grid_);
        break;
      case TransferRole::kDone:
        ++open_[node.kind];
        if (const Instruction* start = ir::StartOf(*node.instruction)) {
          for (size_t p : node.predecessors) {
            if (graph_.nodes[p].instruction == start) {
              covered_at_[p] = clock_ + model_.TransferSeconds(*start, grid_);
            }
          }
        }
        break;
      case TransferRole::kStart:
        if (open_[node.kind] > 0) --open_[node.kind];
        // What the ops since its done did not cover, the done waits.
        if (auto it = covered_at_.find(i); it != covered_at_.end()) {
          clock_ = std::max(clock_, it->second);
        }
        break;
      case TransferRole::kNone:
        break;
    }
    for (size_t p : node.predecessors) {
      if (--waiting_[p] == 0) MakeReady(p);
    }
  }

  const Graph& graph_;
  const cost::CostModel& model_;
  const ir::DeviceGrid& grid_;
  const ScheduleOptions& options_;
  cost::ComputeTimes compute_times_;
  cost::TransferTimes& transfers_;

  std::vector<int64_t> waiting_;  // successors not yet placed
  std::vector<double> depth_;
  std::vector<bool> placed_;
  std::vector<const Instruction*> reversed_;
  double clock_ = 0;                               // from the end of the computation
  std::unordered_map<size_t, double> covered_at_;  // start -> clock by which it is covered

  std::array<std::set<Depth>, cost::kTransferKindCount> dones_;
  std::set<std::pair<double, size_t>> starts_;  // (covered at, index)
  std::set<Depth> compute_;
  std::array<int64_t, cost::kTransferKindCount> open_{};
  int64_t over_limit_ = 0;
};

// The estimated time of `order` alone, from idle streams.
double EstimateOrder(const std::vector<const Instruction*>& order, const cost::CostModel& model,
                     const ir::DeviceGrid& grid, const cost::ComputeTimes& compute,
                     cost::TransferTimes& transfers) {
  cost::Timeline timeline(model, grid, compute, transfers);
  for (const Instruction* instruction : order) timeline.Run(*instruction);
  return timeline.now();
}

double EstimateAlone(const ir::Computation& computation, const cost::CostModel& model,
                     const ir::DeviceGrid& grid, const cost::ComputeTimes& compute,
                     cost::TransferTimes& transfers) {
  cost::Timeline timeline(model, grid, compute, transfers);
  timeline.RunComputation(computation);
  return timeline.now();
}

}  // namespace

Expected<bool> Schedule::Run(ir::Module& module) {
  explanation_.clear();
  LOOM_ASSIGN_OR_RETURN(const ir::DeviceGrid grid, ir::DeviceGridOf(module, options_.grid));
  // What async ops and fusions call is not a sequence of its own to order.
  std::unordered_set<const ir::Computation*> skipped;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      const ir::Opcode op = instruction->opcode();
      if (op == ir::Opcode::kAsyncStart || op == ir::Opcode::kAsyncUpdate ||
          op == ir::Opcode::kAsyncDone || op == ir::Opcode::kFusion) {
        for (const ir::Computation* called : instruction->called_computations()) {
          skipped.insert(called);
        }
      }
    }
  }
  bool changed = !module.is_scheduled();
  // Every transfer priced once for all the replays below (the order changes,
  // the instructions do not).
  cost::TransferTimes prices(model_, grid);
  // And every computation's fusion plan made once (the order changes, the
  // data flow does not): a while's replay runs its body's too.
  const cost::ComputeTimes compute(model_);
  // Callees first, so that a while's time reflects its body's new schedule.
  for (ir::Computation* computation : module.PostOrder()) {
    if (skipped.count(computation)) continue;
    const double before = EstimateAlone(*computation, model_, grid, compute, prices);
    LOOM_ASSIGN_OR_RETURN(const Graph graph, BuildGraph(*computation));
    struct Candidate {
      std::string_view name;
      std::vector<const Instruction*> order;
      double estimate = 0;
      int64_t over_limit = 0;
    };
    std::vector<Candidate> candidates;
    if (options_.order != ScheduleOrder::kBottomUp) {
      TopDownScheduler scheduler(graph, model_, grid, options_, compute, prices);
      LOOM_ASSIGN_OR_RETURN(std::vector<const Instruction*> order, scheduler.Run());
      candidates.push_back({"top-down", std::move(order), 0, scheduler.over_limit()});
    }
    if (options_.order != ScheduleOrder::kTopDown) {
      BottomUpScheduler scheduler(graph, model_, grid, options_, compute, prices);
      LOOM_ASSIGN_OR_RETURN(std::vector<const Instruction*> order, scheduler.Run());
      candidates.push_back({"bottom-up", std::move(order), 0, scheduler.over_limit()});
    }
    for (Candidate& candidate : candidates) {
      candidate.estimate = EstimateOrder(candidate.order, model_, grid, compute, prices);
    }
    // The faster; a tie keeps top-down.
    const Candidate& chosen = *std::min_element(
        candidates.begin(), candidates.end(),
        [](const Candidate& a, const Candidate& b) { return a.estimate < b.estimate; });
    const std::vector<const Instruction*>& order = chosen.order;
    bool same = true;
    for (size_t i = 0; i < order.size() && same; ++i) {
      same = order[i] == computation->instructions()[i].get();
    }
    if (!same) {
      if (!computation->ReorderInstructions(order)) {
        return Error{fmt::format("schedule: internal error reordering %{}", computation->name())};
      }
      changed = true;
    }
    const bool transfers =
        std::any_of(order.begin(), order.end(), [](const Instruction* instruction) {
          return cost::TransferRoleOf(*instruction) != TransferRole::kNone;
        });
    if (same && !transfers) continue;  // reducers and the like: nothing to say
    const double after = EstimateAlone(*computation, model_, grid, compute, prices);
    std::string line = fmt::format(
        "%{}: {} instructions, {}; estimated {} -> {}", computation->name(), order.size(),
        same ? "order kept" : "reordered", FormatSeconds(before), FormatSeconds(after));
    if (candidates.size() > 1) {
      line +=
          fmt::format(" ({}; top-down {}, bottom-up {})", chosen.name,
                      FormatSeconds(candidates[0].estimate), FormatSeconds(candidates[1].estimate));
    } else {
      line += fmt::format(" ({})", chosen.name);
    }
    if (chosen.over_limit > 0) {
      line +=
          fmt::format(" ({} transfer(s) opened past the in-flight limit: nothing else was ready)",
                      chosen.over_limit);
    }
    explanation_.push_back(std::move(line));
  }
  module.set_is_scheduled(true);
  return changed;
}

}  // namespace loom::pass
