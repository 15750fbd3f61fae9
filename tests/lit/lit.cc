// loom_lit: runs one lit-style test file, as MLIR's and XLA's FileCheck tests
// do. Usage: loom_lit LOOM_BINARY TEST_FILE
//
// The test file is an HLO module with directives in `//` comments:
//
//   // RUN: loom opt %s --passes=async-collectives
//   // CHECK-LABEL: ENTRY %main
//   // CHECK:      %[[START:[a-z.0-9-]+]] = {{.*}} all-gather-start(
//   // CHECK-NEXT: all-gather-done(%[[START]])
//   // CHECK-NOT:  all-gather(
//
// Each RUN line is a shell command (`loom` is the binary under test, `%s`
// this file, `%t` and `%t.2` temporary files); its stdout and stderr together are checked against
// the CHECK lines of its prefix: `RUN:` uses CHECK, `RUN(P):` uses P (P:, P-NEXT:, ...). A command
// must exit 0, unless it starts with `not `, which wants non-zero.
//
//   CHECK:       the output after the last match matches (on its line too)
//   CHECK-NEXT:  the line right after the last match matches
//   CHECK-LABEL: like CHECK; CHECK-NOT never looks across it
//   CHECK-NOT:   no line between the lines of the matches around it matches
//   CHECK-COUNT-N: N CHECKs of the pattern in a row (FileCheck's meaning;
//                with a CHECK-NOT of it after, exactly N from there on)
//
// A pattern is literal text with {{regex}} and captures: [[NAME:regex]]
// binds what it matched, [[NAME]] must match it again. A failed check prints
// the test's line, the pattern, and the output line nearest to it.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Check {
  std::string kind;  // "", "NEXT", "LABEL", "NOT"
  std::string pattern;
  int line = 0;  // in the test file
};

struct Run {
  std::string prefix;
  std::string command;
  int line = 0;
};

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string Trim(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::string EscapeRegex(const std::string& text) {
  static const std::string kSpecial = R"(\^$.|?*+()[]{})";
  std::string out;
  for (char c : text) {
    if (kSpecial.find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// The regex of a pattern, and the capture names of its groups in order.
struct CompiledPattern {
  std::regex regex;
  std::vector<std::string> captures;
  std::string literal;  // the pattern's plain text, for "nearest line"
};

std::optional<CompiledPattern> Compile(const std::string& pattern,
                                       const std::map<std::string, std::string>& bound,
                                       std::string& error) {
  std::string re;
  CompiledPattern compiled;
  for (size_t i = 0; i < pattern.size();) {
    if (pattern.compare(i, 2, "{{") == 0) {
      const size_t end = pattern.find("}}", i + 2);
      if (end == std::string::npos) {
        error = "unterminated {{";
        return std::nullopt;
      }
      re += "(?:" + pattern.substr(i + 2, end - i - 2) + ")";
      i = end + 2;
    } else if (pattern.compare(i, 2, "[[") == 0) {
      const size_t end = pattern.find("]]", i + 2);
      if (end == std::string::npos) {
        error = "unterminated [[";
        return std::nullopt;
      }
      const std::string body = pattern.substr(i + 2, end - i - 2);
      const size_t colon = body.find(':');
      if (colon == std::string::npos) {
        auto it = bound.find(body);
        if (it == bound.end()) {
          error = "[[" + body + "]] is used before it is bound";
          return std::nullopt;
        }
        re += EscapeRegex(it->second);
        compiled.literal += it->second;
      } else {
        re += "(" + body.substr(colon + 1) + ")";
        compiled.captures.push_back(body.substr(0, colon));
      }
      i = end + 2;
    } else {
      re += EscapeRegex(std::string(1, pattern[i]));
      compiled.literal += pattern[i];
      ++i;
    }
  }
  try {
    compiled.regex = std::regex(re);
  } catch (const std::regex_error& e) {
    error = std::string("bad regex: ") + e.what();
    return std::nullopt;
  }
  return compiled;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The output line from `from` on that looks most like `literal`.
int NearestLine(const std::vector<std::string>& output, size_t from, const std::string& literal) {
  int best = -1;
  size_t best_distance = 0;
  for (size_t i = from; i < output.size(); ++i) {
    const std::string line = Trim(output[i]);
    const size_t distance = EditDistance(line.substr(0, 4 * literal.size() + 8), literal);
    if (best < 0 || distance < best_distance) {
      best = static_cast<int>(i);
      best_distance = distance;
    }
  }
  return best;
}

class Checker {
 public:
  Checker(std::string file, const std::vector<std::string>& output)
      : file_(std::move(file)), output_(output) {}

  // True when every check holds; prints each failure. As in FileCheck, a
  // CHECK may match later on the line of the previous match.
  bool Verify(const std::vector<Check>& checks) {
    std::vector<const Check*> pending_not;
    for (const Check& check : checks) {
      if (check.kind == "NOT") {
        pending_not.push_back(&check);
        continue;
      }
      std::string error;
      std::optional<CompiledPattern> pattern = Compile(check.pattern, bound_, error);
      if (!pattern) return Fail(check, error, -1);
      // NEXT: only the line after the previous match; else from the end of
      // the previous match on.
      const size_t first = check.kind == "NEXT" ? static_cast<size_t>(line_ + 1)
                                                : static_cast<size_t>(std::max(line_, 0));
      const size_t last =
          check.kind == "NEXT" ? std::min(first + 1, output_.size()) : output_.size();
      int found = -1;
      size_t end_column = 0;
      std::smatch match;
      for (size_t i = first; i < last && found < 0; ++i) {
        const size_t column = (static_cast<int>(i) == line_ && check.kind != "NEXT") ? column_ : 0;
        if (column > output_[i].size()) continue;
        const std::string rest = output_[i].substr(column);
        if (std::regex_search(rest, match, pattern->regex)) {
          found = static_cast<int>(i);
          end_column = column + static_cast<size_t>(match.position(0) + match.length(0));
          for (size_t k = 0; k < pattern->captures.size(); ++k) {
            bound_[pattern->captures[k]] = match[k + 1].str();
          }
        }
      }
      if (found < 0) {
        return Fail(check,
                    check.kind == "NEXT" ? "the next output line does not match"
                                         : "no output line from here on matches",
                    NearestLine(output_, first, pattern->literal));
      }
      for (const Check* never : pending_not) {
        if (!CheckAbsent(*never, static_cast<size_t>(std::max(line_ + 1, 0)),
                         static_cast<size_t>(found))) {
          return false;
        }
      }
      pending_not.clear();
      line_ = found;
      column_ = end_column;
    }
    for (const Check* never : pending_not) {
      if (!CheckAbsent(*never, static_cast<size_t>(line_ + 1), output_.size())) return false;
    }
    return true;
  }

 private:
  bool CheckAbsent(const Check& check, size_t from, size_t to) {
    std::string error;
    std::optional<CompiledPattern> pattern = Compile(check.pattern, bound_, error);
    if (!pattern) return Fail(check, error, -1);
    for (size_t i = from; i < to; ++i) {
      if (std::regex_search(output_[i], pattern->regex)) {
        return Fail(check, "an output line matches a pattern that must not", static_cast<int>(i));
      }
    }
    return true;
  }

  bool Fail(const Check& check, const std::string& why, int output_line) {
    std::cerr << file_ << ":" << check.line << ": error: CHECK" << (check.kind.empty() ? "" : "-")
              << check.kind << ": " << why << "\n  pattern: " << check.pattern << "\n";
    if (output_line >= 0) {
      std::cerr << "  " << (check.kind == "NOT" ? "matched" : "nearest") << " output line "
                << output_line + 1 << ": " << output_[static_cast<size_t>(output_line)] << "\n";
    }
    return false;
  }

  std::string file_;
  const std::vector<std::string>& output_;
  std::map<std::string, std::string> bound_;
  int line_ = -1;      // the output line of the last match (-1: none yet)
  size_t column_ = 0;  // where on it the match ended
};

// Runs `command` in a shell; its stdout and stderr, and its exit status.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return {"cannot start the command", -1};
  std::array<char, 4096> buffer{};
  for (size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) {
    output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

// `%s`: the test file; `%t`: a temporary path of this test's own. (`loom`
// is found on PATH, where main puts the binary under test first.)
std::string Substitute(std::string command, const std::string& file, const std::string& temporary) {
  for (size_t at; (at = command.find("%s")) != std::string::npos;) command.replace(at, 2, file);
  for (size_t at; (at = command.find("%t")) != std::string::npos;) {
    command.replace(at, 2, temporary);
  }
  return command;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: loom_lit LOOM_BINARY TEST_FILE\n";
    return 2;
  }
  const std::string loom = argv[1];
  const std::string file = argv[2];
  // RUN lines say `loom`: the binary under test comes first on PATH.
  std::error_code error;
  const std::filesystem::path binary = std::filesystem::absolute(loom, error);
  if (error || binary.filename() != "loom") {
    std::cerr << "loom_lit: " << loom << " is not a binary called loom\n";
    return 2;
  }
  const char* path = std::getenv("PATH");
  const std::string search =
      binary.parent_path().string() + (path != nullptr ? ":" + std::string(path) : "");
  ::setenv("PATH", search.c_str(), 1);
  std::ifstream in(file);
  if (!in) {
    std::cerr << "loom_lit: cannot read " << file << "\n";
    return 2;
  }
  std::vector<Run> runs;
  std::map<std::string, std::vector<Check>> checks;  // by prefix
  static const std::regex kRun(R"(^\s*//\s*RUN(?:\(([A-Z][A-Z0-9_]*)\))?:\s*(.*)$)");
  static const std::regex kCheck(
      R"(^\s*//\s*([A-Z][A-Z0-9_]*)(?:-(NEXT|LABEL|NOT|COUNT-[0-9]+))?:\s?(.*)$)");
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::smatch match;
    if (std::regex_match(line, match, kRun)) {
      runs.push_back({match[1].matched ? match[1].str() : "CHECK", Trim(match[2].str()), number});
    } else if (std::regex_match(line, match, kCheck) && match[1].str() != "EXPECT") {
      const std::string kind = match[2].str();
      if (kind.rfind("COUNT-", 0) == 0) {
        // N positive checks of the same pattern, one after the other.
        const int times = std::stoi(kind.substr(6));
        for (int i = 0; i < times; ++i) {
          checks[match[1].str()].push_back({"", Trim(match[3].str()), number});
        }
        continue;
      }
      checks[match[1].str()].push_back({kind, Trim(match[3].str()), number});
    }
  }
  if (runs.empty()) {
    std::cerr << file << ": error: no RUN line\n";
    return 1;
  }
  // A misspelt directive of a prefix in use (CHECK-NXET:) must not be
  // ignored silently.
  static const std::regex kAnyDirective(R"(^\s*//\s*([A-Z][A-Z0-9_]*)-([A-Z0-9-]+):.*$)");
  in.clear();
  in.seekg(0);
  for (int number = 1; std::getline(in, line); ++number) {
    std::smatch match;
    if (!std::regex_match(line, match, kAnyDirective)) continue;
    const std::string suffix = match[2].str();
    const bool used = std::any_of(runs.begin(), runs.end(),
                                  [&](const Run& run) { return run.prefix == match[1].str(); });
    const bool count = suffix.rfind("COUNT-", 0) == 0 && suffix.size() > 6 &&
                       suffix.find_first_not_of("0123456789", 6) == std::string::npos;
    if (used && suffix != "NEXT" && suffix != "LABEL" && suffix != "NOT" && !count) {
      std::cerr << file << ":" << number << ": error: unknown directive " << match[1].str() << "-"
                << suffix << " (NEXT, LABEL, NOT and COUNT-N are known)\n";
      return 1;
    }
  }
  bool ok = true;
  for (const Run& run : runs) {
    std::string command = run.command;
    const bool expect_failure = command.rfind("not ", 0) == 0;
    if (expect_failure) command = command.substr(4);
    const std::string temporary =
        (std::filesystem::temp_directory_path() /
         ("loom_lit_" + std::to_string(::getpid()) + "_" + std::to_string(run.line)))
            .string();
    command = Substitute(command, file, temporary);
    auto [output, status] = RunCommand(command);
    std::error_code ignored;
    for (const char* suffix : {"", ".2"}) std::filesystem::remove(temporary + suffix, ignored);
    if ((status == 0) == expect_failure) {
      std::cerr << file << ":" << run.line << ": error: RUN exited " << status << ", wanted "
                << (expect_failure ? "non-zero" : "0") << "\n  command: " << command
                << "\n  output:\n"
                << output;
      ok = false;
      continue;
    }
    auto it = checks.find(run.prefix);
    if (it == checks.end()) {
      std::cerr << file << ":" << run.line << ": error: no " << run.prefix << " lines\n";
      ok = false;
      continue;
    }
    const std::vector<std::string> lines = SplitLines(output);
    if (!Checker(file, lines).Verify(it->second)) {
      std::cerr << "  command: " << command << "\n";
      ok = false;
    }
  }
  if (ok) std::cout << "ok " << file << " (" << runs.size() << " RUN line(s))\n";
  return ok ? 0 : 1;
}
