// reduce and reduce-window with a one-op reducer. Every result element
// starts at the init value and folds its inputs in row-major order of the
// input (of its window's taps), one rounding to the result type per step,
// as the reference does; reduce's loops walk the input once in that order. Where the innermost
// dimension is kept, a run of results each takes one more input (vectorisable); where it is
// reduced, one result takes a run of inputs.
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "exec/cpu/float_formats.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/simd.h"
#include "exec/scalar_ops.h"
#include "exec/tensor.h"
#include "ir/reduce_window.h"

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

// Calls fold(op) with the reducer as a function of two loaded values (NaN
// propagating through maximum and minimum, as the reference's); false for
// a reducer without a typed loop.
template <typename F, typename Fold>
bool WithTypedReducer(Opcode reducer, Fold&& fold) {
  switch (reducer) {
    case Opcode::kAdd:
      fold([](auto a, auto b) { return a + b; });
      return true;
    case Opcode::kMultiply:
      fold([](auto a, auto b) { return a * b; });
      return true;
    case Opcode::kMaximum:
      fold([](auto a, auto b) {
        return std::isnan(a) || std::isnan(b) ? F::Load(F::NaN()) : std::max(a, b);
      });
      return true;
    case Opcode::kMinimum:
      fold([](auto a, auto b) {
        return std::isnan(a) || std::isnan(b) ? F::Load(F::NaN()) : std::min(a, b);
      });
      return true;
    default:
      return false;
  }
}

// Calls fold.template operator()<F>() for the accumulator of `type`, where
// it has a typed loop; false otherwise.
template <typename Fold>
bool WithTypedAccumulator(PrimitiveType type, Fold&& fold) {
  switch (type) {
    case PrimitiveType::kF32:
      return fold.template operator()<F32Acc>();
    case PrimitiveType::kF64:
      return fold.template operator()<F64Acc>();
    case PrimitiveType::kBF16:
      return fold.template operator()<Bf16Acc>();
    case PrimitiveType::kF16:
      return fold.template operator()<F16Acc>();
    default:
      return false;
  }
}

// out[at] = reducer(out[at], x[i]) through exec/scalar_ops.h: integers,
// pred, f8; false where the reducer does not apply to the type.
bool GenericFold(Opcode reducer, const HostArray& x, int64_t i, const HostArray& out, int64_t at) {
  const PrimitiveType type = x.type();
  if (ir::IsFloatingPoint(type)) {
    const auto value =
        scalar::BinaryFloat(reducer, LoadDouble(out.data, type, at), LoadDouble(x.data, type, i));
    if (value) StoreDouble(out.data, type, at, *value);
    return value.has_value();
  }
  const auto value =
      scalar::BinaryInteger(reducer, LoadInt(out.data, type, at), LoadInt(x.data, type, i), type);
  if (value) StoreInt(out.data, type, at, *value);
  return value.has_value();
}

bool GenericReduce(Opcode reducer, const ReducePlan& plan, const HostArray& x,
                   const HostArray& out) {
  bool ok = true;
  ForEachRun(plan, [&](int64_t i, int64_t o, int64_t n, int64_t out_step) {
    for (int64_t k = 0; k < n && ok; ++k)
      ok = GenericFold(reducer, x, i + k, out, o + k * out_step);
  });
  return ok;
}

template <typename T>
void FillWith(const HostArray& init, const HostArray& out, int64_t count) {
  T value;
  std::memcpy(&value, init.data, sizeof(T));
  std::fill_n(out.as<T>(), count, value);
}

// Every result element at the init value.
void FillWithInit(const HostArray& init, const HostArray& out) {
  const int64_t count = out.elements(), width = out.element_bytes();
  switch (width) {
    case 1:
      return FillWith<uint8_t>(init, out, count);
    case 2:
      return FillWith<uint16_t>(init, out, count);
    case 4:
      return FillWith<uint32_t>(init, out, count);
    case 8:
      return FillWith<uint64_t>(init, out, count);
    default:
      for (int64_t i = 0; i < count; ++i) std::memcpy(out.data + i * width, init.data, width);
  }
}

Error ReducerDoesNotApply(const ir::Instruction& op, Opcode reducer, PrimitiveType type) {
  return KernelError(op, fmt::format("reducer {} does not apply to {}", ir::OpcodeName(reducer),
                                     ir::PrimitiveTypeName(type)));
}

}  // namespace

Status Reduce(const ir::Instruction& op, Opcode reducer, const HostArray& x, const HostArray& init,
              const HostArray& out) {
  if (x.type() != out.type()) return KernelError(op, "reduce changes the element type");
  const std::vector<int64_t> reduced = op.attrs().dimensions.value_or(std::vector<int64_t>{});
  for (int64_t d : reduced) {
    if (d < 0 || d >= x.shape->rank()) return KernelError(op, "reduced dimension out of range");
  }
  FillWithInit(init, out);
  const ReducePlan plan = PlanReduce(*x.shape, reduced);
  const bool typed = WithTypedAccumulator(x.type(), [&]<typename F>() {
    return WithTypedReducer<F>(reducer, [&](auto fold) { FoldRuns<F>(plan, x, out, fold); });
  });
  if (!typed && !GenericReduce(reducer, plan, x, out)) {
    return ReducerDoesNotApply(op, reducer, x.type());
  }
  return OkStatus();
}

// The window's trailing dimensions that each result element reads at its
// own position (size 1, stride 1, no padding, no dilation) make runs:
// result element o·run + r folds input elements i·run + r for the leading
// dimensions' (o, i) pairs, the same order per element, a loop over r
// that vectorises (a pooling over NHWC's channels).
struct WindowRuns {
  int64_t run = 1;
  std::vector<int64_t> outer_in, outer_out;  // the leading dimensions
  ir::WindowTaps taps;                       // of the leading dimensions
};

WindowRuns SplitRuns(const std::vector<ir::WindowDimension>& window,
                     const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims) {
  WindowRuns runs;
  size_t leading = window.size();
  while (leading > 0 && window[leading - 1] == ir::WindowDimension{} &&
         in_dims[leading - 1] == out_dims[leading - 1]) {
    runs.run *= in_dims[--leading];
  }
  const std::vector<ir::WindowDimension> outer(window.begin(), window.begin() + leading);
  runs.outer_in.assign(in_dims.begin(), in_dims.begin() + leading);
  runs.outer_out.assign(out_dims.begin(), out_dims.begin() + leading);
  runs.taps = ir::LandingTaps(outer, runs.outer_in, runs.outer_out);
  return runs;
}

Status ReduceWindow(const ir::Instruction& op, Opcode reducer, const HostArray& x,
                    const HostArray& init, const HostArray& out) {
  if (x.type() != out.type()) return KernelError(op, "reduce-window changes the element type");
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(op);
  if (!window.ok()) return KernelError(op, window.error().message);
  const std::vector<int64_t>& in_dims = x.shape->dims();
  const std::vector<int64_t>& out_dims = out.shape->dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size()) {
    return KernelError(op, "the window does not match the input's rank");
  }
  FillWithInit(init, out);
  const WindowRuns runs = SplitRuns(*window, in_dims, out_dims);
  const int64_t run = runs.run;
  if (run == 0) return OkStatus();
  const std::vector<int64_t>& outer_in = runs.outer_in;
  const std::vector<int64_t>& outer_out = runs.outer_out;
  const ir::WindowTaps& taps = runs.taps;
  // Long runs of f32 or bf16 through the vectorised loops, the same bits
  // (simd.h); kept off short runs, where a call per run costs more.
  const std::optional<simd::Binary> vectorised = simd::BinaryOf(reducer);
  if (vectorised && run >= 16 && x.type() == PrimitiveType::kF32) {
    float* result = out.as<float>();
    const float* in = x.as<float>();
    ir::ForEachWindowElement(taps, outer_in, outer_out, [&](int64_t o, int64_t i) {
      simd::F32Binary(*vectorised, result + o * run, in + i * run, result + o * run,
                      static_cast<size_t>(run));
    });
    return OkStatus();
  }
  if (vectorised && run >= 16 && x.type() == PrimitiveType::kBF16) {
    uint16_t* result = out.as<uint16_t>();
    const uint16_t* in = x.as<uint16_t>();
    ir::ForEachWindowElement(taps, outer_in, outer_out, [&](int64_t o, int64_t i) {
      simd::Bf16Binary(*vectorised, result + o * run, in + i * run, result + o * run,
                       static_cast<size_t>(run));
    });
    return OkStatus();
  }
  const bool typed = WithTypedAccumulator(x.type(), [&]<typename F>() {
    return WithTypedReducer<F>(reducer, [&](auto fold) {
      using S = typename F::Storage;
      const S* in = x.as<S>();
      S* result = out.as<S>();
      ir::ForEachWindowElement(taps, outer_in, outer_out, [&](int64_t o, int64_t i) {
        S* to = result + o * run;
        const S* from = in + i * run;
        for (int64_t r = 0; r < run; ++r) to[r] = F::Store(fold(F::Load(to[r]), F::Load(from[r])));
      });
    });
  });
  if (typed) return OkStatus();
  bool ok = true;
  ir::ForEachWindowElement(taps, outer_in, outer_out, [&](int64_t o, int64_t i) {
    for (int64_t r = 0; r < run && ok; ++r)
      ok = GenericFold(reducer, x, i * run + r, out, o * run + r);
  });
  return ok ? OkStatus() : Status(ReducerDoesNotApply(op, reducer, x.type()));
}

// Calls select(a, b) for a later landing element b of a window against its
// selection a, keeping a where it holds, and scatter(o, a) once per
// window o with its selection (ir/select_and_scatter.h's order).
template <typename Keeps, typename Scatter>
void SelectEachWindow(const ir::WindowTaps& taps, const std::vector<int64_t>& in_dims,
                      const std::vector<int64_t>& out_dims, Keeps&& keeps, Scatter&& scatter) {
  int64_t window_at = -1, selected = -1;
  ir::ForEachWindowElement(taps, in_dims, out_dims, [&](int64_t o, int64_t i) {
    if (o != window_at) {
      if (window_at >= 0) scatter(window_at, selected);
      window_at = o;
      selected = i;
    } else if (!keeps(selected, i)) {
      selected = i;
    }
  });
  if (window_at >= 0) scatter(window_at, selected);
}

// Calls run(compare) with `direction` as a comparison of two loaded values
// (IEEE's for floats: false for a NaN but under NE, as the compare kernel).
template <typename Run>
void WithComparison(ir::ComparisonDirection direction, Run&& run) {
  switch (direction) {
    case ir::ComparisonDirection::kEq:
      return run([](auto a, auto b) { return a == b; });
    case ir::ComparisonDirection::kNe:
      return run([](auto a, auto b) { return a != b; });
    case ir::ComparisonDirection::kLt:
      return run([](auto a, auto b) { return a < b; });
    case ir::ComparisonDirection::kLe:
      return run([](auto a, auto b) { return a <= b; });
    case ir::ComparisonDirection::kGt:
      return run([](auto a, auto b) { return a > b; });
    case ir::ComparisonDirection::kGe:
      return run([](auto a, auto b) { return a >= b; });
  }
}

// Floats with a typed loop (operand and source of one type) compare and
// fold as loaded; any other type goes element by element, comparing as the
// compare kernel does.
Status SelectAndScatter(const ir::Instruction& op, ir::ComparisonDirection select, Opcode scatter,
                        const HostArray& operand, const HostArray& source, const HostArray& init,
                        const HostArray& out) {
  if (source.type() != out.type()) {
    return KernelError(op, "select-and-scatter changes the source's element type");
  }
  Expected<std::vector<ir::WindowDimension>> window = ir::ReduceWindowOf(op);
  if (!window.ok()) return KernelError(op, window.error().message);
  const std::vector<int64_t>& in_dims = operand.shape->dims();
  const std::vector<int64_t>& out_dims = source.shape->dims();
  if (window->size() != in_dims.size() || out_dims.size() != in_dims.size() ||
      out.shape->dims() != in_dims) {
    return KernelError(op, "the window does not match the operand's rank");
  }
  FillWithInit(init, out);
  // Typed, the windows of a run of trailing dimensions (SplitRuns) select
  // side by side: they read and write disjoint elements, so only the order
  // within each, which is kept, matters.
  const WindowRuns runs = SplitRuns(*window, in_dims, out_dims);
  const auto run = static_cast<size_t>(runs.run);
  const bool typed =
      operand.type() == source.type() && WithTypedAccumulator(operand.type(), [&]<typename F>() {
        using S = typename F::Storage;
        const S* x = operand.as<S>();
        const S* from = source.as<S>();
        S* to = out.as<S>();
        std::vector<int64_t> selected(run);
        std::vector<S> best(run);
        return WithTypedReducer<F>(scatter, [&](auto fold) {
          WithComparison(select, [&](auto compare) {
            const auto start = [&](int64_t i) {
              for (size_t r = 0; r < run; ++r) {
                selected[r] = i * runs.run + static_cast<int64_t>(r);
                best[r] = x[selected[r]];
              }
            };
            const auto scatter_run = [&](int64_t o) {
              const S* update = from + o * runs.run;
              for (size_t r = 0; r < run; ++r) {
                S& onto = to[selected[r]];
                onto = F::Store(fold(F::Load(onto), F::Load(update[r])));
              }
            };
            int64_t window_at = -1;
            ir::ForEachWindowElement(runs.taps, runs.outer_in, runs.outer_out,
                                     [&](int64_t o, int64_t i) {
                                       if (o != window_at) {
                                         if (window_at >= 0) scatter_run(window_at);
                                         window_at = o;
                                         return start(i);
                                       }
                                       const S* candidates = x + i * runs.run;
                                       for (size_t r = 0; r < run; ++r) {
                                         if (!compare(F::Load(best[r]), F::Load(candidates[r]))) {
                                           best[r] = candidates[r];
                                           selected[r] = i * runs.run + static_cast<int64_t>(r);
                                         }
                                       }
                                     });
            if (window_at >= 0) scatter_run(window_at);
          });
        });
      });
  if (typed) return OkStatus();
  const ir::WindowTaps taps = ir::LandingTaps(*window, in_dims, out_dims);
  const PrimitiveType type = operand.type();
  const bool floating = ir::IsFloatingPoint(type);
  const auto keeps = [&](int64_t a, int64_t b) {
    if (floating) {
      const double x = LoadDouble(operand.data, type, a), y = LoadDouble(operand.data, type, b);
      return scalar::CompareResult(select, std::isnan(x) || std::isnan(y), (x > y) - (x < y));
    }
    return scalar::CompareResult(select, false,
                                 scalar::CompareIntegers(LoadInt(operand.data, type, a),
                                                         LoadInt(operand.data, type, b), type));
  };
  bool ok = true;
  SelectEachWindow(taps, in_dims, out_dims, keeps, [&](int64_t o, int64_t at) {
    ok = ok && GenericFold(scatter, source, o, out, at);
  });
  return ok ? OkStatus() : Status(ReducerDoesNotApply(op, scatter, source.type()));
}

}  // namespace loom::exec::cpu
