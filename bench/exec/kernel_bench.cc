// `make bench-exec`: each kernel class of the executor beside a native
// reference doing the same work in the same process (one BLAS call; a plain
// loop, memcpy or fill of the same bytes), timed interleaved, A B A B ...,
// and reported as the ratio of medians. Loom's side is the whole executor
// running a one-op HLO module on the CPU device: lowering once, then per run
// the step, the output allocation (from the device's buffer pool) and the
// kernel. Targets: dots within 1.05x of the BLAS call, memory-bound ops
// within 2x of the loop.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/cpu/cpu_device.h"
#include "exec/cpu/float_formats.h"
#include "exec/executor.h"
#include "ir/parser.h"
#include "ir/verifier.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(const std::function<void()>& work) {
  const auto start = Clock::now();
  work();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One kernel class: a one-op module, its inputs' fill, and the native loop.
struct Case {
  std::string name;
  std::string hlo;               // ENTRY body; parameters p0, p1, ...
  std::function<void()> native;  // the reference, on buffers it owns
  double target;                 // the ratio Loom must stay within; 0: none (for scale)
};

// The executor, ready to run `hlo` on random inputs.
class LoomRun {
 public:
  // `hlo` is the entry's body; `%sum` and `%max`, f32 add and maximum, are
  // there for reducers, `%ge` for a select, `%total_less` for a sort.
  explicit LoomRun(const std::string& hlo) {
    auto module = ir::ParseModule(
        "HloModule bench\n\n%sum (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
        "  %y = f32[] parameter(1)\n  ROOT %s = f32[] add(%x, %y)\n}\n\n"
        "%max (x: f32[], y: f32[]) -> f32[] {\n  %x = f32[] parameter(0)\n"
        "  %y = f32[] parameter(1)\n  ROOT %m = f32[] maximum(%x, %y)\n}\n\n"
        "%ge (x: f32[], y: f32[]) -> pred[] {\n  %x = f32[] parameter(0)\n"
        "  %y = f32[] parameter(1)\n  ROOT %c = pred[] compare(%x, %y), direction=GE\n}\n\n"
        "%total_less (x: f32[], y: f32[]) -> pred[] {\n  %x = f32[] parameter(0)\n"
        "  %y = f32[] parameter(1)\n"
        "  ROOT %c = pred[] compare(%x, %y), direction=LT, type=TOTALORDER\n}\n\n"
        "ENTRY main {\n" +
        hlo + "}\n");
    if (!module.ok()) throw std::runtime_error(module.error().ToString());
    module_ = std::move(module).value();
    if (auto verified = ir::VerifyModule(*module_); !verified.ok()) {
      throw std::runtime_error(verified.error().ToString());
    }
    device_ = std::make_unique<exec::cpu::CpuDevice>();
    executor_ = std::make_unique<exec::Executor>(*device_, context_);
    for (const ir::Instruction* parameter : module_->entry()->parameters()) {
      exec::Tensor input = exec::Tensor::Zeros(parameter->shape()).value();
      for (int64_t i = 0; i < input.ElementCount(); ++i) {
        input.SetDouble(i, std::sin(0.001 * static_cast<double>(i)));
      }
      inputs_.push_back(executor_->Upload(input, parameter->shape()).value());
    }
    Run();  // lowering, and the pool's first allocation
  }
  void Run() {
    auto result = executor_->Run(*module_->entry(), inputs_);
    if (!result.ok()) throw std::runtime_error(result.error().ToString());
  }

 private:
  std::unique_ptr<ir::Module> module_;
  exec::DeviceContext context_;
  std::unique_ptr<exec::cpu::CpuDevice> device_;
  std::unique_ptr<exec::Executor> executor_;
  std::vector<exec::Value> inputs_;
};

constexpr int64_t kRows = 4096, kCols = 4096, kElements = kRows * kCols;  // 16M
constexpr int64_t kDot = 2048;

// A 3x3 same-padded convolution of an NHWC f32 image by HWIO filters,
// against a plain direct loop (the same sums, in f32) and, for scale, the
// im2col + one BLAS call that XLA's CPU backend would make of it (whose sums
// are BLAS's order, not one fixed order: no target).
void AddConvolutionCases(std::vector<Case>& cases) {
  constexpr int64_t kBatch = 8, kSide = 56, kFeatures = 64, kFilters = 64, kTaps = 3;
  constexpr int64_t kPixels = kBatch * kSide * kSide, kPatch = kTaps * kTaps * kFeatures;
  static std::vector<float> image(kPixels * kFeatures, 0.5f), filters(kPatch * kFilters, 0.25f);
  static std::vector<float> result(kPixels * kFilters), columns(kPixels * kPatch);
  const std::string hlo = fmt::format(
      "  p0 = f32[{0},{1},{1},{2}] parameter(0)\n  p1 = f32[{3},{3},{2},{4}] parameter(1)\n"
      "  ROOT r = f32[{0},{1},{1},{4}] convolution(p0, p1), window={{size={3}x{3} pad=1_1x1_1}}, "
      "dim_labels=b01f_01io->b01f\n",
      kBatch, kSide, kFeatures, kTaps, kFilters);
  // The image's value at (n, y, x, feature 0), or null in the padding.
  auto pixel = [](int64_t n, int64_t y, int64_t x) -> const float* {
    if (y < 0 || y >= kSide || x < 0 || x >= kSide) return nullptr;
    return &image[((n * kSide + y) * kSide + x) * kFeatures];
  };
  cases.push_back({"convolution 3x3 [8,56,56,64] x 64 (plain loop)", hlo,
                   [pixel] {
                     for (int64_t n = 0; n < kBatch; ++n) {
                       for (int64_t y = 0; y < kSide; ++y) {
                         for (int64_t x = 0; x < kSide; ++x) {
                           float* acc = &result[((n * kSide + y) * kSide + x) * kFilters];
                           std::fill_n(acc, kFilters, 0.0f);
                           for (int64_t t = 0; t < kTaps * kTaps; ++t) {
                             const float* in = pixel(n, y + t / kTaps - 1, x + t % kTaps - 1);
                             if (in == nullptr) continue;
                             for (int64_t i = 0; i < kFeatures; ++i) {
                               const float* w = &filters[(t * kFeatures + i) * kFilters];
                               for (int64_t o = 0; o < kFilters; ++o) acc[o] += in[i] * w[o];
                             }
                           }
                         }
                       }
                     }
                   },
                   2.0});
  cases.push_back({"convolution, against im2col + one sgemm", hlo,
                   [pixel] {
                     for (int64_t p = 0; p < kPixels; ++p) {
                       const int64_t n = p / (kSide * kSide), y = p / kSide % kSide, x = p % kSide;
                       for (int64_t t = 0; t < kTaps * kTaps; ++t) {
                         const float* in = pixel(n, y + t / kTaps - 1, x + t % kTaps - 1);
                         float* column = &columns[(p * kTaps * kTaps + t) * kFeatures];
                         if (in == nullptr) {
                           std::fill_n(column, kFeatures, 0.0f);
                         } else {
                           std::memcpy(column, in, kFeatures * sizeof(float));
                         }
                       }
                     }
                     cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kPixels, kFilters,
                                 kPatch, 1.0f, columns.data(), kPatch, filters.data(), kFilters,
                                 0.0f, result.data(), kFilters);
                   },
                   0.0});
}

// ResNet's stem max-pooling, 3x3 at stride 2 over NHWC (padded at the high
// end, where XLA pads for a window that would overhang), against a plain
// loop over the output and its taps, channels innermost.
void AddPoolingCase(std::vector<Case>& cases) {
  static constexpr int64_t kBatch = 8, kSide = 112, kOut = 56, kChannels = 64;
  static std::vector<float> image(kBatch * kSide * kSide * kChannels, 0.5f);
  static std::vector<float> pooled(kBatch * kOut * kOut * kChannels);
  cases.push_back(
      {"max-pool 3x3/2 [8,112,112,64] (plain loop)",
       fmt::format("  p0 = f32[{0},{1},{1},{3}] parameter(0)\n  ninf = f32[] constant(-inf)\n"
                   "  ROOT r = f32[{0},{2},{2},{3}] reduce-window(p0, ninf), "
                   "window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}}, to_apply=%max\n",
                   kBatch, kSide, kOut, kChannels),
       [] {
         for (int64_t n = 0; n < kBatch; ++n) {
           for (int64_t y = 0; y < kOut; ++y) {
             for (int64_t x = 0; x < kOut; ++x) {
               float* out = &pooled[((n * kOut + y) * kOut + x) * kChannels];
               std::fill_n(out, kChannels, -std::numeric_limits<float>::infinity());
               for (int64_t ty = 2 * y; ty < std::min(2 * y + 3, kSide); ++ty) {
                 for (int64_t tx = 2 * x; tx < std::min(2 * x + 3, kSide); ++tx) {
                   const float* in = &image[((n * kSide + ty) * kSide + tx) * kChannels];
                   for (int64_t c = 0; c < kChannels; ++c) out[c] = std::max(out[c], in[c]);
                 }
               }
             }
           }
         }
       },
       2.0});
  // Its gradient: each window's first maximum takes the window's gradient.
  static std::vector<float> gradient(kBatch * kOut * kOut * kChannels, 0.125f);
  static std::vector<float> scattered(image.size());
  cases.push_back(
      {"max-pool gradient (select-and-scatter, plain loop)",
       fmt::format("  p0 = f32[{0},{1},{1},{3}] parameter(0)\n  p1 = f32[{0},{2},{2},{3}] "
                   "parameter(1)\n  zero = f32[] constant(0)\n"
                   "  ROOT r = f32[{0},{1},{1},{3}] select-and-scatter(p0, p1, zero), "
                   "window={{size=1x3x3x1 stride=1x2x2x1 pad=0_0x0_1x0_1x0_0}}, select=%ge, "
                   "scatter=%sum\n",
                   kBatch, kSide, kOut, kChannels),
       [] {
         std::fill(scattered.begin(), scattered.end(), 0.0f);
         for (int64_t n = 0; n < kBatch; ++n) {
           for (int64_t y = 0; y < kOut; ++y) {
             for (int64_t x = 0; x < kOut; ++x) {
               for (int64_t c = 0; c < kChannels; ++c) {
                 int64_t best = -1;
                 for (int64_t ty = 2 * y; ty < std::min(2 * y + 3, kSide); ++ty) {
                   for (int64_t tx = 2 * x; tx < std::min(2 * x + 3, kSide); ++tx) {
                     const int64_t at = ((n * kSide + ty) * kSide + tx) * kChannels + c;
                     if (best < 0 || !(image[best] >= image[at])) best = at;
                   }
                 }
                 scattered[best] += gradient[((n * kOut + y) * kOut + x) * kChannels + c];
               }
             }
           }
         }
       },
       2.0});
}

// Sorting 64 rows of 16384 f32 in XLA's total order (JAX's comparator),
// against std::stable_sort of each row by <.
void AddSortCase(std::vector<Case>& cases) {
  static constexpr int64_t kRows = 64, kLength = 16384;
  static std::vector<float> rows(kRows * kLength);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = std::sin(0.001f * static_cast<float>(i));
  static std::vector<float> sorted(rows.size());
  cases.push_back({"sort 64 rows of 16384 f32 (std::stable_sort)",
                   fmt::format("  p0 = f32[{},{}] parameter(0)\n  ROOT r = f32[{},{}] sort(p0), "
                               "dimensions={{1}}, is_stable=true, to_apply=%total_less\n",
                               kRows, kLength, kRows, kLength),
                   [] {
                     sorted = rows;
                     for (int64_t r = 0; r < kRows; ++r) {
                       std::stable_sort(sorted.begin() + r * kLength,
                                        sorted.begin() + (r + 1) * kLength);
                     }
                   },
                   2.0});
}

// topk (largest, XLA's total order), against std::partial_sort of each
// row's (value, position) pairs by value, larger first, then position:
// a sampler's top 40 of a vocabulary, and a router's top 2 of 64 experts.
void AddTopKCases(std::vector<Case>& cases) {
  struct Shape {
    int64_t rows, length, k;
    const char* what;
  };
  for (const Shape shape : {Shape{64, 32768, 40, "a vocabulary"}, Shape{8192, 64, 2, "experts"}}) {
    auto rows = std::make_shared<std::vector<float>>(shape.rows * shape.length);
    for (size_t i = 0; i < rows->size(); ++i) (*rows)[i] = std::sin(0.001f * static_cast<float>(i));
    auto top = std::make_shared<std::vector<std::pair<float, int32_t>>>(shape.rows * shape.k);
    cases.push_back(
        {fmt::format("topk {} of {} rows of {} f32, {} (std::partial_sort)", shape.k, shape.rows,
                     shape.length, shape.what),
         fmt::format("  p0 = f32[{0},{1}] parameter(0)\n"
                     "  ROOT r = (f32[{0},{2}], s32[{0},{2}]) topk(p0), k={2}, largest=true\n",
                     shape.rows, shape.length, shape.k),
         [shape, rows, top] {
           std::vector<std::pair<float, int32_t>> row(static_cast<size_t>(shape.length));
           for (int64_t r = 0; r < shape.rows; ++r) {
             for (int64_t j = 0; j < shape.length; ++j) {
               row[j] = {(*rows)[r * shape.length + j], static_cast<int32_t>(j)};
             }
             std::partial_sort(
                 row.begin(), row.begin() + shape.k, row.end(), [](const auto& a, const auto& b) {
                   return a.first != b.first ? a.first > b.first : a.second < b.second;
                 });
             std::copy_n(row.begin(), shape.k, top->begin() + r * shape.k);
           }
         },
         2.0});
  }
}

std::vector<Case> Cases() {
  // Buffers of the native side, shared by the cases (allocated and touched
  // once, as the executor's pool is warm).
  static std::vector<float> a(kElements, 0.5f), b(kElements, 0.25f), c(kElements);
  static std::vector<uint16_t> ha(kElements, 0x3f00), hb(kElements, 0x3e80), hc(kElements);
  static std::vector<float> quarter(kElements / 4, 1.0f);
  const std::string n = std::to_string(kDot);
  const std::string mat = fmt::format("f32[{},{}]", kDot, kDot);
  const std::string big = fmt::format("f32[{},{}]", kRows, kCols);
  const std::string big16 = fmt::format("bf16[{},{}]", kRows, kCols);
  auto gemm = [](CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb) {
    return [ta, tb] {
      cblas_sgemm(CblasRowMajor, ta, tb, kDot, kDot, kDot, 1.0f, a.data(), kDot, b.data(), kDot,
                  0.0f, c.data(), kDot);
    };
  };
  auto dot = [&](const char* lc, const char* rc) {
    return fmt::format(
        "  p0 = {0} parameter(0)\n  p1 = {0} parameter(1)\n"
        "  ROOT d = {0} dot(p0, p1), lhs_contracting_dims={{{1}}}, rhs_contracting_dims={{{2}}}\n",
        mat, lc, rc);
  };
  std::vector<Case> cases;
  cases.push_back({"dot f32 2048^3 (lhs, rhs as stored)", dot("1", "0"),
                   gemm(CblasNoTrans, CblasNoTrans), 1.05});
  cases.push_back(
      {"dot f32 2048^3, lhs transposed", dot("0", "0"), gemm(CblasTrans, CblasNoTrans), 1.05});
  cases.push_back(
      {"dot f32 2048^3, rhs transposed", dot("1", "1"), gemm(CblasNoTrans, CblasTrans), 1.05});
  cases.push_back(
      {"dot f32 2048^3, both transposed", dot("0", "1"), gemm(CblasTrans, CblasTrans), 1.05});
  cases.push_back(
      {"dot f32 batch 8 x 1024^2 x 1024",
       "  p0 = f32[8,1024,1024] parameter(0)\n  p1 = f32[8,1024,1024] parameter(1)\n"
       "  ROOT d = f32[8,1024,1024] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={0}, "
       "lhs_contracting_dims={2}, rhs_contracting_dims={1}\n",
       [] {
         for (int64_t i = 0; i < 8; ++i) {
           const int64_t o = i * 1024 * 1024;
           cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1024, 1024, 1024, 1.0f,
                       a.data() + o, 1024, b.data() + o, 1024, 0.0f, c.data() + o, 1024);
         }
       },
       1.05});
  cases.push_back({"add f32 16M",
                   fmt::format("  p0 = {0} parameter(0)\n  p1 = {0} parameter(1)\n"
                               "  ROOT r = {0} add(p0, p1)\n",
                               big),
                   [] {
                     for (int64_t i = 0; i < kElements; ++i) c[i] = a[i] + b[i];
                   },
                   2.0});
  cases.push_back({"multiply bf16 16M",
                   fmt::format("  p0 = {0} parameter(0)\n  p1 = {0} parameter(1)\n"
                               "  ROOT r = {0} multiply(p0, p1)\n",
                               big16),
                   [] {
                     for (int64_t i = 0; i < kElements; ++i) {
                       hc[i] = exec::cpu::FloatToBf16(exec::cpu::Bf16ToFloat(ha[i]) *
                                                      exec::cpu::Bf16ToFloat(hb[i]));
                     }
                   },
                   2.0});
  cases.push_back({"tanh f32 16M",
                   fmt::format("  p0 = {0} parameter(0)\n  ROOT r = {0} tanh(p0)\n", big),
                   [] {
                     for (int64_t i = 0; i < kElements; ++i) {
                       c[i] = static_cast<float>(std::tanh(static_cast<double>(a[i])));
                     }
                   },
                   2.0});
  cases.push_back({"convert f32 -> bf16 16M",
                   fmt::format("  p0 = {0} parameter(0)\n  ROOT r = {1} convert(p0)\n", big, big16),
                   [] {
                     for (int64_t i = 0; i < kElements; ++i) hc[i] = exec::cpu::FloatToBf16(a[i]);
                   },
                   2.0});
  cases.push_back({"convert bf16 -> f32 16M",
                   fmt::format("  p0 = {0} parameter(0)\n  ROOT r = {1} convert(p0)\n", big16, big),
                   [] {
                     for (int64_t i = 0; i < kElements; ++i) c[i] = exec::cpu::Bf16ToFloat(ha[i]);
                   },
                   2.0});
  cases.push_back(
      {"broadcast scalar -> f32 16M",
       fmt::format("  p0 = f32[] parameter(0)\n  ROOT r = {} broadcast(p0), dimensions={{}}\n",
                   big),
       [] { std::fill(c.begin(), c.end(), 0.5f); }, 2.0});
  cases.push_back(
      {"broadcast row f32[4096] -> 16M",
       fmt::format("  p0 = f32[{}] parameter(0)\n  ROOT r = {} broadcast(p0), dimensions={{1}}\n",
                   kCols, big),
       [] {
         for (int64_t r = 0; r < kRows; ++r) std::memcpy(&c[r * kCols], a.data(), kCols * 4);
       },
       2.0});
  cases.push_back({"slice f32 columns [:, 1024:3072] (8M)",
                   fmt::format("  p0 = {} parameter(0)\n  ROOT r = f32[{},2048] slice(p0), "
                               "slice={{[0:{}], [1024:3072]}}\n",
                               big, kRows, kRows),
                   [] {
                     for (int64_t r = 0; r < kRows; ++r) {
                       std::memcpy(&c[r * 2048], &a[r * kCols + 1024], 2048 * 4);
                     }
                   },
                   2.0});
  cases.push_back(
      {"dynamic-slice f32 rows (4M)",
       fmt::format(
           "  p0 = {} parameter(0)\n  i = s32[] constant(1024)\n  z = s32[] constant(0)\n"
           "  ROOT r = f32[1024,{}] dynamic-slice(p0, i, z), dynamic_slice_sizes={{1024,{}}}\n",
           big, kCols, kCols),
       [] { std::memcpy(c.data(), &a[1024 * kCols], 1024 * kCols * 4); }, 2.0});
  cases.push_back({"dynamic-update-slice 4M into 16M f32",
                   fmt::format("  p0 = {} parameter(0)\n  p1 = f32[1024,{}] parameter(1)\n"
                               "  i = s32[] constant(1024)\n  z = s32[] constant(0)\n"
                               "  ROOT r = {} dynamic-update-slice(p0, p1, i, z)\n",
                               big, kCols, big),
                   // The operand is the caller's (live after), so XLA copies it too.
                   [] {
                     std::memcpy(c.data(), a.data(), kElements * 4);
                     std::memcpy(&c[1024 * kCols], quarter.data(), 1024 * kCols * 4);
                   },
                   2.0});
  // An embedding's lookup and its gradient: 1024 rows of the 4096 taken
  // (a fixed scatter of them, some twice), and added back.
  static std::vector<int64_t> ids(1024);
  std::string ids_text;
  for (int64_t i = 0; i < 1024; ++i) {
    ids[i] = (i * 2654435761LL) % 4096 / 2 * 2;  // even rows only: some taken twice
    ids_text += (i == 0 ? "" : ", ") + std::to_string(ids[i]);
  }
  cases.push_back({"gather 1024 rows of f32 4096^2 (4M)",
                   fmt::format("  p0 = {} parameter(0)\n  ids = s32[1024] constant({{{}}})\n"
                               "  ROOT r = f32[1024,{}] gather(p0, ids), offset_dims={{1}}, "
                               "collapsed_slice_dims={{0}}, start_index_map={{0}}, "
                               "index_vector_dim=1, slice_sizes={{1,{}}}\n",
                               big, ids_text, kCols, kCols),
                   [] {
                     for (int64_t i = 0; i < 1024; ++i) {
                       std::memcpy(&c[i * kCols], &a[ids[i] * kCols], kCols * 4);
                     }
                   },
                   2.0});
  cases.push_back({"scatter-add 1024 rows (4M) into f32 4096^2",
                   fmt::format("  p0 = {} parameter(0)\n  p1 = f32[1024,{}] parameter(1)\n"
                               "  ids = s32[1024] constant({{{}}})\n"
                               "  ROOT r = {} scatter(p0, ids, p1), update_window_dims={{1}}, "
                               "inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, "
                               "index_vector_dim=1, to_apply=%sum\n",
                               big, kCols, ids_text, big),
                   // The operand is the caller's (live after): copied, then added into.
                   [] {
                     std::memcpy(c.data(), a.data(), kElements * 4);
                     for (int64_t i = 0; i < 1024; ++i) {
                       float* row = &c[ids[i] * kCols];
                       const float* update = &quarter[i * kCols];
                       for (int64_t k = 0; k < kCols; ++k) row[k] += update[k];
                     }
                   },
                   2.0});
  cases.push_back(
      {"concatenate 2 x 8M f32",
       fmt::format("  p0 = f32[{0},{1}] parameter(0)\n  p1 = f32[{0},{1}] parameter(1)\n"
                   "  ROOT r = f32[{0},{2}] concatenate(p0, p1), dimensions={{1}}\n",
                   kRows, kCols / 2, kCols),
       [] {
         for (int64_t r = 0; r < kRows; ++r) {
           std::memcpy(&c[r * kCols], &a[r * kCols / 2], kCols / 2 * 4);
           std::memcpy(&c[r * kCols + kCols / 2], &b[r * kCols / 2], kCols / 2 * 4);
         }
       },
       2.0});
  cases.push_back(
      {"transpose f32 4096^2",
       fmt::format("  p0 = {0} parameter(0)\n  ROOT r = {0} transpose(p0), dimensions={{1,0}}\n",
                   big),
       [] {
         for (int64_t r = 0; r < kRows; ++r) {
           for (int64_t k = 0; k < kCols; ++k) c[k * kRows + r] = a[r * kCols + k];
         }
       },
       2.0});
  cases.push_back(
      {"reduce f32 4096^2 over rows (dim 1)",
       fmt::format("  p0 = {} parameter(0)\n  zero = f32[] constant(0)\n"
                   "  ROOT r = f32[{}] reduce(p0, zero), dimensions={{1}}, to_apply=%sum\n",
                   big, kRows),
       [] {
         for (int64_t r = 0; r < kRows; ++r) {
           float acc = 0;
           for (int64_t k = 0; k < kCols; ++k) acc += a[r * kCols + k];
           c[r] = acc;
         }
       },
       2.0});
  cases.push_back(
      {"reduce f32 4096^2 over columns (dim 0)",
       fmt::format("  p0 = {} parameter(0)\n  zero = f32[] constant(0)\n"
                   "  ROOT r = f32[{}] reduce(p0, zero), dimensions={{0}}, to_apply=%sum\n",
                   big, kCols),
       [] {
         std::fill_n(c.begin(), kCols, 0.0f);
         for (int64_t r = 0; r < kRows; ++r) {
           for (int64_t k = 0; k < kCols; ++k) c[k] += a[r * kCols + k];
         }
       },
       2.0});
  AddConvolutionCases(cases);
  AddPoolingCase(cases);
  AddSortCase(cases);
  AddTopKCases(cases);
  return cases;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  using namespace loom;
  const int repeats = argc > 1 ? std::max(3, std::atoi(argv[1])) : 5;
  const std::string only = argc > 2 ? argv[2] : "";  // run the cases whose name has it
  openblas_set_num_threads(1);
  fmt::print(
      "executor kernels against native code, single-threaded, median of {} interleaved runs\n",
      repeats);
  fmt::print("{:<48} {:>11} {:>11} {:>7} {:>7}\n", "kernel", "native ms", "loom ms", "ratio",
             "target");
  int missed = 0;
  for (const Case& c : Cases()) {
    if (c.name.find(only) == std::string::npos) continue;
    LoomRun loom_run(c.hlo);
    std::vector<double> native, loom_times;
    c.native();  // warm
    for (int i = 0; i < repeats; ++i) {
      native.push_back(Seconds(c.native));
      loom_times.push_back(Seconds([&] { loom_run.Run(); }));
    }
    const double ratio = Median(loom_times) / Median(native);
    const bool has_target = c.target > 0;
    const bool miss = has_target && ratio > c.target;
    if (miss) ++missed;
    fmt::print("{:<48} {:>11.2f} {:>11.2f} {:>6.2f}x {:>7}{}\n", c.name, Median(native) * 1e3,
               Median(loom_times) * 1e3, ratio, has_target ? fmt::format("{:.2f}x", c.target) : "-",
               miss ? "  MISSED" : "");
  }
  fmt::print("{} of the targets missed\n", missed);
  return 0;
}
