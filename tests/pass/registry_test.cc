// The pass table: every option it documents parses with its documented
// default, every family member is accepted, and errors are made from it.
#include "pass/registry.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>

#include "cost/target.h"

namespace loom::pass {
namespace {

PassContext WithTarget() {
  PassContext context;
  context.cost_model =
      std::make_shared<cost::TargetCostModel>(cost::FindTarget("tpu-v4-2x2x1").value());
  return context;
}

// A value the option accepts: its default, else its first choice.
std::string SomeValue(const OptionSpec& option) {
  if (!option.default_value.empty()) return std::string(option.default_value);
  return std::string(option.choices.substr(0, option.choices.find('|')));
}

TEST(PassTable, EveryOptionParsesWithItsDocumentedDefault) {
  for (const PassEntry& entry : PassTable()) {
    ASSERT_TRUE(CreatePass(entry.name, WithTarget()).ok()) << entry.name;
    for (const OptionSpec& option : entry.options) {
      std::string key(option.name);
      if (!option.family_suffixes.empty()) {
        key = key.substr(0, key.find('.') + 1) +
              std::string(option.family_suffixes.substr(0, option.family_suffixes.find('|')));
      }
      const std::string spec = fmt::format("{}{{{}={}}}", entry.name, key, SomeValue(option));
      Expected<std::unique_ptr<Pass>> pass = CreatePass(spec, WithTarget());
      EXPECT_TRUE(pass.ok()) << spec << ": " << pass.error().message;
    }
  }
}

TEST(PassTable, ErrorsNameWhatTheTableAllows) {
  Expected<std::unique_ptr<Pass>> unknown = CreatePass("schedule{colour=blue}", WithTarget());
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().message,
            "pass schedule: unknown option 'colour' (options: max-in-flight, "
            "max-in-flight.KIND, order)");
  Expected<std::unique_ptr<Pass>> choice = CreatePass("schedule{order=sideways}", WithTarget());
  ASSERT_FALSE(choice.ok());
  EXPECT_EQ(choice.error().message,
            "pass schedule: order=sideways: want one of best|top-down|bottom-up");
  EXPECT_FALSE(CreatePass("schedule{max-in-flight.other=2}", WithTarget()).ok());
  EXPECT_FALSE(CreatePass("collective-matmul{forms=all-gather+broadcast}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{min-gain=1}", WithTarget()).ok());
  EXPECT_FALSE(CreatePass("async-collectives{x=1}").ok());
  EXPECT_FALSE(CreatePass("async-collectives{kinds=all-gather+send}").ok());
  Expected<std::unique_ptr<Pass>> no_pass = CreatePass("fuse");
  ASSERT_FALSE(no_pass.ok());
  EXPECT_EQ(no_pass.error().message,
            "unknown pass 'fuse' (known: collective-matmul, async-collectives, schedule, "
            "joint-schedule)");
}

TEST(PassTable, ListingShowsEveryPassAndOption) {
  const std::vector<std::string> lines = DescribePasses();
  size_t expected = 0;
  for (const PassEntry& entry : PassTable()) expected += 1 + entry.options.size();
  EXPECT_EQ(lines.size(), expected);
  EXPECT_EQ(lines.front().rfind("collective-matmul: ", 0), 0u);
}

TEST(PassTable, ParsesCollectiveMatmulOptionsAndPipelines) {
  auto pass = CreatePass("collective-matmul{direction=bidirectional, form=unrolled, min-bytes=4K}");
  ASSERT_TRUE(pass.ok()) << pass.error().message;
  EXPECT_EQ((*pass)->name(), "collective-matmul");
  EXPECT_FALSE(CreatePass("collective-matmul{direction=sideways}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{colour=blue}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{min-bytes=-3}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{min-bytes=9223372036854775807M}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{max-unrolled-steps=0}").ok());
  EXPECT_FALSE(CreatePass("collective-matmul{permutes-in-flight=2K}").ok());
  EXPECT_FALSE(CreatePass("no-such-pass").ok());
  auto pipeline = ParsePipeline("collective-matmul{form=loop,min-bytes=0},collective-matmul");
  ASSERT_TRUE(pipeline.ok()) << pipeline.error().message;
  EXPECT_EQ(pipeline->passes().size(), 2u);
}

}  // namespace
}  // namespace loom::pass
