// .npy files: round trips for every stored type, bf16 through float32, the
// header NumPy writes, and clear errors for files that do not fit; and the
// runner reading a device's inputs from a folder of .npy files.
#include "exec/npy.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "exec/runner.h"
#include "ir/parser.h"

namespace loom::exec {
namespace {

namespace fs = std::filesystem;
using ir::PrimitiveType;
using ir::Shape;

class NpyTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("loom_npy_{}", ::getpid());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

Tensor Ramp(const Shape& shape) {
  Tensor tensor = Tensor::Zeros(shape).value();
  for (int64_t i = 0; i < tensor.ElementCount(); ++i) tensor.SetDouble(i, 0.5 * i - 3);
  return tensor;
}

TEST_F(NpyTest, RoundTripsEveryType) {
  for (PrimitiveType type :
       {PrimitiveType::kF32, PrimitiveType::kF64, PrimitiveType::kF16, PrimitiveType::kBF16,
        PrimitiveType::kF8E4M3FN, PrimitiveType::kF8E5M2, PrimitiveType::kS8, PrimitiveType::kS32,
        PrimitiveType::kS64, PrimitiveType::kU8, PrimitiveType::kU32, PrimitiveType::kPred}) {
    const Shape shape(type, {2, 3});
    const Tensor tensor = Ramp(shape);
    ASSERT_TRUE(WriteNpy(Path("t.npy"), tensor).ok());
    Expected<Tensor> back = ReadNpy(Path("t.npy"), shape);
    ASSERT_TRUE(back.ok()) << back.error().ToString();
    EXPECT_TRUE(back->BitwiseEqual(tensor)) << ir::PrimitiveTypeName(type);
  }
}

TEST_F(NpyTest, WritesNumpysHeader) {
  ASSERT_TRUE(WriteNpy(Path("h.npy"), Ramp(Shape(PrimitiveType::kBF16, {4}))).ok());
  std::ifstream in(Path("h.npy"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(1, 5), "NUMPY");
  EXPECT_EQ(bytes[6], 1);  // version 1.0
  // The data starts at a multiple of 64, right after the header's newline.
  const size_t header_end =
      10 + static_cast<uint8_t>(bytes[8]) + 256 * static_cast<uint8_t>(bytes[9]);
  EXPECT_EQ(header_end % 64, 0u);
  EXPECT_EQ(bytes[header_end - 1], '\n');
  // bf16 is stored as float32, which NumPy reads.
  EXPECT_NE(bytes.find("'descr': '<f4'"), std::string::npos);
  EXPECT_NE(bytes.find("'shape': (4,)"), std::string::npos);
  EXPECT_EQ(bytes.size(), header_end + 4 * 4);
}

TEST_F(NpyTest, RejectsAMismatchedShapeOrAForeignFile) {
  ASSERT_TRUE(WriteNpy(Path("s.npy"), Ramp(Shape(PrimitiveType::kF32, {2, 3}))).ok());
  Expected<Tensor> wrong = ReadNpy(Path("s.npy"), Shape(PrimitiveType::kF32, {3, 2}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("does not match"), std::string::npos);
  std::ofstream(Path("junk.npy")) << "not numpy";
  EXPECT_FALSE(ReadNpy(Path("junk.npy"), Shape(PrimitiveType::kF32, {1})).ok());
  EXPECT_FALSE(ReadNpy(Path("missing.npy"), Shape(PrimitiveType::kF32, {1})).ok());
}

// A file of another dtype is refused, not converted: an f32 NaN must not
// become an s32 0. bf16 parameters read float32, the dtype they are written
// as.
TEST_F(NpyTest, RefusesAnotherDtype) {
  ASSERT_TRUE(WriteNpy(Path("f.npy"), Ramp(Shape(PrimitiveType::kF32, {4}))).ok());
  Expected<Tensor> as_int = ReadNpy(Path("f.npy"), Shape(PrimitiveType::kS32, {4}));
  ASSERT_FALSE(as_int.ok());
  EXPECT_NE(as_int.error().message.find("dtype '<f4' does not match the parameter's s32"),
            std::string::npos)
      << as_int.error().message;
  EXPECT_FALSE(ReadNpy(Path("f.npy"), Shape(PrimitiveType::kF64, {4})).ok());
  EXPECT_TRUE(ReadNpy(Path("f.npy"), Shape(PrimitiveType::kBF16, {4})).ok());
  EXPECT_TRUE(ReadNpy(Path("f.npy"), Shape(PrimitiveType::kF8E4M3FN, {4})).ok());
}

TEST_F(NpyTest, RefusesTruncatedDataAndTrailingBytes) {
  ASSERT_TRUE(WriteNpy(Path("t.npy"), Ramp(Shape(PrimitiveType::kF32, {4}))).ok());
  const Shape shape(PrimitiveType::kF32, {4});
  std::ofstream(Path("t.npy"), std::ios::app | std::ios::binary) << "x";
  Expected<Tensor> longer = ReadNpy(Path("t.npy"), shape);
  ASSERT_FALSE(longer.ok());
  EXPECT_NE(longer.error().message.find("bytes after"), std::string::npos)
      << longer.error().message;
  fs::resize_file(Path("t.npy"), fs::file_size(Path("t.npy")) - 5);
  Expected<Tensor> shorter = ReadNpy(Path("t.npy"), shape);
  ASSERT_FALSE(shorter.ok());
  EXPECT_NE(shorter.error().message.find("truncated data"), std::string::npos)
      << shorter.error().message;
}

TEST_F(NpyTest, RunnerReadsPerDeviceAndSharedInputs) {
  auto module = ir::ParseModule(R"(
HloModule m
ENTRY %e {
  %a = f32[3] parameter(0)
  %b = s32[2] parameter(1)
  ROOT %t = (f32[3], s32[2]) tuple(%a, %b)
}
)");
  ASSERT_TRUE(module.ok());
  const Tensor shared = Ramp(Shape(PrimitiveType::kF32, {3}));
  const Tensor own = Ramp(Shape(PrimitiveType::kS32, {2}));
  ASSERT_TRUE(WriteNpy(Path("param0.npy"), shared).ok());
  fs::create_directories(dir_ / "device1");
  ASSERT_TRUE(WriteNpy(Path("device1/param1.npy"), own).ok());
  RunOptions options;
  options.inputs_dir = dir_.string();
  Expected<std::vector<Tensor>> inputs = DeviceInputs(**module, 1, options);
  ASSERT_TRUE(inputs.ok()) << inputs.error().ToString();
  EXPECT_TRUE((*inputs)[0].BitwiseEqual(shared));
  EXPECT_TRUE((*inputs)[1].BitwiseEqual(own));
  // Device 0 has no param1 of its own and none is shared.
  EXPECT_FALSE(DeviceInputs(**module, 0, options).ok());
}

TEST(RunnerTest, TheSameSeedGivesTheSameInputs) {
  auto a = ir::ParseModule("HloModule a\nENTRY %e {\n  ROOT %p = bf16[4,4] parameter(0)\n}\n");
  auto b = ir::ParseModule(
      "HloModule b\nENTRY %e {\n  %p = bf16[4,4] parameter(0)\n  ROOT %n = bf16[4,4] "
      "negate(%p)\n}\n");
  ASSERT_TRUE(a.ok() && b.ok());
  RunOptions options;
  options.seed = 42;
  const auto from_a = DeviceInputs(**a, 3, options).value();
  const auto from_b = DeviceInputs(**b, 3, options).value();
  EXPECT_TRUE(from_a[0].BitwiseEqual(from_b[0]));
  EXPECT_FALSE(from_a[0].BitwiseEqual(DeviceInputs(**a, 2, options).value()[0]));
  options.seed = 43;
  EXPECT_FALSE(from_a[0].BitwiseEqual(DeviceInputs(**a, 3, options).value()[0]));
}

}  // namespace
}  // namespace loom::exec
