// libFuzzer target over the parser, the verifier and the printer.
//
// Any input may be rejected with an error; none may crash, hang, leak or
// trip a sanitizer. A module that parses and verifies must also round-trip:
// its print parses again to the same module, and printing that gives the
// same text (a fixed point after one round). A failure there is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "ir/compare.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace {

[[noreturn]] void Finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "parse_verify_fuzzer: %s\n%s\n", what, detail.c_str());
  __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto module = loom::ir::ParseModule(text);
  if (!module.ok()) return 0;
  auto report = loom::ir::VerifyModule(**module);
  if (!report.ok()) return 0;

  std::string printed = loom::ir::PrintModule(**module);
  auto reparsed = loom::ir::ParseModule(printed);
  if (!reparsed.ok()) {
    Finding("the print of a valid module does not parse",
            reparsed.error().ToString() + "\n--- print ---\n" + printed);
  }
  if (std::string diff = loom::ir::FirstDifference(**module, **reparsed); !diff.empty()) {
    Finding("parse(print(module)) differs from module", diff + "\n--- print ---\n" + printed);
  }
  if (loom::ir::PrintModule(**reparsed) != printed) {
    Finding("printing is not a fixed point after one round", printed);
  }
  return 0;
}
