// Kernels that move elements without arithmetic: broadcast, transpose,
// reverse, slices, updates, concatenation, padding, iota. All of them are one
// strided copy: every destination element (in row-major order of some index
// space) comes from a source element at a linear combination of the same
// index. Adjacent dimensions that are contiguous on both sides merge, and the
// innermost run becomes a memcpy (stride 1 on both sides), a fill (source
// stride 0, a broadcast) or a typed gather loop.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "exec/cpu/kernels.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"

namespace loom::exec::cpu {

std::vector<int64_t> RowMajorStrides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * dims[d + 1];
  }
  return strides;
}

namespace {

using ir::PrimitiveType;

// An index space and where each index lives on both sides, in elements.
struct CopyPlan {
  std::vector<int64_t> dims;
  std::vector<int64_t> src_strides;
  std::vector<int64_t> dst_strides;
};

// Drops dimensions of size 1 and merges a dimension into its inner
// neighbour when both sides are contiguous across them.
CopyPlan Simplify(const CopyPlan& plan) {
  CopyPlan out;
  for (size_t d = 0; d < plan.dims.size(); ++d) {
    if (plan.dims[d] == 1) continue;
    out.dims.push_back(plan.dims[d]);
    out.src_strides.push_back(plan.src_strides[d]);
    out.dst_strides.push_back(plan.dst_strides[d]);
  }
  CopyPlan merged;
  for (size_t d = 0; d < out.dims.size(); ++d) {
    if (!merged.dims.empty()) {
      const size_t last = merged.dims.size() - 1;
      if (merged.src_strides[last] == out.src_strides[d] * out.dims[d] &&
          merged.dst_strides[last] == out.dst_strides[d] * out.dims[d]) {
        merged.dims[last] *= out.dims[d];
        merged.src_strides[last] = out.src_strides[d];
        merged.dst_strides[last] = out.dst_strides[d];
        continue;
      }
    }
    merged.dims.push_back(out.dims[d]);
    merged.src_strides.push_back(out.src_strides[d]);
    merged.dst_strides.push_back(out.dst_strides[d]);
  }
  return merged;
}

template <typename T>
void InnerRun(std::byte* dst, int64_t dst_stride, const std::byte* src, int64_t src_stride,
              int64_t n) {
  auto* d = reinterpret_cast<T*>(dst);
  const auto* s = reinterpret_cast<const T*>(src);
  if (src_stride == 0) {
    const T value = *s;
    if (dst_stride == 1) {
      std::fill_n(d, n, value);
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = value;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) d[i * dst_stride] = s[i * src_stride];
}

void Run(std::byte* dst, int64_t dst_stride, const std::byte* src, int64_t src_stride, int64_t n,
         int64_t element_bytes) {
  if (src_stride == 1 && dst_stride == 1) {
    std::memmove(dst, src, static_cast<size_t>(n * element_bytes));
    return;
  }
  switch (element_bytes) {
    case 1:
      return InnerRun<uint8_t>(dst, dst_stride, src, src_stride, n);
    case 2:
      return InnerRun<uint16_t>(dst, dst_stride, src, src_stride, n);
    case 4:
      return InnerRun<uint32_t>(dst, dst_stride, src, src_stride, n);
    default:
      return InnerRun<uint64_t>(dst, dst_stride, src, src_stride, n);
  }
}

// A 2-D transpose in tiles, so that both sides stay in cache.
void TiledTranspose(std::byte* dst, const CopyPlan& plan, const std::byte* src,
                    int64_t element_bytes) {
  constexpr int64_t kTile = 32;
  const int64_t rows = plan.dims[0], cols = plan.dims[1];
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r_end = std::min(rows, r0 + kTile), c_end = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r_end; ++r) {
        Run(dst + (r * plan.dst_strides[0] + c0 * plan.dst_strides[1]) * element_bytes,
            plan.dst_strides[1],
            src + (r * plan.src_strides[0] + c0 * plan.src_strides[1]) * element_bytes,
            plan.src_strides[1], c_end - c0, element_bytes);
      }
    }
  }
}

void StridedCopy(std::byte* dst, const std::byte* src, const CopyPlan& raw, int64_t element_bytes) {
  for (int64_t size : raw.dims) {
    if (size == 0) return;
  }
  const CopyPlan plan = Simplify(raw);
  const int64_t rank = static_cast<int64_t>(plan.dims.size());
  if (rank == 0) {
    std::memmove(dst, src, static_cast<size_t>(element_bytes));
    return;
  }
  if (rank == 2 && plan.src_strides[1] != 1 && plan.src_strides[0] == 1 &&
      plan.dst_strides[1] == 1) {
    TiledTranspose(dst, plan, src, element_bytes);
    return;
  }
  const int64_t inner = plan.dims[rank - 1];
  std::vector<int64_t> index(static_cast<size_t>(rank - 1), 0);
  int64_t src_offset = 0, dst_offset = 0;
  while (true) {
    Run(dst + dst_offset * element_bytes, plan.dst_strides[rank - 1],
        src + src_offset * element_bytes, plan.src_strides[rank - 1], inner, element_bytes);
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      src_offset += plan.src_strides[d];
      dst_offset += plan.dst_strides[d];
      if (++index[d] < plan.dims[d]) break;
      src_offset -= plan.src_strides[d] * plan.dims[d];
      dst_offset -= plan.dst_strides[d] * plan.dims[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

// The whole of `out`, row-major, from `src` with per-dimension strides.
void GatherInto(const HostArray& out, const std::byte* src, std::vector<int64_t> src_strides) {
  CopyPlan plan{out.shape->dims(), std::move(src_strides), RowMajorStrides(out.shape->dims())};
  StridedCopy(out.data, src, plan, out.element_bytes());
}

// The whole of `update`, row-major, into `dst` with per-dimension strides.
void ScatterFrom(std::byte* dst, std::vector<int64_t> dst_strides, const HostArray& update) {
  CopyPlan plan{update.shape->dims(), RowMajorStrides(update.shape->dims()),
                std::move(dst_strides)};
  StridedCopy(dst, update.data, plan, update.element_bytes());
}

void Fill(const HostArray& out, const std::byte* value) {
  CopyPlan plan{{out.elements()}, {0}, {1}};
  StridedCopy(out.data, value, plan, out.element_bytes());
}

}  // namespace

Status Broadcast(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  const std::vector<int64_t> dims = op.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (static_cast<int64_t>(dims.size()) != x.shape->rank()) {
    return KernelError(op, "broadcast dimensions do not match the operand's rank");
  }
  const std::vector<int64_t> operand_strides = RowMajorStrides(x.shape->dims());
  std::vector<int64_t> src_strides(static_cast<size_t>(out.shape->rank()), 0);
  for (size_t k = 0; k < dims.size(); ++k) {
    if (dims[k] < 0 || dims[k] >= out.shape->rank()) {
      return KernelError(op, "broadcast dimension out of range");
    }
    src_strides[static_cast<size_t>(dims[k])] = operand_strides[k];
  }
  GatherInto(out, x.data, std::move(src_strides));
  return OkStatus();
}

Status Transpose(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  const std::vector<int64_t> perm = op.attrs().dimensions.value_or(std::vector<int64_t>{});
  if (static_cast<int64_t>(perm.size()) != x.shape->rank()) {
    return KernelError(op, "transpose dimensions do not match the operand's rank");
  }
  const std::vector<int64_t> operand_strides = RowMajorStrides(x.shape->dims());
  std::vector<int64_t> src_strides(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) src_strides[k] = operand_strides[perm[k]];
  GatherInto(out, x.data, std::move(src_strides));
  return OkStatus();
}

Status Reverse(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  std::vector<int64_t> strides = RowMajorStrides(x.shape->dims());
  int64_t base = 0;
  for (int64_t d : op.attrs().dimensions.value_or(std::vector<int64_t>{})) {
    if (d < 0 || d >= x.shape->rank()) return KernelError(op, "reverse dimension out of range");
    base += (x.shape->dim(d) - 1) * strides[d];
    strides[d] = -strides[d];
  }
  GatherInto(out, x.data + base * x.element_bytes(), std::move(strides));
  return OkStatus();
}

Status Slice(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  if (!op.attrs().slice || static_cast<int64_t>(op.attrs().slice->size()) != x.shape->rank()) {
    return KernelError(op, "slice without one slice={...} entry per dimension");
  }
  const std::vector<ir::SliceDim>& slice = *op.attrs().slice;
  std::vector<int64_t> strides = RowMajorStrides(x.shape->dims());
  int64_t base = 0;
  for (size_t d = 0; d < slice.size(); ++d) {
    base += slice[d].start * strides[d];
    strides[d] *= slice[d].stride;
  }
  GatherInto(out, x.data + base * x.element_bytes(), std::move(strides));
  return OkStatus();
}

Expected<std::vector<int64_t>> ClampedStarts(const ir::Instruction& op,
                                             std::span<const HostArray> operands, int64_t first,
                                             const std::vector<int64_t>& sizes) {
  const auto& dims = operands[0].shape->dims();
  if (static_cast<int64_t>(operands.size()) - first != static_cast<int64_t>(dims.size()) ||
      sizes.size() != dims.size()) {
    return KernelError(op, "expected one start index per dimension");
  }
  std::vector<int64_t> starts(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    const HostArray& index = operands[first + static_cast<int64_t>(d)];
    if (index.shape->IsTuple() || index.elements() != 1) {
      return KernelError(op, "start index is not a scalar");
    }
    const int64_t start = LoadInt(index.data, index.type(), 0);
    const int64_t limit = dims[d] - sizes[d];
    if (limit < 0) return KernelError(op, "slice is larger than its operand");
    // Unsigned indices above 2^63 read as negative; they clamp high in XLA.
    const bool huge_unsigned = scalar::IsUnsignedLike(index.type()) && start < 0;
    starts[d] = huge_unsigned ? limit : std::clamp<int64_t>(start, 0, limit);
  }
  return starts;
}

Status DynamicSlice(const ir::Instruction& op, std::span<const HostArray> operands,
                    const HostArray& out) {
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                        ClampedStarts(op, operands, 1, out.shape->dims()));
  const HostArray& x = operands[0];
  const std::vector<int64_t> strides = RowMajorStrides(x.shape->dims());
  int64_t base = 0;
  for (size_t d = 0; d < starts.size(); ++d) base += starts[d] * strides[d];
  GatherInto(out, x.data + base * x.element_bytes(), strides);
  return OkStatus();
}

Status DynamicUpdateSlice(const ir::Instruction& op, std::span<const HostArray> operands,
                          const HostArray& out) {
  if (operands.size() < 2) return KernelError(op, "dynamic-update-slice needs an update");
  const HostArray& x = operands[0];
  const HostArray& update = operands[1];
  if (update.shape->rank() != x.shape->rank()) return KernelError(op, "update rank differs");
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> starts,
                        ClampedStarts(op, operands, 2, update.shape->dims()));
  if (out.data != x.data) std::memcpy(out.data, x.data, static_cast<size_t>(out.bytes()));
  const std::vector<int64_t> strides = RowMajorStrides(out.shape->dims());
  int64_t base = 0;
  for (size_t d = 0; d < starts.size(); ++d) base += starts[d] * strides[d];
  ScatterFrom(out.data + base * out.element_bytes(), strides, update);
  return OkStatus();
}

Status Concatenate(const ir::Instruction& op, std::span<const HostArray> operands,
                   const HostArray& out) {
  const auto& dims_attr = op.attrs().dimensions;
  if (!dims_attr || dims_attr->size() != 1)
    return KernelError(op, "concatenate needs dimensions={d}");
  const int64_t axis = dims_attr->front();
  if (axis < 0 || axis >= out.shape->rank())
    return KernelError(op, "concatenate axis out of range");
  const std::vector<int64_t> strides = RowMajorStrides(out.shape->dims());
  int64_t offset = 0;
  for (const HostArray& part : operands) {
    ScatterFrom(out.data + offset * strides[axis] * out.element_bytes(), strides, part);
    offset += part.shape->dim(axis);
  }
  return OkStatus();
}

Status Pad(const ir::Instruction& op, const HostArray& x, const HostArray& padding_value,
           const HostArray& out) {
  if (!op.attrs().padding || static_cast<int64_t>(op.attrs().padding->size()) != x.shape->rank()) {
    return KernelError(op, "pad without one padding entry per dimension");
  }
  const std::vector<ir::PadDim>& padding = *op.attrs().padding;
  Fill(out, padding_value.data);
  // Operand element i lands at low + i * (interior + 1); negative low or high
  // padding cuts elements off: only those that land inside are copied.
  const std::vector<int64_t> out_strides = RowMajorStrides(out.shape->dims());
  const std::vector<int64_t> in_strides = RowMajorStrides(x.shape->dims());
  CopyPlan plan;
  int64_t src_base = 0, dst_base = 0;
  for (size_t d = 0; d < padding.size(); ++d) {
    const int64_t step = padding[d].interior + 1;
    const int64_t low = padding[d].low;
    const int64_t size = x.shape->dim(static_cast<int64_t>(d));
    const int64_t out_size = out.shape->dim(static_cast<int64_t>(d));
    // First i with low + i * step >= 0, and one past the last with < out_size.
    const int64_t begin = low >= 0 ? 0 : (-low + step - 1) / step;
    const int64_t end =
        std::min(size, out_size - low <= 0 ? 0 : (out_size - low + step - 1) / step);
    if (end <= begin) return OkStatus();
    plan.dims.push_back(end - begin);
    plan.src_strides.push_back(in_strides[d]);
    plan.dst_strides.push_back(out_strides[d] * step);
    src_base += begin * in_strides[d];
    dst_base += (low + begin * step) * out_strides[d];
  }
  StridedCopy(out.data + dst_base * out.element_bytes(), x.data + src_base * x.element_bytes(),
              plan, out.element_bytes());
  return OkStatus();
}

Status Iota(const ir::Instruction& op, const HostArray& out) {
  const int64_t dimension = op.attrs().iota_dimension.value_or(0);
  const int64_t rank = out.shape->rank();
  if (dimension < 0 || dimension >= std::max<int64_t>(rank, 1)) {
    return KernelError(op, "iota_dimension out of range");
  }
  const int64_t size = rank == 0 ? 1 : out.shape->dim(dimension);
  int64_t inner = 1;
  for (int64_t d = dimension + 1; d < rank; ++d) inner *= out.shape->dim(d);
  const PrimitiveType type = out.type();
  for (int64_t i = 0; i < out.elements(); ++i) {
    StoreInt(out.data, type, i, rank == 0 ? 0 : (i / inner) % size);
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
