// reduce with a one-op reducer. Every result element starts at the init
// value and folds its inputs in row-major order of the input, one rounding to
// the result type per step, as the reference does; the loops walk the input
// once in that order. Where the innermost dimension is kept, a run of
// results each takes one more input (vectorisable); where it is reduced, one
// result takes a run of inputs.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec/cpu/float_formats.h"
#include "exec/cpu/kernels.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"

namespace loom::exec::cpu {
namespace {

using ir::Opcode;
using ir::PrimitiveType;

// The input's index space, with each index's place in the input and in the
// result (0 along reduced dimensions), merged where contiguous on both sides.
struct ReducePlan {
  std::vector<int64_t> dims, in_strides, out_strides;
};

ReducePlan PlanReduce(const ir::Shape& input, const std::vector<int64_t>& reduced) {
  const int64_t rank = input.rank();
  std::vector<int64_t> in_strides(static_cast<size_t>(rank), 1), out_strides(rank, 0);
  for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * input.dim(d + 1);
  int64_t out_stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    if (std::find(reduced.begin(), reduced.end(), d) != reduced.end()) continue;
    out_strides[d] = out_stride;
    out_stride *= input.dim(d);
  }
  ReducePlan plan;
  for (int64_t d = 0; d < rank; ++d) {
    if (input.dim(d) == 1) continue;
    if (!plan.dims.empty() && plan.in_strides.back() == in_strides[d] * input.dim(d) &&
        plan.out_strides.back() == out_strides[d] * input.dim(d)) {
      plan.dims.back() *= input.dim(d);
      plan.in_strides.back() = in_strides[d];
      plan.out_strides.back() = out_strides[d];
      continue;
    }
    plan.dims.push_back(input.dim(d));
    plan.in_strides.push_back(in_strides[d]);
    plan.out_strides.push_back(out_strides[d]);
  }
  return plan;
}

// Calls run(in_offset, out_offset, n, out_step) for every innermost run of
// the input in row-major order (out_step 0: the run reduces into one result).
template <typename RunFn>
void ForEachRun(const ReducePlan& plan, RunFn&& run) {
  const int64_t rank = static_cast<int64_t>(plan.dims.size());
  if (rank == 0) {
    run(0, 0, 1, 0);
    return;
  }
  for (int64_t size : plan.dims) {
    if (size == 0) return;
  }
  std::vector<int64_t> index(static_cast<size_t>(rank - 1), 0);
  int64_t in = 0, out = 0;
  while (true) {
    run(in, out, plan.dims[rank - 1], plan.out_strides[rank - 1]);
    int64_t d = rank - 2;
    for (; d >= 0; --d) {
      in += plan.in_strides[d];
      out += plan.out_strides[d];
      if (++index[d] < plan.dims[d]) break;
      in -= plan.in_strides[d] * plan.dims[d];
      out -= plan.out_strides[d] * plan.dims[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

struct F32Acc {
  using Storage = float;
  static float Load(float v) { return v; }
  static float Store(float v) { return v; }
  static float NaN() { return std::bit_cast<float>(0x7fc00000u); }
};
struct F64Acc {
  using Storage = double;
  static double Load(double v) { return v; }
  static double Store(double v) { return v; }
  static double NaN() { return std::numeric_limits<double>::quiet_NaN(); }
};
struct Bf16Acc {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return Bf16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToBf16(v); }
  static uint16_t NaN() { return 0x7fc0; }
};
struct F16Acc {
  using Storage = uint16_t;
  static float Load(uint16_t v) { return F16ToFloat(v); }
  static uint16_t Store(float v) { return FloatToF16(v); }
  static uint16_t NaN() { return 0x7e00; }
};

template <typename F, typename Op>
void FoldRuns(const ReducePlan& plan, const HostArray& x, const HostArray& out, Op op) {
  using S = typename F::Storage;
  const S* in = x.as<S>();
  S* result = out.as<S>();
  ForEachRun(plan, [&](int64_t i, int64_t o, int64_t n, int64_t out_step) {
    if (out_step == 0) {
      S acc = result[o];
      for (int64_t k = 0; k < n; ++k) acc = F::Store(op(F::Load(acc), F::Load(in[i + k])));
      result[o] = acc;
      return;
    }
    for (int64_t k = 0; k < n; ++k) {
      result[o + k * out_step] =
          F::Store(op(F::Load(result[o + k * out_step]), F::Load(in[i + k])));
    }
  });
}

template <typename F>
bool TypedReduce(Opcode reducer, const ReducePlan& plan, const HostArray& x, const HostArray& out) {
  switch (reducer) {
    case Opcode::kAdd:
      FoldRuns<F>(plan, x, out, [](auto a, auto b) { return a + b; });
      return true;
    case Opcode::kMultiply:
      FoldRuns<F>(plan, x, out, [](auto a, auto b) { return a * b; });
      return true;
    case Opcode::kMaximum:
      FoldRuns<F>(plan, x, out, [](auto a, auto b) {
        return std::isnan(a) || std::isnan(b) ? F::Load(F::NaN()) : std::max(a, b);
      });
      return true;
    case Opcode::kMinimum:
      FoldRuns<F>(plan, x, out, [](auto a, auto b) {
        return std::isnan(a) || std::isnan(b) ? F::Load(F::NaN()) : std::min(a, b);
      });
      return true;
    default:
      return false;
  }
}

// Element by element through exec/scalar_ops.h: integers, pred, f8.
bool GenericReduce(Opcode reducer, const ReducePlan& plan, const HostArray& x,
                   const HostArray& out) {
  const PrimitiveType type = x.type();
  const bool floating = ir::IsFloatingPoint(type);
  bool ok = true;
  ForEachRun(plan, [&](int64_t i, int64_t o, int64_t n, int64_t out_step) {
    for (int64_t k = 0; k < n && ok; ++k) {
      const int64_t at = o + k * out_step;
      if (floating) {
        const auto value = scalar::BinaryFloat(reducer, LoadDouble(out.data, type, at),
                                               LoadDouble(x.data, type, i + k));
        if (!value)
          ok = false;
        else
          StoreDouble(out.data, type, at, *value);
      } else {
        const auto value = scalar::BinaryInteger(reducer, LoadInt(out.data, type, at),
                                                 LoadInt(x.data, type, i + k), type);
        if (!value)
          ok = false;
        else
          StoreInt(out.data, type, at, *value);
      }
    }
  });
  return ok;
}

}  // namespace

Status Reduce(const ir::Instruction& op, Opcode reducer, const HostArray& x, const HostArray& init,
              const HostArray& out) {
  if (x.type() != out.type()) return KernelError(op, "reduce changes the element type");
  const std::vector<int64_t> reduced = op.attrs().dimensions.value_or(std::vector<int64_t>{});
  for (int64_t d : reduced) {
    if (d < 0 || d >= x.shape->rank()) return KernelError(op, "reduced dimension out of range");
  }
  // Every result starts at the init value.
  const int64_t width = out.element_bytes();
  for (int64_t i = 0; i < out.elements(); ++i) std::memcpy(out.data + i * width, init.data, width);
  const ReducePlan plan = PlanReduce(*x.shape, reduced);
  bool done = false;
  switch (x.type()) {
    case PrimitiveType::kF32:
      done = TypedReduce<F32Acc>(reducer, plan, x, out);
      break;
    case PrimitiveType::kF64:
      done = TypedReduce<F64Acc>(reducer, plan, x, out);
      break;
    case PrimitiveType::kBF16:
      done = TypedReduce<Bf16Acc>(reducer, plan, x, out);
      break;
    case PrimitiveType::kF16:
      done = TypedReduce<F16Acc>(reducer, plan, x, out);
      break;
    default:
      break;
  }
  if (!done && !GenericReduce(reducer, plan, x, out)) {
    return KernelError(op, fmt::format("reducer {} does not apply to {}", ir::OpcodeName(reducer),
                                       ir::PrimitiveTypeName(x.type())));
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
