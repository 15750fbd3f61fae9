// convolution on host arrays (ir/convolution.h says what it means). Both
// operands are packed once into layouts whose inner loops are contiguous:
// the input as [position][batch][feature], the kernel as [tap][input
// feature][output feature]. Every element of the result is then its
// landing taps' (row-major) and, in each, its group's features' products
// added in that order, in double, and rounded once, on every CPU, as the
// reference interpreter adds them. Two paths keep that order:
//  - float convolutions with a finite kernel run as products (implicit
//    GEMM): the input lowered, block by block, into one row of [tap]
//    [feature] per output position, times the kernel, through the
//    deterministic product (deterministic_gemm.h), whose sums run in that
//    order; the padding's zeros add nothing to them (ConvolveAsGemm says
//    why);
//  - integers, and kernels with an infinity or a NaN, run position by
//    position over the landing taps only, each adding one input value
//    times a row of the kernel into the row of its output features, a loop
//    across independent sums that vectorises without reordering any.
#include "ir/convolution.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "exec/cpu/deterministic_gemm.h"
#include "exec/cpu/kernels.h"
#include "exec/tensor.h"

namespace loom::exec::cpu {
namespace {

// The sizes a convolution's loops run over, from its operands' shapes.
struct Geometry {
  int64_t batch = 0, out_batch = 0, features = 0, group_features = 0;
  int64_t outputs = 0, groups = 1, group_outputs = 0;
  std::vector<int64_t> in_extent, out_extent, taps;  // per spatial dimension
  int64_t in_positions = 1, out_positions = 1, tap_count = 1;
};

Geometry GeometryOf(const ir::Convolution& c, const ir::Shape& input, const ir::Shape& kernel,
                    const ir::Shape& out) {
  Geometry g;
  g.batch = input.dim(c.dims.input_batch);
  g.out_batch = g.batch / c.batch_groups;
  g.features = input.dim(c.dims.input_feature);
  g.group_features = kernel.dim(c.dims.kernel_input_feature);
  g.outputs = kernel.dim(c.dims.kernel_output_feature);
  g.groups = c.feature_groups * c.batch_groups;
  g.group_outputs = g.outputs / g.groups;
  for (size_t k = 0; k < c.window.size(); ++k) {
    g.in_extent.push_back(input.dim(c.dims.input_spatial[k]));
    g.out_extent.push_back(out.dim(c.dims.output_spatial[k]));
    g.taps.push_back(c.window[k].size);
    g.in_positions *= g.in_extent.back();
    g.out_positions *= g.out_extent.back();
    g.tap_count *= g.taps.back();
  }
  return g;
}

// The multi-index of `linear` in row-major order over `extents`.
void Unravel(int64_t linear, const std::vector<int64_t>& extents, std::vector<int64_t>& index) {
  for (size_t k = extents.size(); k-- > 0;) {
    index[k] = linear % extents[k];
    linear /= extents[k];
  }
}

// Element strides of `shape`'s dimensions `dims`.
std::vector<int64_t> StridesOf(const ir::Shape& shape, const std::vector<int64_t>& dims) {
  const std::vector<int64_t> all = RowMajorStrides(shape.dims());
  std::vector<int64_t> strides;
  for (int64_t d : dims) strides.push_back(all[static_cast<size_t>(d)]);
  return strides;
}

template <typename T>
T Load(const HostArray& a, int64_t i) {
  if constexpr (std::is_same_v<T, double>) {
    return LoadDouble(a.data, a.type(), i);
  } else if constexpr (std::is_same_v<T, float>) {
    return static_cast<float>(LoadDouble(a.data, a.type(), i));  // exact: a float type <= f32
  } else {
    return LoadInt(a.data, a.type(), i);
  }
}

// The element offset of each spatial position (row-major over `extents`) of
// `array`'s dimensions `dims`, position k of dimension d read mirrored where
// `mirrored[d]`.
std::vector<int64_t> PositionOffsets(const HostArray& array, const std::vector<int64_t>& dims,
                                     const std::vector<int64_t>& extents,
                                     const std::vector<bool>& mirrored) {
  const std::vector<int64_t> strides = StridesOf(*array.shape, dims);
  int64_t count = 1;
  for (int64_t e : extents) count *= e;
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  std::vector<int64_t> at(extents.size());
  for (int64_t p = 0; p < count; ++p) {
    Unravel(p, extents, at);
    int64_t offset = 0;
    for (size_t k = 0; k < at.size(); ++k) {
      offset += (mirrored[k] ? extents[k] - 1 - at[k] : at[k]) * strides[k];
    }
    offsets[static_cast<size_t>(p)] = offset;
  }
  return offsets;
}

// `array` widened into [position][outer][inner], the positions at `offsets`
// and dimensions `outer` and `inner` its non-spatial two.
template <typename T>
std::vector<T> Pack(const HostArray& array, const std::vector<int64_t>& offsets, int64_t outer,
                    int64_t inner) {
  const std::vector<int64_t> strides = RowMajorStrides(array.shape->dims());
  const int64_t outer_stride = strides[static_cast<size_t>(outer)];
  const int64_t inner_stride = strides[static_cast<size_t>(inner)];
  const int64_t outers = array.shape->dim(outer), inners = array.shape->dim(inner);
  std::vector<T> packed(offsets.size() * static_cast<size_t>(outers * inners));
  T* row = packed.data();
  for (int64_t offset : offsets) {
    for (int64_t a = 0; a < outers; ++a, row += inners) {
      for (int64_t b = 0; b < inners; ++b) {
        row[b] = Load<T>(array, offset + a * outer_stride + b * inner_stride);
      }
    }
  }
  return packed;
}

// The input as [position][batch][feature].
template <typename T>
std::vector<T> PackInput(const ir::Convolution& c, const Geometry& g, const HostArray& input) {
  const std::vector<bool> forward(g.in_extent.size(), false);
  return Pack<T>(input, PositionOffsets(input, c.dims.input_spatial, g.in_extent, forward),
                 c.dims.input_batch, c.dims.input_feature);
}

// The kernel as [tap][input feature][output feature], tap t reading the
// kernel's t, or its mirror where the window reverses.
template <typename T>
std::vector<T> PackKernel(const ir::Convolution& c, const Geometry& g, const HostArray& kernel) {
  std::vector<bool> reversed;
  for (const ir::WindowDimension& w : c.window) reversed.push_back(w.reversal);
  return Pack<T>(kernel, PositionOffsets(kernel, c.dims.kernel_spatial, g.taps, reversed),
                 c.dims.kernel_input_feature, c.dims.kernel_output_feature);
}

// The input position (linear over the input's spatial extents) that tap
// `tap` of output position `y` reads, or -1 where it lands in the padding or
// a hole of the dilated input.
int64_t TapPosition(const ir::Convolution& c, const Geometry& g,
                    const std::vector<int64_t>& in_strides, const std::vector<int64_t>& y,
                    const std::vector<int64_t>& tap) {
  int64_t position = 0;
  for (size_t k = 0; k < tap.size(); ++k) {
    const int64_t at = ir::InputPosition(c.window[k], g.in_extent[k], y[k], tap[k]);
    if (at < 0) return -1;
    position += at * in_strides[k];
  }
  return position;
}

// Where the output's features of batch `b` at spatial position `y` start,
// and the stride between them.
struct OutputRow {
  int64_t offset = 0, feature_stride = 0;
};
OutputRow OutputRowOf(const ir::Convolution& c, const HostArray& out, int64_t b,
                      const std::vector<int64_t>& y) {
  const std::vector<int64_t> strides = RowMajorStrides(out.shape->dims());
  OutputRow row{b * strides[static_cast<size_t>(c.dims.output_batch)],
                strides[static_cast<size_t>(c.dims.output_feature)]};
  for (size_t k = 0; k < y.size(); ++k) {
    row.offset += y[k] * strides[static_cast<size_t>(c.dims.output_spatial[k])];
  }
  return row;
}

template <typename T>
void Store(const HostArray& out, int64_t at, T value) {
  if constexpr (std::is_same_v<T, double>) {
    StoreDouble(out.data, out.type(), at, value);
  } else {
    StoreInt(out.data, out.type(), at, value);
  }
}

// acc[o] += x · w[o]: wrapping for integers.
inline void AddScaledRow(double x, const double* w, double* acc, int64_t n) {
  for (int64_t o = 0; o < n; ++o) acc[o] += x * w[o];
}
inline void AddScaledRow(int64_t x, const int64_t* w, int64_t* acc, int64_t n) {
  const auto ux = static_cast<uint64_t>(x);
  for (int64_t o = 0; o < n; ++o) {
    acc[o] = static_cast<int64_t>(static_cast<uint64_t>(acc[o]) + ux * static_cast<uint64_t>(w[o]));
  }
}

// Output position by output position, the landing taps only: for integers,
// and for kernels with an infinity or NaN (whose products with the padding
// the product below would add, where the definition adds nothing).
template <typename T>
void ConvolveDirect(const ir::Convolution& c, const Geometry& g, const HostArray& input,
                    const HostArray& kernel, const HostArray& out) {
  const std::vector<T> x = PackInput<T>(c, g, input);
  const std::vector<T> w = PackKernel<T>(c, g, kernel);
  const std::vector<int64_t> in_strides = RowMajorStrides(g.in_extent);
  std::vector<int64_t> y(g.out_extent.size()), tap(g.taps.size());
  std::vector<T> acc(static_cast<size_t>(g.outputs));
  for (int64_t b = 0; b < g.out_batch; ++b) {
    for (int64_t p = 0; p < g.out_positions; ++p) {
      Unravel(p, g.out_extent, y);
      std::fill(acc.begin(), acc.end(), T{0});
      for (int64_t t = 0; t < g.tap_count; ++t) {
        Unravel(t, g.taps, tap);
        const int64_t position = TapPosition(c, g, in_strides, y, tap);
        if (position < 0) continue;
        for (int64_t group = 0; group < g.groups; ++group) {
          const int64_t n = c.batch_groups > 1 ? group * g.out_batch + b : b;
          const int64_t first = c.feature_groups > 1 ? group * g.group_features : 0;
          const T* row = x.data() + (position * g.batch + n) * g.features + first;
          const int64_t o0 = group * g.group_outputs;
          for (int64_t i = 0; i < g.group_features; ++i) {
            AddScaledRow(row[i], w.data() + (t * g.group_features + i) * g.outputs + o0,
                         acc.data() + o0, g.group_outputs);
          }
        }
      }
      const OutputRow row = OutputRowOf(c, out, b, y);
      for (int64_t o = 0; o < g.outputs; ++o) {
        Store(out, row.offset + o * row.feature_stride, acc[static_cast<size_t>(o)]);
      }
    }
  }
}

// The rows of the lowered input (one per output position) built at a time:
// about 4 MiB of them, at least 16.
int64_t LoweredRowsPerBlock(int64_t depth, size_t element_bytes) {
  constexpr int64_t kBlockBytes = int64_t{4} << 20;
  const int64_t row_bytes = std::max<int64_t>(1, depth * static_cast<int64_t>(element_bytes));
  return std::max<int64_t>(16, kBlockBytes / row_bytes);
}

// Float convolutions as products (implicit GEMM): per group, the input
// lowered block by block into rows of [tap][group feature] (zeros where a
// tap lands in the padding or a hole), times the kernel's group columns,
// through the deterministic product. Its sums run over that row in order,
// from +0, so each is the direct loop's: a sum that starts at +0 is never
// -0, so adding the padding's ±0 products leaves it as it is, and a finite
// kernel makes every such product ±0 (ConvolveDirect takes the others).
template <typename P>
void ConvolveAsGemm(const ir::Convolution& c, const Geometry& g, const std::vector<P>& x,
                    const std::vector<P>& w, const HostArray& out) {
  const std::vector<int64_t> in_strides = RowMajorStrides(g.in_extent);
  const int64_t depth = g.tap_count * g.group_features;
  const int64_t rows = g.out_batch * g.out_positions;
  const int64_t block = std::min(rows, LoweredRowsPerBlock(depth, sizeof(P)));
  std::vector<P> lowered(static_cast<size_t>(block * depth));
  std::vector<double> product(static_cast<size_t>(block * g.group_outputs));
  std::vector<int64_t> y(g.out_extent.size()), tap(g.taps.size());
  std::vector<int64_t> positions(static_cast<size_t>(g.tap_count));
  for (int64_t group = 0; group < g.groups; ++group) {
    const int64_t first = c.feature_groups > 1 ? group * g.group_features : 0;
    const int64_t o0 = group * g.group_outputs;
    const StridedMatrix<P> filters{w.data() + o0, depth, g.group_outputs, g.outputs, 1};
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t count = std::min(block, rows - r0);
      for (int64_t r = 0; r < count; ++r) {
        const int64_t b = (r0 + r) / g.out_positions, p = (r0 + r) % g.out_positions;
        const int64_t n = c.batch_groups > 1 ? group * g.out_batch + b : b;
        Unravel(p, g.out_extent, y);
        P* lowered_row = lowered.data() + r * depth;
        for (int64_t t = 0; t < g.tap_count; ++t, lowered_row += g.group_features) {
          Unravel(t, g.taps, tap);
          const int64_t position = TapPosition(c, g, in_strides, y, tap);
          if (position < 0) {
            std::fill_n(lowered_row, g.group_features, P{0});
          } else {
            std::copy_n(x.data() + (position * g.batch + n) * g.features + first, g.group_features,
                        lowered_row);
          }
        }
      }
      const StridedMatrix<P> patches{lowered.data(), count, depth, depth, 1};
      if constexpr (std::is_same_v<P, float>) {
        DeterministicGemm(patches, filters, product.data(), g.group_outputs);
      } else {
        DeterministicGemm(patches, filters, product.data(), g.group_outputs,
                          /*exact_products=*/false);
      }
      for (int64_t r = 0; r < count; ++r) {
        const int64_t b = (r0 + r) / g.out_positions, p = (r0 + r) % g.out_positions;
        Unravel(p, g.out_extent, y);
        const OutputRow row = OutputRowOf(c, out, b, y);
        const double* sums = product.data() + r * g.group_outputs;
        for (int64_t o = 0; o < g.group_outputs; ++o) {
          StoreDouble(out.data, out.type(), row.offset + (o0 + o) * row.feature_stride, sums[o]);
        }
      }
    }
  }
}

// A float convolution: as a product where the kernel is finite, packed as
// float where every value is one exactly (f32 and narrower: the product
// then uses FMA, exact for such products), else as double.
template <typename P>
void ConvolveFloat(const ir::Convolution& c, const Geometry& g, const HostArray& input,
                   const HostArray& kernel, const HostArray& out) {
  const std::vector<P> w = PackKernel<P>(c, g, kernel);
  if (!std::all_of(w.begin(), w.end(), [](P v) { return std::isfinite(v); })) {
    ConvolveDirect<double>(c, g, input, kernel, out);
    return;
  }
  ConvolveAsGemm<P>(c, g, PackInput<P>(c, g, input), w, out);
}

}  // namespace

Status Convolution(const ir::Instruction& op, const HostArray& input, const HostArray& kernel,
                   const HostArray& out) {
  Expected<ir::Convolution> c = ir::ConvolutionOf(op);
  if (!c.ok()) return KernelError(op, c.error().message);
  Expected<std::vector<int64_t>> dims = ir::InferConvolutionDims(*input.shape, *kernel.shape, *c);
  if (!dims.ok()) return KernelError(op, dims.error().message);
  if (*dims != out.shape->dims()) {
    return KernelError(op, fmt::format("the result {} is not the convolution's shape",
                                       out.shape->ToString(false)));
  }
  const Geometry g = GeometryOf(*c, *input.shape, *kernel.shape, *out.shape);
  if (ir::IsInteger(input.type())) {
    ConvolveDirect<int64_t>(*c, g, input, kernel, out);
  } else if (input.type() == ir::PrimitiveType::kF64) {
    ConvolveFloat<double>(*c, g, input, kernel, out);
  } else {
    ConvolveFloat<float>(*c, g, input, kernel, out);
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
