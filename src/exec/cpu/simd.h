// Vectorised loops of the element-wise kernels that the compiler cannot
// vectorise well for the baseline x86-64 (SSE2) on its own: bf16 to and from
// f32, and binary arithmetic on bf16 and f32. Highway compiles them for every
// SIMD target and picks the widest one the CPU has at run time. Each gives
// bit for bit the result of the scalar definitions in float_formats.h and
// elementwise.cc (round to nearest even, NaN to the canonical quiet NaN, max
// and min returning the first operand when the two compare equal), on every
// target; tests/exec/simd_test.cc checks that on every target this CPU runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "ir/opcode.h"

namespace loom::exec::cpu::simd {

enum class Binary { kAdd, kSubtract, kMultiply, kDivide, kMaximum, kMinimum };

// The vectorised loop of an HLO binary op, where there is one.
inline std::optional<Binary> BinaryOf(ir::Opcode op) {
  switch (op) {
    case ir::Opcode::kAdd:
      return Binary::kAdd;
    case ir::Opcode::kSubtract:
      return Binary::kSubtract;
    case ir::Opcode::kMultiply:
      return Binary::kMultiply;
    case ir::Opcode::kDivide:
      return Binary::kDivide;
    case ir::Opcode::kMaximum:
      return Binary::kMaximum;
    case ir::Opcode::kMinimum:
      return Binary::kMinimum;
    default:
      return std::nullopt;
  }
}

void Bf16ToF32(const uint16_t* in, float* out, size_t n);
void F32ToBf16(const float* in, uint16_t* out, size_t n);
// out may be a or b.
void Bf16Binary(Binary op, const uint16_t* a, const uint16_t* b, uint16_t* out, size_t n);
void F32Binary(Binary op, const float* a, const float* b, float* out, size_t n);

}  // namespace loom::exec::cpu::simd
