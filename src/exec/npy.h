// Reading and writing tensors as NumPy .npy files (format version 1.0).
// Types NumPy has are written as themselves; bf16 and the f8 types, which it
// lacks, are written as float32 (every value converts exactly) and read back
// from float32 with rounding to nearest even.
#pragma once

#include <string>

#include "exec/tensor.h"

namespace loom::exec {

Status WriteNpy(const std::string& path, const Tensor& tensor);
// Reads `path` as a tensor of `shape` (its element type decides the
// conversion); the file's shape must match.
Expected<Tensor> ReadNpy(const std::string& path, const ir::Shape& shape);

}  // namespace loom::exec
