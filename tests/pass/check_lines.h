// A small FileCheck for pass tests: CHECK lines matched in order against a
// printed module, CHECK-NOT and CHECK-COUNT-N over the whole text.
//
//   CHECK: text        the next occurrence of `text` after the previous CHECK
//   CHECK-NOT: text    `text` occurs nowhere
//   CHECK-COUNT-3: t   `t` occurs exactly 3 times
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

namespace loom::test {

inline size_t CountOccurrences(std::string_view text, std::string_view needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

inline std::string_view TrimLeft(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  return text;
}

// Empty when every check holds, else what failed (the text is appended).
inline std::string CheckLines(std::string_view text, std::string_view checks) {
  std::istringstream lines{std::string(checks)};
  std::string line;
  size_t position = 0;
  std::string failures;
  while (std::getline(lines, line)) {
    std::string_view check = TrimLeft(line);
    if (check.empty()) continue;
    const size_t colon = check.find(':');
    if (colon == std::string_view::npos) return "malformed check: " + line;
    const std::string_view directive = check.substr(0, colon);
    const std::string_view pattern = TrimLeft(check.substr(colon + 1));
    if (directive == "CHECK") {
      const size_t at = text.find(pattern, position);
      if (at == std::string_view::npos) {
        failures += "  not found after the previous match: " + std::string(pattern) + "\n";
      } else {
        position = at + pattern.size();
      }
    } else if (directive == "CHECK-NOT") {
      if (text.find(pattern) != std::string_view::npos) {
        failures += "  found but must not be: " + std::string(pattern) + "\n";
      }
    } else if (directive.starts_with("CHECK-COUNT-")) {
      const size_t want = std::strtoul(std::string(directive.substr(12)).c_str(), nullptr, 10);
      const size_t got = CountOccurrences(text, pattern);
      if (got != want) {
        failures += "  " + std::to_string(got) + " occurrences (want " + std::to_string(want) +
                    "): " + std::string(pattern) + "\n";
      }
    } else {
      return "unknown directive: " + line;
    }
  }
  if (failures.empty()) return "";
  return failures + "in:\n" + std::string(text);
}

}  // namespace loom::test
