// async-collectives: turns each synchronous collective into XLA's
// asynchronous pair, so that a scheduler (pass/schedule.h) can move the
// start early and the done late and let the transfer overlap compute.
//
// all-gather, all-reduce and collective-permute get their own -start/-done
// opcodes. Before:
//
//   %x.full = f32[8,6] all-gather(f32[2,6] %x), channel_id=1,
//             replica_groups={{0,1,2,3}}, dimensions={0}, use_global_device_ids=true
//   %y = f32[2,6] collective-permute(f32[2,6] %x), channel_id=2,
//        source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
//   %s = f32[2,6] all-reduce(f32[2,6] %x), replica_groups={}, to_apply=%add
//
// after (each start where the collective was, its done right after it):
//
//   %x.full-start = (f32[2,6], f32[8,6]) all-gather-start(%x), dimensions={0},
//                   channel_id=1, replica_groups={{0,1,2,3}}, use_global_device_ids=true
//   %x.full-done = f32[8,6] all-gather-done(%x.full-start)
//   %y-start = (f32[2,6], f32[2,6]) collective-permute-start(%x), channel_id=2,
//              source_target_pairs={{0,1},{1,2},{2,3},{3,0}}
//   %y-done = f32[2,6] collective-permute-done(%y-start)
//   %s-start = f32[2,6] all-reduce-start(%x), replica_groups={}, to_apply=%add
//   %s-done = f32[2,6] all-reduce-done(%s-start)
//
// reduce-scatter and all-to-all have no such opcodes: they take XLA's
// generic form, an async-start/async-done pair calling a new computation
// that holds the collective (with its original name) applied to its
// parameters:
//
//   %r.async (param: f32[8,6]) -> f32[2,6] {
//     %param = f32[8,6] parameter(0)
//     ROOT %r = f32[2,6] reduce-scatter(%param), dimensions={0}, ..., to_apply=%add
//   }
//   ...
//   %r-start = ((f32[8,6]), f32[2,6]) async-start(%p), calls=%r.async
//   %r-done = f32[2,6] async-done(%r-start), calls=%r.async
//
// The start keeps every attribute of the collective but its sharding,
// which describes the result and so goes to the done, with a copy of the
// metadata. (In the generic form the wrapped collective keeps every
// attribute, and the start and done get copies of its metadata.) Control
// predecessors move to the start; an instruction that had the collective
// as a control predecessor gets the done.
//
// Left alone: collectives already asynchronous (and the computations
// async-starts call), collectives in fused computations, the in-place
// collective-permute (four operands and slice sizes), collective-broadcast
// and ragged-all-to-all.
#pragma once

#include <string>
#include <vector>

#include "pass/pass.h"

namespace loom::pass {

// Which kinds of collective to convert (default all).
struct AsyncCollectivesOptions {
  bool all_gather = true;
  bool all_reduce = true;
  bool collective_permute = true;
  bool reduce_scatter = true;
  bool all_to_all = true;
};

class AsyncCollectives : public Pass {
 public:
  explicit AsyncCollectives(AsyncCollectivesOptions options = {}) : options_(options) {}
  std::string_view name() const override { return "async-collectives"; }
  Expected<bool> Run(ir::Module& module) override;
  // One line per collective converted (or left synchronous, with why).
  std::vector<std::string> Explain() const override { return explanation_; }

 private:
  AsyncCollectivesOptions options_;
  std::vector<std::string> explanation_;
};

}  // namespace loom::pass
