#include "exec/cpu/cpu_device.h"

#include <cblas.h>
#include <fmt/format.h>

#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "exec/cpu/deterministic_gemm.h"
#include "exec/cpu/kernels.h"
#include "exec/tensor.h"
#include "ir/reduction.h"
#include "ir/select_and_scatter.h"

namespace loom::exec::cpu {
constexpr std::align_val_t kAlignment{64};

// Freed buffers, kept by size for the next allocation of that size: a
// program allocates the same sizes over and over (every step of a ring,
// every iteration of a loop), and fresh memory from the system costs a page
// fault per page on first touch, which for a memory-bound op is more than
// the op itself. At most kCapacity bytes are kept.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr size_t kCapacity = size_t{1} << 30;

  std::byte* Take(size_t size) {
    {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        std::byte* data = it->second.back();
        it->second.pop_back();
        cached_ -= size;
        return data;
      }
    }
    return static_cast<std::byte*>(::operator new[](size, kAlignment, std::nothrow));
  }

  void Give(std::byte* data, size_t size) {
    {
      std::lock_guard lock(mutex_);
      if (cached_ + size <= kCapacity) {
        free_[size].push_back(data);
        cached_ += size;
        return;
      }
    }
    ::operator delete[](data, kAlignment);
  }

  ~BufferPool() {
    for (auto& [size, blocks] : free_) {
      for (std::byte* data : blocks) ::operator delete[](data, kAlignment);
    }
  }

 private:
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<std::byte*>> free_;
  size_t cached_ = 0;
};

namespace {

using ir::Opcode;

class CpuBuffer : public DeviceBuffer {
 public:
  // Memory of the pool (given back to it when the buffer dies).
  CpuBuffer(std::shared_ptr<BufferPool> pool, std::byte* data, size_t capacity, int64_t bytes)
      : pool_(std::move(pool)), data_(data), capacity_(capacity), bytes_(bytes) {}
  // Bytes handed over by the host.
  explicit CpuBuffer(std::vector<std::byte> adopted)
      : adopted_(std::move(adopted)),
        data_(adopted_.data()),
        bytes_(static_cast<int64_t>(adopted_.size())) {}
  ~CpuBuffer() override {
    if (pool_) pool_->Give(data_, capacity_);
  }
  CpuBuffer(const CpuBuffer&) = delete;
  CpuBuffer& operator=(const CpuBuffer&) = delete;

  int64_t size_bytes() const override { return bytes_; }
  std::byte* data() { return data_; }

 private:
  std::shared_ptr<BufferPool> pool_;
  std::vector<std::byte> adopted_;
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
  int64_t bytes_ = 0;
};

// Sizes the pool keeps apart: 64-byte steps up to a page, whole pages above.
size_t PoolSize(int64_t bytes) {
  const auto size = static_cast<size_t>(std::max<int64_t>(bytes, 64));
  const size_t step = size <= 4096 ? 64 : 4096;
  return (size + step - 1) / step * step;
}

HostArray Host(const Array& array) {
  auto* buffer = static_cast<CpuBuffer*>(array.buffer.get());
  return HostArray{buffer->data() + array.offset, array.shape};
}

bool HasDefaultLayout(const ir::Shape& shape) {
  if (!shape.layout()) return true;
  const auto& order = shape.layout()->minor_to_major;
  for (size_t i = 0; i < order.size(); ++i) {
    if (order[i] != static_cast<int64_t>(order.size() - 1 - i)) return false;
  }
  return true;
}

// reshape, bitcast, bitcast-convert: the same bytes under another shape.
Status CopyBytes(const ir::Instruction& op, const HostArray& x, const HostArray& out) {
  if (op.opcode() == Opcode::kBitcast &&
      !(HasDefaultLayout(*x.shape) && HasDefaultLayout(*out.shape))) {
    return KernelError(op, "bitcast with a non-default layout is unsupported");
  }
  if (x.bytes() != out.bytes()) {
    return KernelError(op, fmt::format("{} from {} bytes to {} bytes is unsupported",
                                       ir::OpcodeName(op.opcode()), x.bytes(), out.bytes()));
  }
  if (x.data != out.data) std::memcpy(out.data, x.data, static_cast<size_t>(out.bytes()));
  return OkStatus();
}

std::optional<Opcode> SimpleReducer(const ir::Instruction& op) {
  const ir::Computation* reducer = op.called("to_apply");
  if (reducer == nullptr) return std::nullopt;
  return ir::CommutativeBinaryReducer(*reducer);
}

// A select-and-scatter's select as a compare direction and its scatter as
// one op, where they are that simple.
std::optional<std::pair<ir::ComparisonDirection, Opcode>> SimpleSelectAndScatter(
    const ir::Instruction& op) {
  const ir::Computation* select = op.called("select");
  const ir::Computation* scatter = op.called("scatter");
  if (select == nullptr || scatter == nullptr) return std::nullopt;
  const std::optional<ir::ComparisonDirection> direction = ir::SelectComparison(*select);
  const std::optional<Opcode> combine = ir::CommutativeBinaryReducer(*scatter);
  if (!direction || !combine) return std::nullopt;
  return std::make_pair(*direction, *combine);
}

bool ExecutableArrays(const ir::Instruction& op) {
  if (op.shape().IsTuple() || !IsExecutableType(op.shape().type())) return false;
  for (const ir::Instruction* operand : op.operands()) {
    if (operand->shape().IsTuple() || !IsExecutableType(operand->shape().type())) return false;
  }
  return true;
}

}  // namespace

std::string CpuDevice::name() const {
  return "cpu, dot kernels " + DotKernelName(options_.deterministic);
}

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : options_(options), pool_(std::make_shared<BufferPool>()) {}

CpuDevice::~CpuDevice() = default;

Expected<std::shared_ptr<DeviceBuffer>> CpuDevice::Allocate(int64_t bytes) {
  if (bytes < 0) return Error{fmt::format("cannot allocate {} bytes", bytes)};
  // Never a null pointer, even for an empty array.
  const size_t size = PoolSize(bytes);
  std::byte* data = pool_->Take(size);
  if (data == nullptr) {
    return Error{fmt::format("out of memory: cannot allocate {} bytes", bytes)};
  }
  return std::shared_ptr<DeviceBuffer>(std::make_shared<CpuBuffer>(pool_, data, size, bytes));
}

std::shared_ptr<DeviceBuffer> CpuDevice::Adopt(std::vector<std::byte> bytes) {
  if (bytes.empty()) bytes.resize(1);  // never a null pointer
  return std::make_shared<CpuBuffer>(std::move(bytes));
}

bool CpuDevice::Supports(const ir::Instruction& op) const {
  if (!ExecutableArrays(op)) return false;
  const Opcode code = op.opcode();
  if (ir::IsElementwiseUnary(code) || ir::IsElementwiseBinary(code)) return true;
  switch (code) {
    case Opcode::kCompare:
    case Opcode::kCopy:
    case Opcode::kSelect:
    case Opcode::kClamp:
    case Opcode::kConvert:
    case Opcode::kBitcastConvert:
    case Opcode::kReshape:
    case Opcode::kBitcast:
    case Opcode::kBroadcast:
    case Opcode::kTranspose:
    case Opcode::kReverse:
    case Opcode::kSlice:
    case Opcode::kDynamicSlice:
    case Opcode::kDynamicUpdateSlice:
    case Opcode::kConcatenate:
    case Opcode::kPad:
    case Opcode::kIota:
    case Opcode::kDot:
    case Opcode::kConvolution:
      return true;
    case Opcode::kReduce:
    case Opcode::kReduceWindow:
      return op.operand_count() == 2 && SimpleReducer(op).has_value();
    case Opcode::kSelectAndScatter:
      return op.operand_count() == 3 && SimpleSelectAndScatter(op).has_value();
    case Opcode::kSort:  // several operands give a tuple: the executor sorts those
      return op.operand_count() == 1 && op.called("to_apply") != nullptr &&
             ir::SimpleSortComparator(*op.called("to_apply")).has_value();
    case Opcode::kGather:
      return op.operand_count() == 2;
    case Opcode::kScatter:
      return ScatterRuns(op);
    default:
      return false;
  }
}

Status CpuDevice::Run(const ir::Instruction& op, std::span<const Array> operands,
                      const Array& result) {
  std::vector<HostArray> in;
  in.reserve(operands.size());
  for (const Array& operand : operands) in.push_back(Host(operand));
  const HostArray out = Host(result);
  auto need = [&](size_t count) -> Status {
    if (in.size() >= count) return OkStatus();
    return KernelError(op, fmt::format("{} needs at least {} operands, has {}",
                                       ir::OpcodeName(op.opcode()), count, in.size()));
  };
  const Opcode code = op.opcode();
  if (code == Opcode::kCompare) {
    LOOM_RETURN_IF_ERROR(need(2));
    return Compare(op, in[0], in[1], out);
  }
  if (ir::IsElementwiseUnary(code) || code == Opcode::kCopy) {
    LOOM_RETURN_IF_ERROR(need(1));
    return Unary(op, in[0], out);
  }
  if (ir::IsElementwiseBinary(code)) {
    LOOM_RETURN_IF_ERROR(need(2));
    return Binary(op, in[0], in[1], out);
  }
  switch (code) {
    case Opcode::kSelect:
      LOOM_RETURN_IF_ERROR(need(3));
      return Select(in[0], in[1], in[2], out);
    case Opcode::kClamp:
      LOOM_RETURN_IF_ERROR(need(3));
      return Clamp(op, in[0], in[1], in[2], out);
    case Opcode::kConvert:
      LOOM_RETURN_IF_ERROR(need(1));
      return Convert(in[0], out);
    case Opcode::kBitcastConvert:
    case Opcode::kReshape:
    case Opcode::kBitcast:
      LOOM_RETURN_IF_ERROR(need(1));
      return CopyBytes(op, in[0], out);
    case Opcode::kBroadcast:
      LOOM_RETURN_IF_ERROR(need(1));
      return Broadcast(op, in[0], out);
    case Opcode::kTranspose:
      LOOM_RETURN_IF_ERROR(need(1));
      return Transpose(op, in[0], out);
    case Opcode::kReverse:
      LOOM_RETURN_IF_ERROR(need(1));
      return Reverse(op, in[0], out);
    case Opcode::kSlice:
      LOOM_RETURN_IF_ERROR(need(1));
      return Slice(op, in[0], out);
    case Opcode::kDynamicSlice:
      LOOM_RETURN_IF_ERROR(need(1));
      return DynamicSlice(op, in, out);
    case Opcode::kDynamicUpdateSlice:
      LOOM_RETURN_IF_ERROR(need(2));
      return DynamicUpdateSlice(op, in, out);
    case Opcode::kConcatenate:
      return Concatenate(op, in, out);
    case Opcode::kPad:
      LOOM_RETURN_IF_ERROR(need(2));
      return Pad(op, in[0], in[1], out);
    case Opcode::kIota:
      return Iota(op, out);
    case Opcode::kGather:
      LOOM_RETURN_IF_ERROR(need(2));
      return Gather(op, in[0], in[1], out);
    case Opcode::kScatter:
      return Scatter(op, in, out);
    case Opcode::kDot:
      LOOM_RETURN_IF_ERROR(need(2));
      return Dot(op, in[0], in[1], out, options_.deterministic);
    case Opcode::kConvolution:
      LOOM_RETURN_IF_ERROR(need(2));
      return Convolution(op, in[0], in[1], out);
    case Opcode::kReduce:
    case Opcode::kReduceWindow: {
      LOOM_RETURN_IF_ERROR(need(2));
      const std::optional<Opcode> reducer = SimpleReducer(op);
      if (!reducer) {
        return KernelError(
            op, fmt::format("{} needs a one-op reducer on this device", ir::OpcodeName(code)));
      }
      return code == Opcode::kReduce ? Reduce(op, *reducer, in[0], in[1], out)
                                     : ReduceWindow(op, *reducer, in[0], in[1], out);
    }
    case Opcode::kSort: {
      LOOM_RETURN_IF_ERROR(need(1));
      const ir::Computation* comparator = op.called("to_apply");
      const auto key = comparator ? ir::SimpleSortComparator(*comparator) : std::nullopt;
      if (!key) return KernelError(op, "sort needs a one-compare comparator on this device");
      return Sort(op, *key, in, std::span<const HostArray>(&out, 1));
    }
    case Opcode::kSelectAndScatter: {
      LOOM_RETURN_IF_ERROR(need(3));
      const auto simple = SimpleSelectAndScatter(op);
      if (!simple) {
        return KernelError(op,
                           "select-and-scatter needs a one-compare select and a one-op scatter "
                           "on this device");
      }
      return SelectAndScatter(op, simple->first, simple->second, in[0], in[1], in[2], out);
    }
    default:
      return KernelError(op, fmt::format("unsupported op {}", ir::OpcodeName(code)));
  }
}

Status CpuDevice::CopyFromHost(std::span<const std::byte> host, const Array& to) {
  if (static_cast<int64_t>(host.size()) != to.bytes()) {
    return Error{fmt::format("{} host bytes for an array of {}", host.size(), to.bytes())};
  }
  if (!host.empty()) std::memcpy(Host(to).data, host.data(), host.size());
  return OkStatus();
}

Status CpuDevice::CopyToHost(const Array& from, std::span<std::byte> host) {
  if (static_cast<int64_t>(host.size()) != from.bytes()) {
    return Error{fmt::format("{} host bytes for an array of {}", host.size(), from.bytes())};
  }
  if (!host.empty()) std::memcpy(host.data(), Host(from).data, host.size());
  return OkStatus();
}

std::span<std::byte> CpuDevice::HostView(const Array& array) {
  return {Host(array).data, static_cast<size_t>(array.bytes())};
}

std::string DotKernelName(bool deterministic) {
  if (deterministic) {
    const std::vector<std::string> targets = DeterministicGemmTargets();
    return fmt::format("deterministic ({})", targets.empty() ? "scalar" : targets.front());
  }
  return fmt::format("OpenBLAS {}", openblas_get_corename());
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads); }

}  // namespace loom::exec::cpu
