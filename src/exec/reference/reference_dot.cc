#include "exec/reference/reference_dot.h"

#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "exec/cpu/deterministic_gemm.h"

namespace loom::exec {
namespace {

int64_t Product(const std::vector<int64_t>& dims, const std::vector<int64_t>& which) {
  int64_t product = 1;
  for (int64_t d : which) product *= dims[static_cast<size_t>(d)];
  return product;
}

// The row-major linear indices of `tensor` visited when walking its
// dimensions in the order `order` (a permutation): packing by these indices
// transposes the tensor so that `order` becomes its row-major layout.
std::vector<int64_t> PermutedOffsets(const Tensor& tensor, const std::vector<int64_t>& order) {
  const auto& dims = tensor.shape().dims();
  std::vector<int64_t> strides(dims.size(), 1);
  for (int64_t d = static_cast<int64_t>(dims.size()) - 2; d >= 0; --d) {
    strides[d] = strides[d + 1] * dims[d + 1];
  }
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(tensor.ElementCount()));
  if (tensor.ElementCount() == 0) return offsets;
  std::vector<int64_t> index(order.size(), 0);
  int64_t offset = 0;
  while (true) {
    offsets.push_back(offset);
    // Increment the mixed-radix counter over `order`, last digit fastest.
    int64_t k = static_cast<int64_t>(order.size()) - 1;
    for (; k >= 0; --k) {
      const int64_t d = order[k];
      if (++index[k] < dims[d]) {
        offset += strides[d];
        break;
      }
      offset -= strides[d] * (dims[d] - 1);
      index[k] = 0;
    }
    if (k < 0) return offsets;
  }
}

template <typename T>
std::vector<T> Pack(const Tensor& tensor, const std::vector<int64_t>& order) {
  std::vector<T> packed;
  packed.reserve(static_cast<size_t>(tensor.ElementCount()));
  for (int64_t offset : PermutedOffsets(tensor, order)) {
    if constexpr (std::is_same_v<T, int64_t>) {
      packed.push_back(tensor.GetInt(offset));
    } else {
      packed.push_back(static_cast<T>(tensor.GetDouble(offset)));
    }
  }
  return packed;
}

struct DotGeometry {
  int64_t batch = 1, m = 1, k = 1, n = 1;
  std::vector<int64_t> lhs_order;  // batch, free, contracting
  std::vector<int64_t> rhs_order;  // batch, contracting, free
};

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

DotGeometry Geometry(const Tensor& lhs, const Tensor& rhs, const ir::DotDimensions& dims) {
  const auto& ld = lhs.shape().dims();
  const auto& rd = rhs.shape().dims();
  const std::vector<int64_t> lhs_free =
      ir::FreeDimensions(lhs.shape().rank(), dims.lhs_batch, dims.lhs_contracting);
  const std::vector<int64_t> rhs_free =
      ir::FreeDimensions(rhs.shape().rank(), dims.rhs_batch, dims.rhs_contracting);
  DotGeometry g;
  g.batch = Product(ld, dims.lhs_batch);
  g.m = Product(ld, lhs_free);
  g.k = Product(ld, dims.lhs_contracting);
  g.n = Product(rd, rhs_free);
  g.lhs_order = Concat(Concat(dims.lhs_batch, lhs_free), dims.lhs_contracting);
  g.rhs_order = Concat(Concat(dims.rhs_batch, dims.rhs_contracting), rhs_free);
  return g;
}

// Integers: every element sums over k in increasing order in int64, wrapping
// instead of overflowing. The loops run i, k, j with one accumulator per
// element of an output row, which keeps that order per element while reading
// both operands row by row.
void IntegerDot(const DotGeometry& g, const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                Tensor& out) {
  std::vector<int64_t> row(static_cast<size_t>(g.n));
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    const int64_t* a_batch = a.data() + batch * g.m * g.k;
    const int64_t* b_batch = b.data() + batch * g.k * g.n;
    for (int64_t i = 0; i < g.m; ++i) {
      std::fill(row.begin(), row.end(), 0);
      for (int64_t p = 0; p < g.k; ++p) {
        const auto lhs = static_cast<uint64_t>(a_batch[i * g.k + p]);
        const int64_t* rhs = b_batch + p * g.n;
        for (int64_t j = 0; j < g.n; ++j) {
          row[j] = static_cast<int64_t>(static_cast<uint64_t>(row[j]) +
                                        lhs * static_cast<uint64_t>(rhs[j]));
        }
      }
      for (int64_t j = 0; j < g.n; ++j) out.SetInt((batch * g.m + i) * g.n + j, row[j]);
    }
  }
}

// Floats in deterministic mode: cpu::DeterministicGemm, whose every element
// sums over k in increasing order in double, whatever the sizes, the block of
// the output or the CPU; rounded once to the result type.
void DeterministicFloatDot(const DotGeometry& g, const std::vector<double>& a,
                           const std::vector<double>& b, Tensor& out) {
  std::vector<double> c(static_cast<size_t>(g.m * g.n));
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    cpu::DeterministicGemmReference({a.data() + batch * g.m * g.k, g.m, g.k, g.k, 1},
                                    {b.data() + batch * g.k * g.n, g.k, g.n, g.n, 1}, c.data(),
                                    g.n);
    for (int64_t i = 0; i < g.m * g.n; ++i) out.SetDouble(batch * g.m * g.n + i, c[i]);
  }
}

template <typename T>
void BlasDot(const DotGeometry& g, const Tensor& lhs, const Tensor& rhs, Tensor& out) {
  const std::vector<T> a = Pack<T>(lhs, g.lhs_order);
  const std::vector<T> b = Pack<T>(rhs, g.rhs_order);
  std::vector<T> c(static_cast<size_t>(g.batch * g.m * g.n), T{0});
  if (g.k > 0 && g.m > 0 && g.n > 0) {
    for (int64_t batch = 0; batch < g.batch; ++batch) {
      const T* a_batch = a.data() + batch * g.m * g.k;
      const T* b_batch = b.data() + batch * g.k * g.n;
      T* c_batch = c.data() + batch * g.m * g.n;
      if constexpr (std::is_same_v<T, float>) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, g.k, 1.0f, a_batch, g.k,
                    b_batch, g.n, 0.0f, c_batch, g.n);
      } else {
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g.m, g.n, g.k, 1.0, a_batch, g.k,
                    b_batch, g.n, 0.0, c_batch, g.n);
      }
    }
  }
  for (size_t i = 0; i < c.size(); ++i) out.SetDouble(static_cast<int64_t>(i), c[i]);
}

}  // namespace

Expected<Tensor> ReferenceDot(const Tensor& lhs, const Tensor& rhs, const ir::DotDimensions& dims,
                              const ir::Shape& result_shape, bool deterministic) {
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros(result_shape));
  const DotGeometry g = Geometry(lhs, rhs, dims);
  if (g.batch * g.m * g.n != out.ElementCount()) {
    return Error{fmt::format("dot result {} does not match its operands",
                             result_shape.ToString(/*print_layout=*/false)),
                 SourceLoc{}};
  }
  const ir::PrimitiveType type = result_shape.type();
  // Floating-point dots go through BLAS: f64 with dgemm, and f32, bf16, f16
  // and f8 (widened exactly to f32) with sgemm, accumulating in f32 and
  // rounding once to the result type, as XLA's CPU backend does.
  const bool floating = ir::IsFloatingPoint(type) && ir::IsFloatingPoint(lhs.type()) &&
                        ir::IsFloatingPoint(rhs.type());
  const bool wide = type == ir::PrimitiveType::kF64 || lhs.type() == ir::PrimitiveType::kF64 ||
                    rhs.type() == ir::PrimitiveType::kF64;
  if (!deterministic && floating && !wide) {
    BlasDot<float>(g, lhs, rhs, out);
  } else if (!deterministic && floating) {
    BlasDot<double>(g, lhs, rhs, out);
  } else if (ir::IsInteger(type) || type == ir::PrimitiveType::kPred) {
    IntegerDot(g, Pack<int64_t>(lhs, g.lhs_order), Pack<int64_t>(rhs, g.rhs_order), out);
  } else {
    DeterministicFloatDot(g, Pack<double>(lhs, g.lhs_order), Pack<double>(rhs, g.rhs_order), out);
  }
  return out;
}

}  // namespace loom::exec
