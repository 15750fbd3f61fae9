// gather and scatter on host arrays (ir/gather_scatter.h says what they
// mean): one pass over the index vectors, each window copied or combined
// a contiguous run at a time where the innermost dimension is a window
// dimension of both sides, as an embedding's rows are.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "exec/cpu/kernels.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"
#include "ir/gather_scatter.h"
#include "ir/reduction.h"

namespace loom::exec::cpu {
namespace {

bool Contains(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

// How one window is walked: over its dimensions (those of the result of a
// gather, or of the updates of a scatter, that `window_dims` names), each
// also walking its operand dimension; the innermost one is a run of
// contiguous elements on both sides where both sides' last dimension is
// it.
struct WindowWalk {
  std::vector<int64_t> sizes;            // per window dimension; the run's counts 1
  std::vector<int64_t> array_strides;    // in the result or the updates
  std::vector<int64_t> operand_strides;  // in the operand
  int64_t run = 1;
};

WindowWalk WalkOf(const std::vector<int64_t>& array_dims, const std::vector<int64_t>& window_dims,
                  const std::vector<int64_t>& operand_dims, const std::vector<int64_t>& walked) {
  const std::vector<int64_t> array = RowMajorStrides(array_dims);
  const std::vector<int64_t> operand = RowMajorStrides(operand_dims);
  WindowWalk walk;
  for (size_t j = 0; j < window_dims.size(); ++j) {
    const auto dim = static_cast<size_t>(window_dims[j]);
    walk.sizes.push_back(array_dims[dim]);
    walk.array_strides.push_back(array[dim]);
    walk.operand_strides.push_back(operand[static_cast<size_t>(walked[j])]);
  }
  if (!window_dims.empty() && window_dims.back() + 1 == static_cast<int64_t>(array_dims.size()) &&
      walked.back() + 1 == static_cast<int64_t>(operand_dims.size())) {
    walk.run = walk.sizes.back();
    walk.sizes.back() = 1;
  }
  return walk;
}

// Calls visit(array offset, operand offset) at the start of every run of
// the window, in row-major order.
template <typename Visit>
void ForEachRun(const WindowWalk& walk, Visit&& visit) {
  for (int64_t size : walk.sizes) {
    if (size == 0) return;
  }
  if (walk.run == 0) return;
  if (std::all_of(walk.sizes.begin(), walk.sizes.end(), [](int64_t s) { return s == 1; })) {
    visit(int64_t{0}, int64_t{0});  // one run: an embedding's row
    return;
  }
  std::vector<int64_t> index(walk.sizes.size(), 0);
  for (;;) {
    int64_t array = 0, operand = 0;
    for (size_t j = 0; j < index.size(); ++j) {
      array += index[j] * walk.array_strides[j];
      operand += index[j] * walk.operand_strides[j];
    }
    visit(array, operand);
    size_t j = index.size();
    for (; j-- > 0;) {
      if (++index[j] < walk.sizes[j]) break;
      index[j] = 0;
    }
    if (j == static_cast<size_t>(-1)) return;
  }
}

// The offset of each batch position's first element in an array of `dims`
// whose window dimensions are `window_dims`: row-major over the others,
// which run as the indices' batch dimensions do.
std::vector<int64_t> BatchOffsets(const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& window_dims) {
  const std::vector<int64_t> strides = RowMajorStrides(dims);
  std::vector<int64_t> sizes, batch_strides;
  int64_t count = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (Contains(window_dims, static_cast<int64_t>(d))) continue;
    sizes.push_back(dims[d]);
    batch_strides.push_back(strides[d]);
    count *= dims[d];
  }
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t& offset : offsets) {
    offset = 0;
    for (size_t k = 0; k < index.size(); ++k) offset += index[k] * batch_strides[k];
    for (size_t k = index.size(); k-- > 0;) {
      if (++index[k] < sizes[k]) break;
      index[k] = 0;
    }
  }
  return offsets;
}

// Entry k of the index vector of batch element `batch`.
int64_t IndexEntry(const HostArray& indices, const ir::IndexVectors& vectors, int64_t batch,
                   int64_t k) {
  return LoadInt(indices.data, indices.type(),
                 vectors.first_element[static_cast<size_t>(batch)] + k * vectors.vector_stride);
}

}  // namespace

Status Gather(const ir::Instruction& op, const HostArray& operand, const HostArray& indices,
              const HostArray& out) {
  auto dims = ir::GatherDimensionsOf(op);
  if (!dims.ok()) return dims.error();
  const std::vector<int64_t>& operand_dims = operand.shape->dims();
  const std::vector<int64_t>& out_dims = out.shape->dims();
  const std::vector<int64_t> operand_strides = RowMajorStrides(operand_dims);
  const std::vector<int64_t> walked =
      ir::WindowOperandDims(static_cast<int64_t>(operand_dims.size()), dims->UnwalkedOperandDims());
  const WindowWalk walk = WalkOf(out_dims, dims->offset_dims, operand_dims, walked);
  const std::vector<int64_t> bases = BatchOffsets(out_dims, dims->offset_dims);
  const ir::IndexVectors vectors = ir::IndexVectorsOf(*indices.shape, dims->index_vector_dim);
  if (bases.size() != vectors.first_element.size()) {
    return KernelError(op, "the result's batch dimensions are not the indices'");
  }
  const int64_t bytes = operand.element_bytes();
  for (size_t b = 0; b < bases.size(); ++b) {
    int64_t start = 0;  // the clamped slice's first element
    for (int64_t k = 0; k < vectors.length; ++k) {
      const auto d = static_cast<size_t>(dims->start_index_map[static_cast<size_t>(k)]);
      const int64_t limit = operand_dims[d] - dims->slice_sizes[d];
      const int64_t entry = IndexEntry(indices, vectors, static_cast<int64_t>(b), k);
      // Unsigned indices above 2^63 read as negative; they clamp high.
      const bool huge_unsigned = scalar::IsUnsignedLike(indices.type()) && entry < 0;
      start += (huge_unsigned ? limit : std::clamp<int64_t>(entry, 0, limit)) * operand_strides[d];
    }
    for (size_t i = 0; i < dims->operand_batching_dims.size(); ++i) {
      start += vectors.Coordinate(static_cast<int64_t>(b), dims->start_indices_batching_dims[i]) *
               operand_strides[static_cast<size_t>(dims->operand_batching_dims[i])];
    }
    ForEachRun(walk, [&](int64_t to, int64_t from) {
      std::memcpy(out.data + (bases[b] + to) * bytes, operand.data + (start + from) * bytes,
                  static_cast<size_t>(walk.run * bytes));
    });
  }
  return OkStatus();
}

namespace {

// Where a scatter's update windows land: window b (row-major over the
// updates' scatter dimensions, as the index vectors run) starts at update
// element bases[b] and at operand element firsts[b], or is dropped whole
// (-1) where it does not fit.
struct ScatterWindows {
  WindowWalk walk;
  std::vector<int64_t> bases;
  std::vector<int64_t> firsts;
};

Expected<ScatterWindows> ScatterWindowsOf(const ir::Instruction& op, const ir::Shape& operand,
                                          const HostArray& indices, const ir::Shape& updates) {
  auto dims = ir::ScatterDimensionsOf(op);
  if (!dims.ok()) return dims.error();
  const std::vector<int64_t>& operand_dims = operand.dims();
  const std::vector<int64_t>& update_dims = updates.dims();
  const auto rank = static_cast<int64_t>(operand_dims.size());
  const std::vector<int64_t> operand_strides = RowMajorStrides(operand_dims);
  const std::vector<int64_t> walked = ir::WindowOperandDims(rank, dims->UnwalkedOperandDims());
  ScatterWindows windows;
  windows.walk = WalkOf(update_dims, dims->update_window_dims, operand_dims, walked);
  windows.bases = BatchOffsets(update_dims, dims->update_window_dims);
  // The window's extent in each operand dimension: 1 where it is inserted
  // or batching.
  std::vector<int64_t> extent(static_cast<size_t>(rank), 1);
  for (size_t j = 0; j < walked.size(); ++j) {
    extent[static_cast<size_t>(walked[j])] =
        update_dims[static_cast<size_t>(dims->update_window_dims[j])];
  }
  const ir::IndexVectors vectors = ir::IndexVectorsOf(*indices.shape, dims->index_vector_dim);
  if (windows.bases.size() != vectors.first_element.size()) {
    return KernelError(op, "the updates' scatter dimensions are not the indices' batch dimensions");
  }
  std::vector<int64_t> start(static_cast<size_t>(rank));
  for (size_t b = 0; b < windows.bases.size(); ++b) {
    std::fill(start.begin(), start.end(), 0);
    for (int64_t k = 0; k < vectors.length; ++k) {
      const auto d =
          static_cast<size_t>(dims->scatter_dims_to_operand_dims[static_cast<size_t>(k)]);
      start[d] = IndexEntry(indices, vectors, static_cast<int64_t>(b), k);
    }
    for (size_t i = 0; i < dims->input_batching_dims.size(); ++i) {
      start[static_cast<size_t>(dims->input_batching_dims[i])] =
          vectors.Coordinate(static_cast<int64_t>(b), dims->scatter_indices_batching_dims[i]);
    }
    bool fits = true;
    int64_t first = 0;  // the window's first element in the operand
    for (size_t d = 0; d < start.size(); ++d) {
      fits = fits && start[d] >= 0 && start[d] <= operand_dims[d] - extent[d];
      first += start[d] * operand_strides[d];
    }
    windows.firsts.push_back(fits ? first : -1);
  }
  return windows;
}

}  // namespace

bool ScatterRuns(const ir::Instruction& op) {
  if (op.operand_count() != 3) return false;
  const ir::Computation* combiner = op.called("to_apply");
  return combiner != nullptr && (ir::CommutativeBinaryReducer(*combiner).has_value() ||
                                 ir::ReturnsSecondParameter(*combiner));
}

Status ForEachScatterElement(const ir::Instruction& op, const ir::Shape& operand,
                             const HostArray& indices, const ir::Shape& updates,
                             const std::function<Status(int64_t, int64_t)>& visit) {
  LOOM_ASSIGN_OR_RETURN(const ScatterWindows windows,
                        ScatterWindowsOf(op, operand, indices, updates));
  Status status = OkStatus();
  for (size_t b = 0; b < windows.bases.size() && status.ok(); ++b) {
    if (windows.firsts[b] < 0) continue;
    ForEachRun(windows.walk, [&](int64_t from, int64_t to) {
      for (int64_t i = 0; i < windows.walk.run && status.ok(); ++i) {
        status = visit(windows.bases[b] + from + i, windows.firsts[b] + to + i);
      }
    });
  }
  return status;
}

Status Scatter(const ir::Instruction& op, std::span<const HostArray> operands,
               const HostArray& out) {
  if (operands.size() != 3 || !ScatterRuns(op)) {
    return KernelError(op, "scatter needs one operand and a combiner of one binary op");
  }
  const HostArray& operand = operands[0];
  const HostArray& indices = operands[1];
  const HostArray& updates = operands[2];
  LOOM_ASSIGN_OR_RETURN(const ScatterWindows windows,
                        ScatterWindowsOf(op, *operand.shape, indices, *updates.shape));
  if (out.data != operand.data) {
    std::memcpy(out.data, operand.data, static_cast<size_t>(operand.bytes()));
  }
  const std::optional<ir::Opcode> reducer = ir::CommutativeBinaryReducer(*op.called("to_apply"));
  const int64_t run = windows.walk.run;
  const ir::Shape run_shape(operand.type(), {run});
  const int64_t bytes = operand.element_bytes();
  Status status = OkStatus();
  for (size_t b = 0; b < windows.bases.size() && status.ok(); ++b) {
    if (windows.firsts[b] < 0) continue;  // the whole window is dropped
    ForEachRun(windows.walk, [&](int64_t from, int64_t to) {
      if (!status.ok()) return;
      const HostArray target{out.data + (windows.firsts[b] + to) * bytes, &run_shape};
      const HostArray update{updates.data + (windows.bases[b] + from) * bytes, &run_shape};
      if (reducer) {
        status = Combine(*reducer, target, update, target);
      } else {
        std::memmove(target.data, update.data, static_cast<size_t>(run * bytes));
      }
    });
  }
  return status;
}

}  // namespace loom::exec::cpu
