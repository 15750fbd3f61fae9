// collective-matmul over every module of ../shared/corpus/hlo, in two ring
// configurations: every all-gather -> dot and dot -> reduce-scatter /
// all-reduce pair gets a decision (rewritten, or declined with a reason),
// and the output verifies and prints as a fixed point. Execution against
// the original is tests/cli/corpus_collective_matmul.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "corpus_files.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "pass/collective_matmul.h"

namespace loom::pass {
namespace {

namespace fs = std::filesystem;

bool IsShapeOp(ir::Opcode opcode) {
  return opcode == ir::Opcode::kReshape || opcode == ir::Opcode::kBitcast ||
         opcode == ir::Opcode::kConvert || opcode == ir::Opcode::kCopy ||
         opcode == ir::Opcode::kTranspose;
}

bool IsGather(ir::Opcode opcode) {
  return opcode == ir::Opcode::kAllGather || opcode == ir::Opcode::kAllGatherDone;
}

bool IsReduction(ir::Opcode opcode) {
  return opcode == ir::Opcode::kReduceScatter || opcode == ir::Opcode::kAllReduce ||
         opcode == ir::Opcode::kAllReduceStart;
}

// Dots next to a collective, found independently of the pass: an operand
// that is a gather behind shape ops, or a chain of single users through
// shape ops ending at a reduction.
std::set<std::string> DotsWithPairs(const ir::Module& module) {
  std::set<std::string> dots;
  for (const auto& computation : module.computations()) {
    for (const auto& instruction : computation->instructions()) {
      if (instruction->opcode() != ir::Opcode::kDot) continue;
      for (const ir::Instruction* operand : instruction->operands()) {
        while (IsShapeOp(operand->opcode())) operand = operand->operand(0);
        if (IsGather(operand->opcode())) dots.insert(instruction->name());
      }
      const ir::Instruction* value = instruction.get();
      for (;;) {
        const auto users = computation->Users(value);
        if (users.size() != 1 || computation->root() == value) break;
        if (IsReduction(users[0]->opcode())) dots.insert(instruction->name());
        if (!IsShapeOp(users[0]->opcode()) || users[0]->opcode() == ir::Opcode::kTranspose) break;
        value = users[0];
      }
    }
  }
  return dots;
}

class CollectiveMatmulCorpus : public testing::TestWithParam<std::string> {};

TEST_P(CollectiveMatmulCorpus, DecidesEveryPairAndKeepsTheModuleValid) {
  const std::string path = std::string(LOOM_CORPUS_DIR) + "/" + GetParam();
  for (const auto& [direction, form] :
       {std::pair{RingDirection::kUnidirectional, RingForm::kLoop},
        std::pair{RingDirection::kBidirectional, RingForm::kUnrolled}}) {
    auto parsed = ir::ParseModuleFile(path);
    ASSERT_TRUE(parsed.ok()) << parsed.error().ToString(path);
    ir::Module& module = **parsed;
    const std::set<std::string> pairs = DotsWithPairs(module);
    CollectiveMatmulOptions options;
    options.min_bytes = 0;
    options.direction = direction;
    options.form = form;
    CollectiveMatmul pass(options);
    Expected<bool> changed = pass.Run(module);
    ASSERT_TRUE(changed.ok()) << changed.error().message;
    std::set<std::string> decided;
    std::string explained;
    for (const Decision& decision : pass.Decisions()) {
      decided.insert(decision.dot);
      explained += FormatDecision(decision) + "\n";
    }
    for (const std::string& dot : pairs) {
      EXPECT_TRUE(decided.count(dot)) << "no decision for %" << dot << "\n" << explained;
    }
    Expected<ir::VerifyReport> verified = ir::VerifyModule(module);
    ASSERT_TRUE(verified.ok()) << verified.error().ToString() << "\n" << explained;
    const std::string printed = ir::PrintModule(module);
    auto reparsed = ir::ParseModule(printed);
    ASSERT_TRUE(reparsed.ok()) << reparsed.error().ToString();
    EXPECT_EQ(ir::PrintModule(**reparsed), printed);
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, CollectiveMatmulCorpus, ::testing::ValuesIn(test::CorpusFiles()),
                         test::CorpusTestName);

}  // namespace
}  // namespace loom::pass
