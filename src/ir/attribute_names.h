// The attribute names XLA's HLO text defines (xla/hlo/parser/hlo_parser.cc),
// so that the verifier can warn about a name XLA would reject: most often a
// misspelling (`dimension=` for `dimensions=`), which Loom would otherwise
// keep verbatim and silently ignore.
#pragma once

#include <string_view>

namespace loom::ir {

// `key=` of an instruction, for any opcode.
bool IsXlaInstructionAttribute(std::string_view key);
// `key=` of the `HloModule` header.
bool IsXlaHeaderAttribute(std::string_view key);

}  // namespace loom::ir
