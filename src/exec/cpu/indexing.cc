// gather and scatter on host arrays (ir/gather_scatter.h says what they
// mean): one pass over the index vectors, each window copied or combined
// a contiguous run at a time where the innermost dimension is a window
// dimension of both sides, as an embedding's rows are.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "exec/cpu/kernels.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"
#include "ir/gather_scatter.h"
#include "ir/reduction.h"

namespace loom::exec::cpu {
namespace {

std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) strides[d - 1] = strides[d] * dims[d];
  return strides;
}

bool Contains(const std::vector<int64_t>& dims, int64_t d) {
  return std::find(dims.begin(), dims.end(), d) != dims.end();
}

// Calls visit(index) for every index of `sizes`, row-major, the last
// dimension left to the caller (it is the run): `sizes` without it.
template <typename Visit>
void ForEachRunStart(const std::vector<int64_t>& sizes, Visit&& visit) {
  for (int64_t size : sizes) {
    if (size == 0) return;
  }
  std::vector<int64_t> index(sizes.size(), 0);
  for (;;) {
    visit(index);
    size_t d = sizes.size();
    for (; d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
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
  if (!dims->operand_batching_dims.empty() || !dims->start_indices_batching_dims.empty()) {
    return KernelError(op, "gather with batching dimensions is not supported");
  }
  const std::vector<int64_t>& operand_dims = operand.shape->dims();
  const std::vector<int64_t>& out_dims = out.shape->dims();
  const auto rank = static_cast<int64_t>(operand_dims.size());
  const ir::IndexVectors vectors = ir::IndexVectorsOf(*indices.shape, dims->index_vector_dim);
  // The operand dimension each offset dimension of the output walks.
  std::vector<int64_t> window_of_offset;
  for (int64_t d = 0; d < rank; ++d) {
    if (!Contains(dims->collapsed_slice_dims, d)) window_of_offset.push_back(d);
  }
  std::vector<int64_t> batch_out_dims;
  for (int64_t i = 0; i < static_cast<int64_t>(out_dims.size()); ++i) {
    if (!Contains(dims->offset_dims, i)) batch_out_dims.push_back(i);
  }
  const std::vector<int64_t> operand_strides = Strides(operand_dims);
  const std::vector<int64_t> out_strides = Strides(out_dims);
  // A run: the operand's last dimension, where it is the output's last.
  const bool runs = rank > 0 && !dims->offset_dims.empty() &&
                    dims->offset_dims.back() == static_cast<int64_t>(out_dims.size()) - 1 &&
                    window_of_offset.back() == rank - 1;
  const int64_t run = runs ? dims->slice_sizes.back() : 1;
  std::vector<int64_t> window = dims->slice_sizes;
  if (runs) window.back() = 1;
  const int64_t bytes = operand.element_bytes();
  const auto batches = static_cast<int64_t>(vectors.first_element.size());
  std::vector<int64_t> batch_index(vectors.batch_dims.size(), 0);
  std::vector<int64_t> start(static_cast<size_t>(rank), 0);
  for (int64_t b = 0; b < batches; ++b) {
    std::fill(start.begin(), start.end(), 0);
    for (int64_t k = 0; k < vectors.length; ++k) {
      const int64_t d = dims->start_index_map[static_cast<size_t>(k)];
      const int64_t limit = operand_dims[static_cast<size_t>(d)] - dims->slice_sizes[d];
      const int64_t entry = IndexEntry(indices, vectors, b, k);
      // Unsigned indices above 2^63 read as negative; they clamp high.
      const bool huge_unsigned = scalar::IsUnsignedLike(indices.type()) && entry < 0;
      start[static_cast<size_t>(d)] = huge_unsigned ? limit : std::clamp<int64_t>(entry, 0, limit);
    }
    int64_t out_base = 0;
    for (size_t k = 0; k < batch_out_dims.size(); ++k) {
      out_base += batch_index[k] * out_strides[static_cast<size_t>(batch_out_dims[k])];
    }
    ForEachRunStart(window, [&](const std::vector<int64_t>& w) {
      int64_t from = 0, to = out_base;
      for (int64_t d = 0; d < rank; ++d) from += (start[d] + w[d]) * operand_strides[d];
      for (size_t j = 0; j < window_of_offset.size(); ++j) {
        to += w[static_cast<size_t>(window_of_offset[j])] *
              out_strides[static_cast<size_t>(dims->offset_dims[j])];
      }
      std::memcpy(out.data + to * bytes, operand.data + from * bytes,
                  static_cast<size_t>(run * bytes));
    });
    for (size_t d = batch_index.size(); d-- > 0;) {
      if (++batch_index[d] < vectors.batch_dims[d]) break;
      batch_index[d] = 0;
    }
  }
  return OkStatus();
}

bool ScatterRuns(const ir::Instruction& op) {
  if (op.operand_count() != 3) return false;
  const ir::Computation* combiner = op.called("to_apply");
  return combiner != nullptr && (ir::CommutativeBinaryReducer(*combiner).has_value() ||
                                 ir::ReturnsSecondParameter(*combiner));
}

Status Scatter(const ir::Instruction& op, std::span<const HostArray> operands,
               const HostArray& out) {
  if (operands.size() != 3 || !ScatterRuns(op)) {
    return KernelError(op, "scatter needs one operand and a combiner of one binary op");
  }
  auto dims = ir::ScatterDimensionsOf(op);
  if (!dims.ok()) return dims.error();
  if (!dims->input_batching_dims.empty() || !dims->scatter_indices_batching_dims.empty()) {
    return KernelError(op, "scatter with batching dimensions is not supported");
  }
  const HostArray& operand = operands[0];
  const HostArray& indices = operands[1];
  const HostArray& updates = operands[2];
  if (out.data != operand.data) {
    std::memcpy(out.data, operand.data, static_cast<size_t>(operand.bytes()));
  }
  const std::optional<ir::Opcode> reducer = ir::CommutativeBinaryReducer(*op.called("to_apply"));
  const std::vector<int64_t>& operand_dims = operand.shape->dims();
  const std::vector<int64_t>& update_dims = updates.shape->dims();
  const auto rank = static_cast<int64_t>(operand_dims.size());
  const ir::IndexVectors vectors = ir::IndexVectorsOf(*indices.shape, dims->index_vector_dim);
  // The operand dimension each update window dimension walks, and the size
  // of the window in every operand dimension.
  std::vector<int64_t> operand_of_window;
  std::vector<int64_t> window_size(static_cast<size_t>(rank), 1);
  for (int64_t d = 0, k = 0; d < rank; ++d) {
    if (Contains(dims->inserted_window_dims, d)) continue;
    operand_of_window.push_back(d);
    window_size[static_cast<size_t>(d)] =
        update_dims[static_cast<size_t>(dims->update_window_dims[static_cast<size_t>(k++)])];
  }
  std::vector<int64_t> scatter_update_dims;
  std::vector<int64_t> window_sizes;  // of the update window dims, in order
  for (int64_t i = 0; i < static_cast<int64_t>(update_dims.size()); ++i) {
    if (Contains(dims->update_window_dims, i)) {
      window_sizes.push_back(update_dims[static_cast<size_t>(i)]);
    } else {
      scatter_update_dims.push_back(i);
    }
  }
  const std::vector<int64_t> operand_strides = Strides(operand_dims);
  const std::vector<int64_t> update_strides = Strides(update_dims);
  const bool runs =
      rank > 0 && !dims->update_window_dims.empty() &&
      dims->update_window_dims.back() == static_cast<int64_t>(update_dims.size()) - 1 &&
      operand_of_window.back() == rank - 1;
  const int64_t run = runs ? window_sizes.back() : 1;
  if (runs) window_sizes.back() = 1;
  const ir::Shape run_shape(operand.type(), {run});
  const int64_t bytes = operand.element_bytes();
  const auto batches = static_cast<int64_t>(vectors.first_element.size());
  std::vector<int64_t> batch_index(vectors.batch_dims.size(), 0);
  std::vector<int64_t> start(static_cast<size_t>(rank), 0);
  Status status = OkStatus();
  for (int64_t b = 0; b < batches && status.ok(); ++b) {
    std::fill(start.begin(), start.end(), 0);
    for (int64_t k = 0; k < vectors.length; ++k) {
      const int64_t d = dims->scatter_dims_to_operand_dims[static_cast<size_t>(k)];
      start[static_cast<size_t>(d)] = IndexEntry(indices, vectors, b, k);
    }
    bool fits = true;
    for (int64_t d = 0; d < rank; ++d) {
      fits = fits && start[d] >= 0 && start[d] <= operand_dims[d] - window_size[d];
    }
    int64_t update_base = 0;
    for (size_t k = 0; k < scatter_update_dims.size(); ++k) {
      update_base += batch_index[k] * update_strides[static_cast<size_t>(scatter_update_dims[k])];
    }
    for (size_t d = batch_index.size(); d-- > 0;) {
      if (++batch_index[d] < vectors.batch_dims[d]) break;
      batch_index[d] = 0;
    }
    if (!fits) continue;  // the whole window is dropped
    ForEachRunStart(window_sizes, [&](const std::vector<int64_t>& w) {
      if (!status.ok()) return;
      int64_t from = update_base, to = 0;
      std::vector<int64_t> at = start;
      for (size_t k = 0; k < w.size(); ++k) {
        from += w[k] * update_strides[static_cast<size_t>(dims->update_window_dims[k])];
        at[static_cast<size_t>(operand_of_window[k])] += w[k];
      }
      for (int64_t d = 0; d < rank; ++d) to += at[d] * operand_strides[d];
      const HostArray target{out.data + to * bytes, &run_shape};
      const HostArray update{updates.data + from * bytes, &run_shape};
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
