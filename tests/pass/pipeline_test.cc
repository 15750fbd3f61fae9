// The pipeline runs passes in order, reports whether any changed the module,
// and names the pass after which the module stops verifying.
#include "pass/pipeline.h"

#include <gtest/gtest.h>

#include <functional>

#include "ir/parser.h"

namespace loom::pass {
namespace {

constexpr std::string_view kModule = R"(
HloModule m
ENTRY %e {
  %p = f32[4] parameter(0)
  %q = f32[4] negate(%p)
  ROOT %r = f32[4] add(%p, %q)
}
)";

// A pass defined by a function, for tests.
class LambdaPass : public Pass {
 public:
  LambdaPass(std::string name, std::function<bool(ir::Module&)> body)
      : name_(std::move(name)), body_(std::move(body)) {}
  std::string_view name() const override { return name_; }
  Expected<bool> Run(ir::Module& module) override { return body_(module); }

 private:
  std::string name_;
  std::function<bool(ir::Module&)> body_;
};

std::unique_ptr<ir::Module> Parse() {
  auto module = ir::ParseModule(kModule);
  EXPECT_TRUE(module.ok());
  return std::move(module).value();
}

TEST(PipelineTest, RunsPassesInOrderAndReportsChange) {
  std::vector<std::string> order;
  Pipeline pipeline;
  pipeline.Add(std::make_unique<LambdaPass>("first", [&](ir::Module&) {
    order.push_back("first");
    return false;
  }));
  pipeline.Add(std::make_unique<LambdaPass>("second", [&](ir::Module& module) {
    order.push_back("second");
    // A valid rewrite: the root adds p to itself.
    ir::Instruction* root = module.entry()->root();
    root->ReplaceOperand(1, root->operand(0));
    module.entry()->RemoveInstruction(module.entry()->FindInstruction("q"));
    return true;
  }));
  auto module = Parse();
  Expected<bool> changed = pipeline.Run(*module);
  ASSERT_TRUE(changed.ok()) << changed.error().ToString();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ(module->entry()->instruction_count(), 2);
}

TEST(PipelineTest, NoChangeWhenNoPassChanges) {
  Pipeline pipeline;
  pipeline.Add(std::make_unique<LambdaPass>("idle", [](ir::Module&) { return false; }));
  auto module = Parse();
  Expected<bool> changed = pipeline.Run(*module);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(PipelineTest, NamesThePassThatBreaksTheModule) {
  Pipeline pipeline;
  pipeline.Add(std::make_unique<LambdaPass>("breaker", [](ir::Module& module) {
    // Declares a wrong shape: add of two f32[4] cannot be f32[8].
    module.entry()->root()->set_shape(ir::Shape(ir::PrimitiveType::kF32, {8}));
    return true;
  }));
  pipeline.Add(std::make_unique<LambdaPass>("never", [](ir::Module&) -> bool {
    ADD_FAILURE() << "the pipeline must stop at the first broken module";
    return false;
  }));
  auto module = Parse();
  Expected<bool> changed = pipeline.Run(*module);
  ASSERT_FALSE(changed.ok());
  EXPECT_NE(changed.error().message.find("after pass breaker"), std::string::npos)
      << changed.error().message;
}

}  // namespace
}  // namespace loom::pass
