// What batch-norm-training, -inference and -grad (ir/batch_norm.h)
// compute: XLA's BatchNormExpander's expansion, op for op, each result
// rounded to the element type as the expanded program's ops round it. The
// reference interpreter and the CPU kernel both run these loops, through
// an element policy (exec/float_elements.h); the tests hold
// them to the same expansion written out as HLO.
//
// With N the s32 product of the non-feature dimensions converted to the
// element type, eps the float epsilon converted to it, r(v) = 1/sqrt(v),
// and sums folded from 0 in row-major order of the operand:
//   training:  mean = sum(x)/N, var = sum(x*x)/N - mean*mean,
//              y = ((x - mean) * r(var + eps)) * scale + offset
//   inference: s = scale * r(var + eps), t = offset - mean * s, y = x * s + t
//   grad:      c = x - mean, sdy = sum(dy), sdc = sum(dy * c),
//              grad_scale = sdc * r(var + eps), grad_offset = sdy,
//              dx = ((scale * r(var + eps)) / N) * ((dy * N - sdy) - (sdc * c) / (var + eps))
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exec/scalar_ops.h"
#include "ir/batch_norm.h"

namespace loom::exec::batch_norm {

// The operand seen as [outer, features, inner] around the feature dimension.
struct Layout {
  int64_t outer = 1;
  int64_t features = 1;
  int64_t inner = 1;
};

inline Layout LayoutOf(const std::vector<int64_t>& dims, int64_t feature_index) {
  Layout layout;
  for (size_t d = 0; d < dims.size(); ++d) {
    const auto at = static_cast<int64_t>(d);
    if (at < feature_index) layout.outer *= dims[d];
    if (at == feature_index) layout.features = dims[d];
    if (at > feature_index) layout.inner *= dims[d];
  }
  return layout;
}

// The expander's N: an s32 product of get-dimension-size values, which
// wraps as s32 multiplication does.
inline int32_t ElementsPerFeature(const std::vector<int64_t>& dims, int64_t feature_index) {
  uint32_t product = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (static_cast<int64_t>(d) != feature_index) product *= static_cast<uint32_t>(dims[d]);
  }
  int32_t wrapped = 0;
  std::memcpy(&wrapped, &product, sizeof wrapped);
  return wrapped;
}

// The constants every form converts to the element type.
template <typename E>
struct Constants {
  double n;
  double epsilon;
  Constants(const E& e, const std::vector<int64_t>& dims, const ir::BatchNorm& attributes)
      : n(e.Round(static_cast<double>(ElementsPerFeature(dims, attributes.feature_index)))),
        epsilon(e.Round(static_cast<double>(attributes.epsilon))) {}
};

// r(var + eps) for a feature, as the expanded rsqrt computes it.
template <typename E>
double RsqrtPlusEpsilon(const E& e, double variance, double epsilon) {
  return e.Round(*scalar::UnaryFloat(ir::Opcode::kRsqrt, e.Round(variance + epsilon)));
}

// Calls visit(feature, element) for every element, in row-major order.
template <typename Visit>
void ForEachElement(const Layout& layout, Visit&& visit) {
  int64_t element = 0;
  for (int64_t o = 0; o < layout.outer; ++o) {
    for (int64_t f = 0; f < layout.features; ++f) {
      for (int64_t i = 0; i < layout.inner; ++i) visit(f, element++);
    }
  }
}

// (x, scale, offset) -> (y, mean, variance).
template <typename E>
void Training(const E& e, const std::vector<int64_t>& dims, const ir::BatchNorm& attributes,
              const std::byte* x, const std::byte* scale, const std::byte* offset, std::byte* y,
              std::byte* mean, std::byte* variance) {
  const Layout layout = LayoutOf(dims, attributes.feature_index);
  const Constants<E> c(e, dims, attributes);
  const auto features = static_cast<size_t>(layout.features);
  std::vector<double> sum(features, 0.0), squares(features, 0.0);
  ForEachElement(layout, [&](int64_t f, int64_t i) {
    const double v = e.Load(x, i);
    sum[f] = e.Round(sum[f] + v);
    squares[f] = e.Round(squares[f] + e.Round(v * v));
  });
  std::vector<double> means(features), rsqrts(features);
  for (size_t f = 0; f < features; ++f) {
    means[f] = e.Round(sum[f] / c.n);
    const double square_mean = e.Round(squares[f] / c.n);
    const double var = e.Round(square_mean - e.Round(means[f] * means[f]));
    rsqrts[f] = RsqrtPlusEpsilon(e, var, c.epsilon);
    e.Store(mean, static_cast<int64_t>(f), means[f]);
    e.Store(variance, static_cast<int64_t>(f), var);
  }
  ForEachElement(layout, [&](int64_t f, int64_t i) {
    const double normalized = e.Round(e.Round(e.Load(x, i) - means[f]) * rsqrts[f]);
    const double scaled = e.Round(normalized * e.Load(scale, f));
    e.Store(y, i, e.Round(scaled + e.Load(offset, f)));
  });
}

// (x, scale, offset, mean, variance) -> y.
template <typename E>
void Inference(const E& e, const std::vector<int64_t>& dims, const ir::BatchNorm& attributes,
               const std::byte* x, const std::byte* scale, const std::byte* offset,
               const std::byte* mean, const std::byte* variance, std::byte* y) {
  const Layout layout = LayoutOf(dims, attributes.feature_index);
  const Constants<E> c(e, dims, attributes);
  const auto features = static_cast<size_t>(layout.features);
  std::vector<double> true_scale(features), true_shift(features);
  for (size_t f = 0; f < features; ++f) {
    const auto at = static_cast<int64_t>(f);
    true_scale[f] =
        e.Round(e.Load(scale, at) * RsqrtPlusEpsilon(e, e.Load(variance, at), c.epsilon));
    true_shift[f] = e.Round(e.Load(offset, at) - e.Round(e.Load(mean, at) * true_scale[f]));
  }
  ForEachElement(layout, [&](int64_t f, int64_t i) {
    e.Store(y, i, e.Round(e.Round(e.Load(x, i) * true_scale[f]) + true_shift[f]));
  });
}

// (x, scale, mean, variance, dy) -> (dx, grad_scale, grad_offset).
template <typename E>
void Grad(const E& e, const std::vector<int64_t>& dims, const ir::BatchNorm& attributes,
          const std::byte* x, const std::byte* scale, const std::byte* mean,
          const std::byte* variance, const std::byte* dy, std::byte* dx, std::byte* grad_scale,
          std::byte* grad_offset) {
  const Layout layout = LayoutOf(dims, attributes.feature_index);
  const Constants<E> c(e, dims, attributes);
  const auto features = static_cast<size_t>(layout.features);
  std::vector<double> sum_dy(features, 0.0), sum_dy_centered(features, 0.0);
  ForEachElement(layout, [&](int64_t f, int64_t i) {
    const double g = e.Load(dy, i);
    const double centered = e.Round(e.Load(x, i) - e.Load(mean, f));
    sum_dy_centered[f] = e.Round(sum_dy_centered[f] + e.Round(g * centered));
    sum_dy[f] = e.Round(sum_dy[f] + g);
  });
  std::vector<double> variance_plus_epsilon(features), factor(features);
  for (size_t f = 0; f < features; ++f) {
    const auto at = static_cast<int64_t>(f);
    variance_plus_epsilon[f] = e.Round(e.Load(variance, at) + c.epsilon);
    const double rsqrt = RsqrtPlusEpsilon(e, e.Load(variance, at), c.epsilon);
    factor[f] = e.Round(e.Round(e.Load(scale, at) * rsqrt) / c.n);
    e.Store(grad_scale, at, e.Round(sum_dy_centered[f] * rsqrt));
    e.Store(grad_offset, at, sum_dy[f]);
  }
  ForEachElement(layout, [&](int64_t f, int64_t i) {
    const double g = e.Load(dy, i);
    const double centered = e.Round(e.Load(x, i) - e.Load(mean, f));
    const double i1 = e.Round(g * c.n);
    const double i5 = e.Round(e.Round(sum_dy_centered[f] * centered) / variance_plus_epsilon[f]);
    const double i6 = e.Round(e.Round(i1 - sum_dy[f]) - i5);
    e.Store(dx, i, e.Round(factor[f] * i6));
  });
}

}  // namespace loom::exec::batch_norm
