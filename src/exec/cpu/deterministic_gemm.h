// The deterministic matrix product: C = A · B where every element is
//
//   c_ij = (((0 + a_i0·b_0j) + a_i1·b_1j) + ...) + a_i(K-1)·b_(K-1)j
//
// accumulated in double, the contracted index in increasing order. That order
// is a property of the element alone: it does not depend on the matrix sizes,
// on where the element sits in C, on how C is split into blocks of rows or
// columns (the rings of collective-matmul compute C block by block), on the
// SIMD width or on the CPU. So a product computed whole and the same product
// computed block by block are bitwise equal on every x86-64 CPU, which no BLAS
// promises (OpenBLAS and BLIS pick kernels by CPU and size, and a block of a
// product differs from the same rows of the whole in the last bit on some
// kernels: measured for OpenBLAS's Haswell and Zen kernels).
//
// Speed comes from blocking and SIMD (Highway, dispatched at run time to the
// widest vectors the CPU has), never from reordering a sum: the K loop runs in
// order inside every register tile, and a tile's partial sums are stored as
// doubles between K blocks, which is the same as keeping them in registers.
//
// Fused multiply-add: when both operands are at most single precision, every
// product a·b is exact in double (24 + 24 significant bits <= 53, exponents in
// range), so fma(a, b, c) and c + a·b round identically and the kernel uses
// FMA where the CPU has it. Double operands use a separate multiply and add,
// so that the result does not depend on whether the CPU has FMA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::exec::cpu {

// A read-only matrix of `rows` x `cols` elements of T with arbitrary strides:
// element (i, j) is data[i * row_stride + j * col_stride] (a transposed view
// swaps the strides).
template <typename T>
struct StridedMatrix {
  const T* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// An operand of any of the float types the kernel reads directly (it widens
// each value to double as it packs its panels).
enum class GemmElement { kF32, kF64, kBF16, kF16 };
struct GemmOperand {
  const void* data = nullptr;
  GemmElement type = GemmElement::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// c (m x n, row-major with leading dimension ldc) = a (m x k) · b (k x n),
// every element summed as the header describes. FMA is used when neither
// operand is f64 (every product is then exact in double).
void DeterministicGemm(const GemmOperand& a, const GemmOperand& b, double* c, int64_t ldc);

// The same for double and float matrices; `exact_products` must be true
// only when every value of both operands is exactly a single-precision
// number (it enables FMA).
void DeterministicGemm(const StridedMatrix<double>& a, const StridedMatrix<double>& b, double* c,
                       int64_t ldc, bool exact_products);
void DeterministicGemm(const StridedMatrix<float>& a, const StridedMatrix<float>& b, double* c,
                       int64_t ldc);

// The same sums with one loop per element: the definition the fast kernel is
// tested against.
void DeterministicGemmReference(const StridedMatrix<double>& a, const StridedMatrix<double>& b,
                                double* c, int64_t ldc);

// The SIMD targets this CPU runs the kernel with (the first is the one used),
// by name, for reports and for tests that run every one.
std::vector<std::string> DeterministicGemmTargets();

}  // namespace loom::exec::cpu
