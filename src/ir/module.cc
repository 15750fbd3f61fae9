#include "ir/module.h"

#include <algorithm>
#include <functional>
#include <unordered_set>

namespace loom::ir {

Computation* Module::AddComputation(std::unique_ptr<Computation> computation) {
  computation->set_parent(this);
  computations_.push_back(std::move(computation));
  return computations_.back().get();
}

Computation* Module::InsertComputationBefore(std::unique_ptr<Computation> computation,
                                             const Computation* before) {
  computation->set_parent(this);
  auto it = std::find_if(computations_.begin(), computations_.end(),
                         [&](const auto& owned) { return owned.get() == before; });
  return computations_.insert(it, std::move(computation))->get();
}

Computation* Module::FindComputation(std::string_view name) const {
  for (const auto& computation : computations_) {
    if (computation->name() == name) return computation.get();
  }
  return nullptr;
}

int64_t Module::instruction_count() const {
  int64_t count = 0;
  for (const auto& computation : computations_) {
    count += static_cast<int64_t>(computation->instructions().size());
  }
  return count;
}

std::vector<Computation*> Module::PostOrder() const {
  std::vector<Computation*> order;
  std::unordered_set<const Computation*> visited;
  // Iterative DFS so that deeply nested call chains cannot exhaust the stack.
  for (const auto& start : computations_) {
    if (visited.count(start.get())) continue;
    std::vector<std::pair<Computation*, bool>> stack = {{start.get(), false}};
    while (!stack.empty()) {
      auto [computation, expanded] = stack.back();
      stack.pop_back();
      if (expanded) {
        order.push_back(computation);
        continue;
      }
      if (!visited.insert(computation).second) continue;
      stack.push_back({computation, true});
      for (const auto& instruction : computation->instructions()) {
        for (Computation* callee : instruction->called_computations()) {
          if (!visited.count(callee)) stack.push_back({callee, false});
        }
      }
    }
  }
  return order;
}

}  // namespace loom::ir
