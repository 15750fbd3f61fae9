// Passes by name, for `loom opt --passes=...`. A pass may take options in
// braces, MLIR style:
//
//   collective-matmul{direction=bidirectional,form=unrolled,min-bytes=0}
//
// and a pipeline is a comma-separated list of them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pass/pipeline.h"

namespace loom::pass {

// One pass from `name` or `name{key=value,...}`.
Expected<std::unique_ptr<Pass>> CreatePass(std::string_view spec);
// Passes separated by commas outside braces.
Expected<Pipeline> ParsePipeline(std::string_view spec);
// Every pass name with a line of help, including its options.
std::vector<std::string> DescribePasses();

}  // namespace loom::pass
