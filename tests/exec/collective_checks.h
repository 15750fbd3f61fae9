// The collective checks every backend runs: each device computes its own
// expected result from the deterministic inputs of every device and compares
// it with what the collective gave it. The in-process test runs them on N
// threads; tests/mpi runs the same checks as N MPI processes.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "exec/collectives.h"
#include "ir/attributes.h"

namespace loom::exec::testing {

using ir::PrimitiveType;
using ir::Shape;

// Device d's input: element i is d * 1000 + i (exact in f32, bf16 for small i).
inline Tensor InputOf(int64_t device, const Shape& shape) {
  Tensor tensor = Tensor::Zeros(shape).value();
  for (int64_t i = 0; i < tensor.ElementCount(); ++i) tensor.SetDouble(i, device * 1000.0 + i);
  return tensor;
}

inline Expected<Tensor> Add(const Tensor& a, const Tensor& b) {
  Tensor sum = a;
  for (int64_t i = 0; i < a.ElementCount(); ++i) sum.SetDouble(i, a.GetDouble(i) + b.GetDouble(i));
  return sum;
}

inline const Group& GroupOf(const std::vector<Group>& groups, int64_t device) {
  for (const Group& group : groups) {
    if (std::find(group.begin(), group.end(), device) != group.end()) return group;
  }
  static const Group kNone;
  return kNone;
}

inline int64_t IndexIn(const Group& group, int64_t device) {
  return std::find(group.begin(), group.end(), device) - group.begin();
}

// The group layouts tried on n devices: the whole world, pairs in and out of
// id order, and transposed iota groups where n allows.
inline std::vector<std::vector<Group>> GroupLayouts(int64_t n) {
  std::vector<std::vector<Group>> layouts = {ir::ReplicaGroups().Groups(n)};
  if (n == 4) {
    layouts.push_back({{0, 1}, {2, 3}});
    layouts.push_back({{3, 1}, {0, 2}});  // ring order differs from id order
    layouts.push_back(ir::ReplicaGroups::Iota({2, 2, {2, 2}, {1, 0}}).Groups(4));
  }
  if (n == 6) layouts.push_back(ir::ReplicaGroups::Iota({2, 3, {3, 2}, {1, 0}}).Groups(6));
  if (n == 8) layouts.push_back(ir::ReplicaGroups::Iota({4, 2, {2, 4}, {1, 0}}).Groups(8));
  return layouts;
}

// Runs `collective` and compares with `expected`; "" when they agree.
inline std::string Check(const std::string& what, Expected<PendingPtr> pending,
                         const Tensor& expected) {
  if (!pending.ok()) return what + ": " + pending.error().ToString();
  Expected<Tensor> result = (*pending)->Finish();
  if (!result.ok()) return what + ": " + result.error().ToString();
  if (!result->BitwiseEqual(expected)) return what + ": wrong result " + result->ToString();
  return "";
}

// Every check for comm.size() devices, as this device sees them. Returns the
// failures (empty when all pass) and counts the checks run.
inline std::vector<std::string> RunCollectiveChecks(Communicator& comm, int* checks) {
  const int64_t n = comm.size();
  const int64_t d = comm.rank();
  uint64_t tag = 0;
  std::vector<std::string> failures;
  auto record = [&](std::string failure) {
    ++*checks;
    if (!failure.empty()) failures.push_back(fmt::format("device {}: {}", d, failure));
  };
  for (const std::vector<Group>& groups : GroupLayouts(n)) {
    const Group& group = GroupOf(groups, d);
    const int64_t size = static_cast<int64_t>(group.size());
    const int64_t me = IndexIn(group, d);
    for (int64_t rows : {0, 1, 3}) {  // element counts including 0 and uneven sizes
      const Shape shape(PrimitiveType::kF32, {2, rows, 3});
      std::vector<Tensor> blocks;
      for (int64_t member : group) blocks.push_back(InputOf(member, shape));
      record(Check(fmt::format("all-gather n={} rows={}", n, rows),
                   StartAllGather(comm, tag++, group, InputOf(d, shape), 1),
                   ConcatenateBlocks(blocks, 1).value()));
    }
    for (int64_t per_block : {0, 1, 5}) {
      const Shape shape(PrimitiveType::kF32, {size * per_block, 2});
      Tensor sum = InputOf(group.front(), shape);
      for (size_t i = 1; i < group.size(); ++i) sum = Add(sum, InputOf(group[i], shape)).value();
      record(Check(fmt::format("reduce-scatter n={} block={}", n, per_block),
                   StartReduceScatter(comm, tag++, group, InputOf(d, shape), 0, Add),
                   SliceBlock(sum, 0, me, size).value()));
      record(Check(fmt::format("all-reduce n={} block={}", n, per_block),
                   StartAllReduce(comm, tag++, group, InputOf(d, shape), Add), sum));
    }
    const Shape a2a(PrimitiveType::kS32, {3, size * 2});
    std::vector<Tensor> received;
    for (int64_t member : group) {
      received.push_back(SliceBlock(InputOf(member, a2a), 1, me, size).value());
    }
    record(Check(fmt::format("all-to-all n={}", n),
                 StartAllToAll(comm, tag++, group, InputOf(d, a2a), 1),
                 ConcatenateBlocks(received, 1).value()));
  }
  // A chain that leaves device 0 without a source: it receives zeros.
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (int64_t i = 0; i + 1 < n; ++i) pairs.emplace_back(i, i + 1);
  const Shape shape(PrimitiveType::kBF16, {4});
  record(Check(fmt::format("collective-permute n={}", n),
               StartCollectivePermute(comm, tag++, pairs, InputOf(d, shape)),
               d == 0 ? Tensor::Zeros(shape).value() : InputOf(d - 1, shape)));
  return failures;
}

// The transport's own collectives (MPI's), where the communicator has them:
// all-gather along an inner dimension (staged), all-reduce and
// reduce-scatter of f32 and f64 sums, on every group layout. The inputs are
// small integers, so every order of the sums gives the same bits.
inline std::vector<std::string> RunNativeCollectiveChecks(Communicator& comm, int* checks) {
  std::vector<std::string> failures;
  NativeCollectives* native = comm.native_collectives();
  if (native == nullptr) return failures;
  const int64_t n = comm.size();
  const int64_t d = comm.rank();
  auto record = [&](const std::string& what, const Status& status, const Tensor& got,
                    const Tensor& expected) {
    ++*checks;
    if (!status.ok()) {
      failures.push_back(fmt::format("device {}: {}: {}", d, what, status.error().ToString()));
    } else if (!got.BitwiseEqual(expected)) {
      failures.push_back(fmt::format("device {}: {}: wrong result {}", d, what, got.ToString()));
    }
  };
  for (const std::vector<Group>& groups : GroupLayouts(n)) {
    const Group& group = GroupOf(groups, d);
    const int64_t size = static_cast<int64_t>(group.size());
    const int64_t me = IndexIn(group, d);
    const Shape shape(PrimitiveType::kF32, {2, 3, 3});
    std::vector<Tensor> blocks;
    for (int64_t member : group) blocks.push_back(InputOf(member, shape));
    const Tensor gathered_expected = ConcatenateBlocks(blocks, 1).value();
    Tensor gathered = Tensor::Zeros(gathered_expected.shape()).value();
    const Tensor input = InputOf(d, shape);
    record(fmt::format("native all-gather n={}", n),
           NativeAllGather(*native, groups, group, me, input.bytes(), SlabsOf(shape, 1).value(),
                           gathered.mutable_bytes()),
           gathered, gathered_expected);
    for (PrimitiveType type : {PrimitiveType::kF32, PrimitiveType::kF64}) {
      const Shape rows(type, {size * 2, 3});
      Tensor sum = InputOf(group.front(), rows);
      for (size_t i = 1; i < group.size(); ++i) sum = Add(sum, InputOf(group[i], rows)).value();
      const Tensor mine = InputOf(d, rows);
      Tensor reduced = Tensor::Zeros(rows).value();
      record(fmt::format("native all-reduce {} n={}", ir::PrimitiveTypeName(type), n),
             NativeAllReduceSum(*native, groups, type == PrimitiveType::kF64, mine.bytes(),
                                reduced.mutable_bytes()),
             reduced, sum);
      const Tensor block_expected = SliceBlock(sum, 0, me, size).value();
      Tensor block = Tensor::Zeros(block_expected.shape()).value();
      record(fmt::format("native reduce-scatter {} n={}", ir::PrimitiveTypeName(type), n),
             NativeReduceScatterSum(*native, groups, size, type == PrimitiveType::kF64,
                                    mine.bytes(), SlabsOf(rows, 0).value(), block.mutable_bytes()),
             block, block_expected);
    }
  }
  return failures;
}

}  // namespace loom::exec::testing
