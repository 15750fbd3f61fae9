// Parse and verify the largest real dump of the corpus (Llama 3.1 405B,
// 168 KB). Reports time per iteration and throughput in bytes per second.
#include <benchmark/benchmark.h>

#include <fstream>
#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace {

std::string ReadCorpusFile(const std::string& name) {
  std::ifstream file(std::string(LOOM_CORPUS_DIR) + "/" + name);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

const std::string& LlamaText() {
  static const std::string text = ReadCorpusFile("35_real_llama31_405b_bf16_16x8.hlo");
  return text;
}

void BM_Parse(benchmark::State& state) {
  const std::string& text = LlamaText();
  for (auto _ : state) {
    auto module = loom::ir::ParseModule(text);
    if (!module.ok()) state.SkipWithError(module.error().ToString().c_str());
    benchmark::DoNotOptimize(module);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Parse)->Unit(benchmark::kMillisecond);

void BM_ParseAndVerify(benchmark::State& state) {
  const std::string& text = LlamaText();
  for (auto _ : state) {
    auto module = loom::ir::ParseModule(text);
    if (!module.ok()) {
      state.SkipWithError(module.error().ToString().c_str());
      break;
    }
    auto report = loom::ir::VerifyModule(**module);
    if (!report.ok()) state.SkipWithError(report.error().ToString().c_str());
    benchmark::DoNotOptimize(report);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_ParseAndVerify)->Unit(benchmark::kMillisecond);

void BM_Print(benchmark::State& state) {
  auto module = loom::ir::ParseModule(LlamaText());
  if (!module.ok()) {
    state.SkipWithError(module.error().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    std::string printed = loom::ir::PrintModule(**module);
    benchmark::DoNotOptimize(printed);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * LlamaText().size()));
}
BENCHMARK(BM_Print)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
