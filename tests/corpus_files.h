// The HLO corpus the tests read in place (../shared/corpus/hlo, or the
// LOOM_CORPUS_DIR the build was configured with), for parameterised tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

namespace loom::test {

// The .hlo file names of the corpus, sorted; empty when it is absent.
inline std::vector<std::string> CorpusFiles() {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  if (!fs::is_directory(LOOM_CORPUS_DIR)) return files;
  for (const auto& entry : fs::directory_iterator(LOOM_CORPUS_DIR)) {
    if (entry.path().extension() == ".hlo") files.push_back(entry.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Paths of every corpus module, then of every example (examples/ and
// examples/ring/), each group sorted.
inline std::vector<std::string> CorpusAndExamplePaths() {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  for (const std::string& file : CorpusFiles()) {
    paths.push_back((fs::path(LOOM_CORPUS_DIR) / file).string());
  }
  for (const char* dir : {"", "ring"}) {
    std::vector<std::string> examples;
    for (const auto& entry : fs::directory_iterator(fs::path(LOOM_EXAMPLES_DIR) / dir)) {
      if (entry.path().extension() == ".hlo") examples.push_back(entry.path().string());
    }
    std::sort(examples.begin(), examples.end());
    paths.insert(paths.end(), examples.begin(), examples.end());
  }
  return paths;
}

// A test name from a corpus file name: its stem, non-alphanumerics as '_'.
inline std::string CorpusTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.rfind('.'));
  std::replace_if(
      name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); },
      '_');
  return name;
}

}  // namespace loom::test
