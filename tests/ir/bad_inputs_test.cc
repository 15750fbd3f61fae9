// Every malformed module in tests/ir/bad gives one clear error at the right
// place. Each file's first line says what to expect:
//
//   // EXPECT: LINE:COL: MESSAGE-SUBSTRING
//
// LINE:COL is 1-based and counts the EXPECT line itself; the substring is
// matched case-insensitively. The test walks the directory, so a new file is
// tested with no code change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom::ir {
namespace {

namespace fs = std::filesystem;

const fs::path kBadDir = fs::path(LOOM_TESTS_DIR) / "ir" / "bad";

struct Expectation {
  int line = 0;
  int col = 0;
  std::string substring;
};

std::vector<std::string> BadFiles() {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kBadDir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".hlo") {
      files.push_back(entry.path().filename().string());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Parses `// EXPECT: LINE:COL: MESSAGE` from the first line of `text`.
std::optional<Expectation> ParseExpectation(const std::string& text) {
  const std::string prefix = "// EXPECT: ";
  std::string first = text.substr(0, text.find('\n'));
  if (first.rfind(prefix, 0) != 0) return std::nullopt;
  std::istringstream in(first.substr(prefix.size()));
  Expectation e;
  char colon1 = 0, colon2 = 0;
  if (!(in >> e.line >> colon1 >> e.col >> colon2) || colon1 != ':' || colon2 != ':') {
    return std::nullopt;
  }
  std::getline(in >> std::ws, e.substring);
  while (!e.substring.empty() && std::isspace(static_cast<unsigned char>(e.substring.back()))) {
    e.substring.pop_back();
  }
  if (e.line <= 0 || e.col <= 0 || e.substring.empty()) return std::nullopt;
  return e;
}

std::string LineCol(int line, int col) { return std::to_string(line) + ":" + std::to_string(col); }

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The first error of parse-then-verify, or nullopt if the module is valid.
std::optional<Error> FirstError(const std::string& text) {
  auto module = ParseModule(text);
  if (!module.ok()) return module.error();
  auto report = VerifyModule(**module);
  if (!report.ok()) return report.error();
  return std::nullopt;
}

class BadInputTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BadInputTest, ReportsOneErrorAtTheExpectedPlace) {
  const fs::path path = kBadDir / GetParam();
  const std::string text = ReadFile(path);
  std::optional<Expectation> expected = ParseExpectation(text);
  ASSERT_TRUE(expected.has_value())
      << path << ": the first line must be `// EXPECT: LINE:COL: MESSAGE-SUBSTRING`";

  std::optional<Error> error = FirstError(text);
  ASSERT_TRUE(error.has_value()) << path << ": parsed and verified without an error";

  EXPECT_EQ(LineCol(error->loc.line, error->loc.col), LineCol(expected->line, expected->col))
      << path << ": error reported at the wrong place\n  message: " << error->message;
  EXPECT_NE(Lower(error->message).find(Lower(expected->substring)), std::string::npos)
      << path << ": message does not contain \"" << expected->substring
      << "\"\n  message: " << error->message;
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = fs::path(info.param).stem().string();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Files, BadInputTest, ::testing::ValuesIn(BadFiles()), TestName);

TEST(BadInputs, DirectoryHasEnoughCases) {
  EXPECT_GE(BadFiles().size(), 30u) << "expected at least 30 malformed modules in " << kBadDir;
}

}  // namespace
}  // namespace loom::ir
