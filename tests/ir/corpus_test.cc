// Every module of ../shared/corpus/hlo parses, verifies and round-trips:
// parse(print(parse(text))) equals parse(text), and printing is a fixed point
// after one round. The directory is walked, so a new file is tested with no
// code change.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "corpus_files.h"
#include "ir/clone.h"
#include "ir/compare.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace loom::ir {
namespace {

using loom::test::CorpusFiles;
using loom::test::CorpusTestName;

namespace fs = std::filesystem;

// Modules that are not meant to verify, with the exact message expected.
// (Empty today: every corpus module is valid HLO.)
const std::map<std::string, std::string>& ExpectedVerifierErrors() {
  static const std::map<std::string, std::string> errors;
  return errors;
}

class CorpusTest : public testing::TestWithParam<std::string> {};

TEST_P(CorpusTest, ParsesVerifiesAndRoundTrips) {
  const std::string path = std::string(LOOM_CORPUS_DIR) + "/" + GetParam();
  Expected<std::unique_ptr<Module>> parsed = ParseModuleFile(path);
  ASSERT_TRUE(parsed.ok()) << parsed.error().ToString(path);
  const Module& module = **parsed;

  Expected<VerifyReport> verified = VerifyModule(module);
  auto expected_error = ExpectedVerifierErrors().find(GetParam());
  if (expected_error == ExpectedVerifierErrors().end()) {
    EXPECT_TRUE(verified.ok()) << verified.error().ToString(path);
  } else {
    ASSERT_FALSE(verified.ok());
    EXPECT_EQ(verified.error().ToString(), expected_error->second);
  }

  const std::string printed = PrintModule(module);
  Expected<std::unique_ptr<Module>> reparsed = ParseModule(printed);
  ASSERT_TRUE(reparsed.ok()) << reparsed.error().ToString() << "\n" << printed;
  EXPECT_EQ(FirstDifference(module, **reparsed), "");
  EXPECT_EQ(PrintModule(**reparsed), printed) << "printing is not a fixed point";
  if (verified.ok()) {
    EXPECT_TRUE(VerifyModule(**reparsed).ok()) << "the printed module no longer verifies";
  }

  // A clone is the module, instruction for instruction, sharing nothing.
  Expected<std::unique_ptr<Module>> clone = CloneModule(module);
  ASSERT_TRUE(clone.ok()) << clone.error().ToString();
  EXPECT_EQ(FirstDifference(module, **clone), "");
  EXPECT_EQ(PrintModule(**clone), printed);
  for (const auto& computation : (*clone)->computations()) {
    for (const auto& instruction : computation->instructions()) {
      EXPECT_EQ(instruction->parent(), computation.get());
      for (const Instruction* operand : instruction->operands()) {
        EXPECT_EQ(operand->parent(), computation.get()) << instruction->name();
      }
      for (const Computation* callee : instruction->called_computations()) {
        EXPECT_EQ(callee->parent(), clone->get()) << instruction->name();
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTest, ::testing::ValuesIn(CorpusFiles()), CorpusTestName);

TEST(CorpusTest, CorpusIsPresent) {
  // The corpus lives beside the checkout (../shared); without it the tests
  // above would silently vanish.
  EXPECT_GE(CorpusFiles().size(), 30u) << "corpus not found at " << LOOM_CORPUS_DIR;
}

}  // namespace
}  // namespace loom::ir
