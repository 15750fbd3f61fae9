// Parser of XLA's HLO text: newer dumps (`name {`) and older ones
// (`%name (p: f32[10]) -> f32[20] {`), instructions split over lines,
// operands printed with their shapes, inline operand instructions
// (`add(%x, s32[] constant(1))`), `/*...*/` and `//` comments, and the
// debug-info sections (FileNames, StackFrames, ...). Attributes Loom does
// not interpret are kept verbatim.
//
// The parser checks syntax and resolves names; semantic checks (shapes,
// operand counts, definition before use, cycles) belong to the verifier.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "ir/module.h"
#include "support/status.h"

namespace loom::ir {

// Parses a whole module. Errors carry the line and column of the offending
// token.
Expected<std::unique_ptr<Module>> ParseModule(std::string_view text);

// The largest text ParseModuleFile reads (dumps of the largest models are a
// few hundred MiB, most of it metadata).
inline constexpr size_t kMaxModuleBytes = size_t{1} << 30;

// Reads `path` and parses it. A file that cannot be read, or that is larger
// than kMaxModuleBytes (a device that never ends, /dev/zero), is an error
// with no location.
Expected<std::unique_ptr<Module>> ParseModuleFile(const std::string& path);

}  // namespace loom::ir
