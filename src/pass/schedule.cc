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

class ComputationScheduler {
 public:
  ComputationScheduler(const ir::Computation& computation, const cost::CostModel& model,
                       const ir::DeviceGrid& grid, const ScheduleOptions& options)
      : computation_(computation),
        model_(model),
        grid_(grid),
        options_(options),
        timeline_(model, grid) {}

  Expected<std::vector<const Instruction*>> Run() {
    LOOM_RETURN_IF_ERROR(BuildGraph());
    LOOM_RETURN_IF_ERROR(CriticalPaths());
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
          return Error{fmt::format("schedule: %{} has a dependency cycle", computation_.name())};
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

  Status BuildGraph() {
    const auto& instructions = computation_.instructions();
    nodes_.resize(instructions.size());
    std::unordered_map<const Instruction*, size_t> index;
    for (size_t i = 0; i < instructions.size(); ++i) index[instructions[i].get()] = i;
    for (size_t i = 0; i < instructions.size(); ++i) {
      Node& node = nodes_[i];
      node.instruction = instructions[i].get();
      node.role = cost::TransferRoleOf(*node.instruction);
      if (std::optional<cost::TransferKind> kind = cost::TransferKindOf(*node.instruction)) {
        node.kind = static_cast<int>(*kind);
      }
      std::vector<size_t> predecessors;
      for (const Instruction* operand : node.instruction->operands()) {
        auto it = index.find(operand);
        if (it == index.end()) {
          return Error{fmt::format("schedule: %{} uses %{}, which is not in %{}",
                                   node.instruction->name(), operand->name(), computation_.name())};
        }
        predecessors.push_back(it->second);
      }
      for (const Instruction* predecessor : node.instruction->attrs().control_predecessors) {
        auto it = index.find(predecessor);
        if (it != index.end()) predecessors.push_back(it->second);
      }
      std::sort(predecessors.begin(), predecessors.end());
      predecessors.erase(std::unique(predecessors.begin(), predecessors.end()), predecessors.end());
      node.waiting = static_cast<int64_t>(predecessors.size());
      for (size_t p : predecessors) nodes_[p].successors.push_back(i);
    }
    const Instruction* root = computation_.root();
    if (root && root->opcode() != ir::Opcode::kParameter && index.count(root) &&
        nodes_[index[root]].successors.empty()) {
      root_ = index[root];
    }
    return OkStatus();
  }

  // The longest path from each instruction to the end of the computation,
  // the instruction included.
  Status CriticalPaths() {
    std::vector<int64_t> waiting(nodes_.size());
    std::vector<size_t> topological;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      waiting[i] = nodes_[i].waiting;
      if (waiting[i] == 0) topological.push_back(i);
    }
    for (size_t at = 0; at < topological.size(); ++at) {
      for (size_t s : nodes_[topological[at]].successors) {
        if (--waiting[s] == 0) topological.push_back(s);
      }
    }
    if (topological.size() != nodes_.size()) {
      return Error{fmt::format("schedule: %{} has a dependency cycle", computation_.name())};
    }
    for (auto it = topological.rbegin(); it != topological.rend(); ++it) {
      Node& node = nodes_[*it];
      double longest = 0;
      for (size_t s : node.successors) longest = std::max(longest, nodes_[s].critical_path);
      node.critical_path = cost::IsolatedSeconds(*node.instruction, model_, grid_) + longest;
    }
    return OkStatus();
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
  size_t Take(const Rank& rank) {
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

  const ir::Computation& computation_;
  const cost::CostModel& model_;
  const ir::DeviceGrid& grid_;
  const ScheduleOptions& options_;
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

double EstimateAlone(const ir::Computation& computation, const cost::CostModel& model,
                     const ir::DeviceGrid& grid) {
  cost::Timeline timeline(model, grid);
  timeline.RunComputation(computation);
  return timeline.now();
}

}  // namespace

Expected<bool> Schedule::Run(ir::Module& module) {
  explanation_.clear();
  ir::DeviceGrid grid;
  if (options_.grid) {
    grid = *options_.grid;
  } else {
    LOOM_ASSIGN_OR_RETURN(grid, ir::DeviceGridOf(module));
  }
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
  // Callees first, so that a while's time reflects its body's new schedule.
  for (ir::Computation* computation : module.PostOrder()) {
    if (skipped.count(computation)) continue;
    const double before = EstimateAlone(*computation, model_, grid);
    ComputationScheduler scheduler(*computation, model_, grid, options_);
    LOOM_ASSIGN_OR_RETURN(const std::vector<const Instruction*> order, scheduler.Run());
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
    const double after = EstimateAlone(*computation, model_, grid);
    std::string line = fmt::format(
        "%{}: {} instructions, {}; estimated {} -> {}", computation->name(), order.size(),
        same ? "order kept" : "reordered", FormatSeconds(before), FormatSeconds(after));
    if (scheduler.over_limit() > 0) {
      line += fmt::format(" ({} start(s) placed past the in-flight limit: nothing else was ready)",
                          scheduler.over_limit());
    }
    explanation_.push_back(std::move(line));
  }
  module.set_is_scheduled(true);
  return changed;
}

}  // namespace loom::pass
