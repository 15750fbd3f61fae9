// dot on the CPU. An operand's dimensions fall into three groups: batch,
// free (the rows of the lhs, the columns of the rhs) and contracting. When
// each group's dimensions are contiguous in memory (they merge into one index
// with one stride) and one of the two matrix indices has stride 1, BLAS reads
// the operand where it is, with a transpose flag and a leading dimension,
// batch by batch at its offset. Otherwise, and for element types BLAS does
// not have (bf16, f16, f8), the operand is packed once into a [batch][rows]
// [cols] buffer of the compute type; that is the only copy.
//
// Fast path (OpenBLAS): sgemm for f32 and narrower floats (widened exactly
// to f32, accumulating in f32, rounded once to the result type, as XLA's CPU
// backend does), dgemm when an operand or the result is f64. Deterministic
// path (and integer operands under a float result): exec/cpu/
// deterministic_gemm.h, double accumulation in a fixed order per element.
// Integer results: int64 accumulation with wraparound, in the same order.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "exec/cpu/deterministic_gemm.h"
#include "exec/cpu/float_formats.h"
#include "exec/cpu/kernels.h"
#include "exec/cpu/simd.h"
#include "exec/tensor.h"

namespace loom::exec::cpu {
namespace {

using ir::PrimitiveType;

// The linear offsets (in elements) that one group of dimensions of a
// row-major operand enumerates, in the group's order, last dimension fastest.
std::vector<int64_t> GroupOffsets(const ir::Shape& shape, const std::vector<int64_t>& group) {
  std::vector<int64_t> strides(static_cast<size_t>(shape.rank()), 1);
  for (int64_t d = shape.rank() - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape.dim(d + 1);
  std::vector<int64_t> offsets = {0};
  for (int64_t d : group) {
    std::vector<int64_t> next;
    next.reserve(offsets.size() * static_cast<size_t>(shape.dim(d)));
    for (int64_t base : offsets) {
      for (int64_t i = 0; i < shape.dim(d); ++i) next.push_back(base + i * strides[d]);
    }
    offsets = std::move(next);
  }
  return offsets;
}

// One stride that enumerates `offsets` (an arithmetic progression from 0),
// or -1. A group of one element has any stride: 1.
int64_t UniformStride(const std::vector<int64_t>& offsets) {
  if (offsets.size() <= 1) return 1;
  const int64_t stride = offsets[1] - offsets[0];
  for (size_t i = 1; i < offsets.size(); ++i) {
    if (offsets[i] - offsets[i - 1] != stride) return -1;
  }
  return stride;
}

// One operand as batch x rows x cols (lhs: rows = free, cols = contracting;
// rhs: rows = contracting, cols = free).
struct OperandView {
  const HostArray* array = nullptr;
  std::vector<int64_t> batch_offsets, row_offsets, col_offsets;
  int64_t row_stride = -1, col_stride = -1;  // -1: not one stride
  int64_t rows() const { return static_cast<int64_t>(row_offsets.size()); }
  int64_t cols() const { return static_cast<int64_t>(col_offsets.size()); }
};

OperandView ViewOf(const HostArray& array, const std::vector<int64_t>& batch,
                   const std::vector<int64_t>& rows, const std::vector<int64_t>& cols) {
  OperandView view;
  view.array = &array;
  view.batch_offsets = GroupOffsets(*array.shape, batch);
  view.row_offsets = GroupOffsets(*array.shape, rows);
  view.col_offsets = GroupOffsets(*array.shape, cols);
  view.row_stride = UniformStride(view.row_offsets);
  view.col_stride = UniformStride(view.col_offsets);
  return view;
}

// Rows [first, last) of one batch of the view, packed as [rows][cols] of T
// into `out`: element-type dispatch once, then a typed loop per row.
template <typename T, typename Source, typename Convert>
void PackRowsOf(const OperandView& v, int64_t batch, int64_t first, int64_t last,
                const Source* source, Convert convert, T* out) {
  const int64_t cols = v.cols();
  for (int64_t r = first; r < last; ++r, out += cols) {
    const Source* row = source + v.batch_offsets[batch] + v.row_offsets[r];
    if (v.col_stride > 0) {
      const int64_t stride = v.col_stride;
      for (int64_t c = 0; c < cols; ++c) out[c] = convert(row[c * stride]);
    } else {
      for (int64_t c = 0; c < cols; ++c) out[c] = convert(row[v.col_offsets[c]]);
    }
  }
}

template <typename T>
void PackRows(const OperandView& v, int64_t batch, int64_t first, int64_t last, T* out) {
  const HostArray& a = *v.array;
  switch (a.type()) {
    case PrimitiveType::kF32:
      return PackRowsOf(
          v, batch, first, last, a.as<float>(), [](float x) { return static_cast<T>(x); }, out);
    case PrimitiveType::kF64:
      return PackRowsOf(
          v, batch, first, last, a.as<double>(), [](double x) { return static_cast<T>(x); }, out);
    case PrimitiveType::kBF16:
      if constexpr (std::is_same_v<T, float>) {
        if (v.col_stride == 1) {  // contiguous bf16 rows: vectorised widening
          for (int64_t r = first; r < last; ++r, out += v.cols()) {
            simd::Bf16ToF32(a.as<uint16_t>() + v.batch_offsets[batch] + v.row_offsets[r], out,
                            static_cast<size_t>(v.cols()));
          }
          return;
        }
      }
      return PackRowsOf(
          v, batch, first, last, a.as<uint16_t>(),
          [](uint16_t x) { return static_cast<T>(Bf16ToFloat(x)); }, out);
    case PrimitiveType::kF16:
      return PackRowsOf(
          v, batch, first, last, a.as<uint16_t>(),
          [](uint16_t x) { return static_cast<T>(F16ToFloat(x)); }, out);
    default:
      // Integers and f8, element by element as the reference reads them.
      for (int64_t r = first; r < last; ++r) {
        for (int64_t col_offset : v.col_offsets) {
          const int64_t i = v.batch_offsets[batch] + v.row_offsets[r] + col_offset;
          if constexpr (std::is_same_v<T, int64_t>) {
            *out++ = LoadInt(a.data, a.type(), i);
          } else {
            *out++ = static_cast<T>(LoadDouble(a.data, a.type(), i));
          }
        }
      }
  }
}

// The whole view packed as [batch][rows][cols] of T.
template <typename T>
std::vector<T> Pack(const OperandView& v) {
  std::vector<T> packed(v.batch_offsets.size() * v.row_offsets.size() * v.col_offsets.size());
  for (int64_t b = 0; b < static_cast<int64_t>(v.batch_offsets.size()); ++b) {
    PackRows(v, b, 0, v.rows(), packed.data() + b * v.rows() * v.cols());
  }
  return packed;
}

// How many rows of a [rows][width] block of T fit the working memory a dot
// takes for its temporaries (packed lhs rows, unrounded results), so that a
// bf16 product never holds more than a few MiB beside its operands.
template <typename T>
int64_t RowsPerBlock(int64_t rows, int64_t width) {
  constexpr int64_t kBlockBytes = int64_t{2} << 20;
  const int64_t fit = kBlockBytes / (std::max<int64_t>(width, 1) * static_cast<int64_t>(sizeof(T)));
  return std::clamp<int64_t>(fit, 64, std::max<int64_t>(rows, 1));
}

// A matrix as BLAS reads it: a pointer per batch, transposed or not, with a
// leading dimension; packed when the view cannot be read in place.
template <typename T>
struct BlasMatrix {
  std::vector<T> packed;
  std::vector<const T*> batches;
  bool transposed = false;
  int64_t leading = 1;
};

// In place when the view has the BLAS type and one stride 1; else empty.
template <typename T>
std::optional<BlasMatrix<T>> InPlace(const OperandView& v, PrimitiveType blas_type) {
  BlasMatrix<T> m;
  const int64_t rows = v.rows(), cols = v.cols();
  if (v.array->type() != blas_type) return std::nullopt;
  if (v.col_stride == 1 && (rows <= 1 || v.row_stride >= std::max<int64_t>(cols, 1))) {
    m.leading = rows <= 1 ? std::max<int64_t>(cols, 1) : v.row_stride;
  } else if (v.row_stride == 1 && (cols <= 1 || v.col_stride >= std::max<int64_t>(rows, 1))) {
    m.transposed = true;
    m.leading = cols <= 1 ? std::max<int64_t>(rows, 1) : v.col_stride;
  } else {
    return std::nullopt;
  }
  const T* base = v.array->as<T>();
  for (int64_t offset : v.batch_offsets) m.batches.push_back(base + offset);
  return m;
}

template <typename T>
BlasMatrix<T> ForBlas(const OperandView& v, PrimitiveType blas_type) {
  if (std::optional<BlasMatrix<T>> in_place = InPlace<T>(v, blas_type)) return *in_place;
  BlasMatrix<T> m;
  m.packed = Pack<T>(v);
  m.leading = std::max<int64_t>(v.cols(), 1);
  for (size_t b = 0; b < v.batch_offsets.size(); ++b) {
    m.batches.push_back(m.packed.data() + b * v.rows() * v.cols());
  }
  return m;
}

CBLAS_TRANSPOSE Flag(bool transposed) { return transposed ? CblasTrans : CblasNoTrans; }

// Writes `count` unrounded results (row-major) into `out` from element
// `first` on, rounded to its type.
template <typename T>
void StoreResults(const T* c, int64_t count, const HostArray& out, int64_t first) {
  switch (out.type()) {
    case PrimitiveType::kF32:
      for (int64_t i = 0; i < count; ++i) out.as<float>()[first + i] = static_cast<float>(c[i]);
      return;
    case PrimitiveType::kF64:
      for (int64_t i = 0; i < count; ++i) out.as<double>()[first + i] = static_cast<double>(c[i]);
      return;
    case PrimitiveType::kBF16:
      if constexpr (std::is_same_v<T, float>) {
        simd::F32ToBf16(c, out.as<uint16_t>() + first, static_cast<size_t>(count));
      } else {
        for (int64_t i = 0; i < count; ++i) {
          out.as<uint16_t>()[first + i] = DoubleToBf16(static_cast<double>(c[i]));
        }
      }
      return;
    case PrimitiveType::kF16:
      for (int64_t i = 0; i < count; ++i) {
        out.as<uint16_t>()[first + i] = std::is_same_v<T, float>
                                            ? FloatToF16(static_cast<float>(c[i]))
                                            : DoubleToF16(static_cast<double>(c[i]));
      }
      return;
    default:
      for (int64_t i = 0; i < count; ++i) {
        if constexpr (std::is_same_v<T, int64_t>) {
          StoreInt(out.data, out.type(), first + i, c[i]);
        } else {
          StoreDouble(out.data, out.type(), first + i, static_cast<double>(c[i]));
        }
      }
  }
}

struct DotShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
};

template <typename T>
void Gemm(const BlasMatrix<T>& a, const T* a_rows, const BlasMatrix<T>& b, int64_t batch, int64_t m,
          int64_t n, int64_t k, T* c) {
  if (k == 0) {
    std::fill_n(c, m * n, T{0});
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, Flag(a.transposed), Flag(b.transposed), m, n, k, 1.0f, a_rows,
                a.leading, b.batches[batch], b.leading, 0.0f, c, n);
  } else {
    cblas_dgemm(CblasRowMajor, Flag(a.transposed), Flag(b.transposed), m, n, k, 1.0, a_rows,
                a.leading, b.batches[batch], b.leading, 0.0, c, n);
  }
}

// One BLAS call per batch when both operands are read in place and the
// result has the BLAS type; else per block of rows: the lhs rows packed and
// the results rounded block by block, so that temporaries stay small.
template <typename T>
void BlasDot(const DotShape& s, const OperandView& lhs, const OperandView& rhs,
             const HostArray& out, PrimitiveType blas_type) {
  const BlasMatrix<T> b = ForBlas<T>(rhs, blas_type);
  const std::optional<BlasMatrix<T>> a_in_place = InPlace<T>(lhs, blas_type);
  const bool direct_result = out.type() == blas_type;
  if (a_in_place && direct_result) {
    for (int64_t batch = 0; batch < s.batch; ++batch) {
      Gemm(*a_in_place, a_in_place->batches[batch], b, batch, s.m, s.n, s.k,
           out.as<T>() + batch * s.m * s.n);
    }
    return;
  }
  const int64_t block = RowsPerBlock<T>(s.m, std::max(s.k, s.n));
  std::vector<T> a_rows(a_in_place ? 0 : static_cast<size_t>(block * s.k));
  std::vector<T> c_rows(direct_result ? 0 : static_cast<size_t>(block * s.n));
  BlasMatrix<T> packed_a;
  packed_a.leading = std::max<int64_t>(s.k, 1);
  for (int64_t batch = 0; batch < s.batch; ++batch) {
    for (int64_t r0 = 0; r0 < s.m; r0 += block) {
      const int64_t rows = std::min(block, s.m - r0);
      const T* a = nullptr;
      const BlasMatrix<T>* a_matrix = &packed_a;
      if (a_in_place) {
        a_matrix = &*a_in_place;
        a = a_in_place->batches[batch] + r0 * (a_in_place->transposed ? 1 : a_in_place->leading);
      } else {
        PackRows(lhs, batch, r0, r0 + rows, a_rows.data());
        a = a_rows.data();
      }
      const int64_t first = (batch * s.m + r0) * s.n;
      T* c = direct_result ? out.as<T>() + first : c_rows.data();
      Gemm(*a_matrix, a, b, batch, rows, s.n, s.k, c);
      if (!direct_result) StoreResults(c, rows * s.n, out, first);
    }
  }
}

// Whether every value of `type` is exactly a single-precision number, which
// makes products of two of them exact in double (see deterministic_gemm.h).
bool ExactlySinglePrecision(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
    case PrimitiveType::kBF16:
    case PrimitiveType::kF16:
    case PrimitiveType::kF8E4M3FN:
    case PrimitiveType::kF8E5M2:
    case PrimitiveType::kPred:
    case PrimitiveType::kS8:
    case PrimitiveType::kU8:
    case PrimitiveType::kS16:
    case PrimitiveType::kU16:
      return true;
    default:
      return false;
  }
}

// The deterministic kernel reads f32, f64, bf16 and f16 where they are (any
// strides); other types are packed as double first.
std::optional<GemmElement> GemmElementOf(PrimitiveType type) {
  switch (type) {
    case PrimitiveType::kF32:
      return GemmElement::kF32;
    case PrimitiveType::kF64:
      return GemmElement::kF64;
    case PrimitiveType::kBF16:
      return GemmElement::kBF16;
    case PrimitiveType::kF16:
      return GemmElement::kF16;
    default:
      return std::nullopt;
  }
}

// Rows [first, first + rows) of one batch of the view, as the kernel reads it.
GemmOperand RowsOf(const OperandView& v, int64_t batch, int64_t first, int64_t rows,
                   GemmElement type) {
  const int64_t element = ir::PrimitiveTypeBits(v.array->type()) / 8;
  const std::byte* base =
      v.array->data + (v.batch_offsets[batch] + (rows > 0 ? v.row_offsets[first] : 0)) * element;
  return {base, type, rows, v.cols(), v.row_stride, v.col_stride};
}

// The sums are partition-invariant, so computing the result in blocks of
// rows gives the same bits as computing it whole; the blocks bound the
// double temporaries.
void DeterministicDot(const DotShape& s, const OperandView& lhs, const OperandView& rhs,
                      const HostArray& out) {
  const std::optional<GemmElement> lt = GemmElementOf(lhs.array->type());
  const std::optional<GemmElement> rt = GemmElementOf(rhs.array->type());
  const bool strided =
      lhs.row_stride > 0 && lhs.col_stride > 0 && rhs.row_stride > 0 && rhs.col_stride > 0;
  if (!strided || !lt || !rt) {
    // Integers, f8 or layouts without one stride per group: packed as double.
    const std::vector<double> a = Pack<double>(lhs), b = Pack<double>(rhs);
    const bool exact =
        ExactlySinglePrecision(lhs.array->type()) && ExactlySinglePrecision(rhs.array->type());
    std::vector<double> c(static_cast<size_t>(s.m * s.n));
    for (int64_t batch = 0; batch < s.batch; ++batch) {
      DeterministicGemm(StridedMatrix<double>{a.data() + batch * s.m * s.k, s.m, s.k, s.k, 1},
                        StridedMatrix<double>{b.data() + batch * s.k * s.n, s.k, s.n, s.n, 1},
                        c.data(), s.n, exact);
      StoreResults(c.data(), s.m * s.n, out, batch * s.m * s.n);
    }
    return;
  }
  const int64_t block = RowsPerBlock<double>(s.m, s.n);
  std::vector<double> c(static_cast<size_t>(block * s.n));
  for (int64_t batch = 0; batch < s.batch; ++batch) {
    const GemmOperand b{
        rhs.array->data + rhs.batch_offsets[batch] * (ir::PrimitiveTypeBits(rhs.array->type()) / 8),
        *rt,
        s.k,
        s.n,
        rhs.row_stride,
        rhs.col_stride};
    for (int64_t r0 = 0; r0 < s.m; r0 += block) {
      const int64_t rows = std::min(block, s.m - r0);
      DeterministicGemm(RowsOf(lhs, batch, r0, rows, *lt), b, c.data(), s.n);
      StoreResults(c.data(), rows * s.n, out, (batch * s.m + r0) * s.n);
    }
  }
}

// Integers: int64 sums over k in increasing order, wrapping.
void IntegerDot(const DotShape& s, const OperandView& lhs, const OperandView& rhs,
                const HostArray& out) {
  const std::vector<int64_t> a = Pack<int64_t>(lhs), b = Pack<int64_t>(rhs);
  std::vector<int64_t> c(static_cast<size_t>(s.batch * s.m * s.n), 0);
  for (int64_t batch = 0; batch < s.batch; ++batch) {
    for (int64_t i = 0; i < s.m; ++i) {
      int64_t* row = c.data() + (batch * s.m + i) * s.n;
      for (int64_t p = 0; p < s.k; ++p) {
        const auto x = static_cast<uint64_t>(a[(batch * s.m + i) * s.k + p]);
        const int64_t* rhs_row = b.data() + (batch * s.k + p) * s.n;
        for (int64_t j = 0; j < s.n; ++j) {
          row[j] = static_cast<int64_t>(static_cast<uint64_t>(row[j]) +
                                        x * static_cast<uint64_t>(rhs_row[j]));
        }
      }
    }
  }
  StoreResults(c.data(), static_cast<int64_t>(c.size()), out, 0);
}

}  // namespace

Status Dot(const ir::Instruction& op, const HostArray& lhs, const HostArray& rhs,
           const HostArray& out, bool deterministic) {
  const ir::DotDimensions dims = op.attrs().dot.value_or(ir::DotDimensions{});
  const std::vector<int64_t> lhs_free =
      ir::FreeDimensions(lhs.shape->rank(), dims.lhs_batch, dims.lhs_contracting);
  const std::vector<int64_t> rhs_free =
      ir::FreeDimensions(rhs.shape->rank(), dims.rhs_batch, dims.rhs_contracting);
  const OperandView a = ViewOf(lhs, dims.lhs_batch, lhs_free, dims.lhs_contracting);
  const OperandView b = ViewOf(rhs, dims.rhs_batch, dims.rhs_contracting, rhs_free);
  DotShape s;
  s.batch = static_cast<int64_t>(a.batch_offsets.size());
  s.m = a.rows();
  s.k = a.cols();
  s.n = b.cols();
  if (static_cast<int64_t>(b.batch_offsets.size()) != s.batch || b.rows() != s.k ||
      s.batch * s.m * s.n != out.elements()) {
    return KernelError(op, fmt::format("dot result {} does not match its operands",
                                       out.shape->ToString(/*print_layout=*/false)));
  }
  const PrimitiveType type = out.type();
  const bool floating = ir::IsFloatingPoint(type) && ir::IsFloatingPoint(lhs.type()) &&
                        ir::IsFloatingPoint(rhs.type());
  const bool wide = type == PrimitiveType::kF64 || lhs.type() == PrimitiveType::kF64 ||
                    rhs.type() == PrimitiveType::kF64;
  if (!deterministic && floating && !wide) {
    BlasDot<float>(s, a, b, out, PrimitiveType::kF32);
  } else if (!deterministic && floating) {
    BlasDot<double>(s, a, b, out, PrimitiveType::kF64);
  } else if (ir::IsInteger(type) || type == PrimitiveType::kPred) {
    IntegerDot(s, a, b, out);
  } else {
    DeterministicDot(s, a, b, out);
  }
  return OkStatus();
}

}  // namespace loom::exec::cpu
