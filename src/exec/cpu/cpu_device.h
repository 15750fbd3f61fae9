// The CPU device: memory is host memory (64-byte aligned, never zeroed on
// allocation, freed buffers kept by size for reuse), ops run at once on the
// calling thread, so events are always complete. Dots go through OpenBLAS or the deterministic
// kernel; everything else through the typed kernels of exec/cpu/kernels.h.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "exec/device/device.h"

namespace loom::exec::cpu {

struct CpuDeviceOptions {
  // Dots with the deterministic kernel (exec/cpu/deterministic_gemm.h).
  bool deterministic = false;
};

class BufferPool;

class CpuDevice : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;

  std::string name() const override;
  Expected<std::shared_ptr<DeviceBuffer>> Allocate(int64_t bytes) override;
  bool Supports(const ir::Instruction& op) const override;
  Status Run(const ir::Instruction& op, std::span<const Array> operands,
             const Array& result) override;
  Status CopyFromHost(std::span<const std::byte> host, const Array& to) override;
  Status CopyToHost(const Array& from, std::span<std::byte> host) override;
  std::span<std::byte> HostView(const Array& array) override;
  EventId RecordEvent() override { return 0; }
  Status WaitEvent(EventId) override { return OkStatus(); }

  // A buffer that takes over `bytes` without copying them (inputs).
  static std::shared_ptr<DeviceBuffer> Adopt(std::vector<std::byte> bytes);

 private:
  CpuDeviceOptions options_;
  std::shared_ptr<BufferPool> pool_;  // shared with the buffers, which give memory back
};

// Which kernels compute dots: "OpenBLAS <core>" (the kernel OpenBLAS chose
// for this CPU, or the one OPENBLAS_CORETYPE forced) or "deterministic
// (<SIMD target>)".
std::string DotKernelName(bool deterministic);

// OpenBLAS's threads for every dot of this process (one per device is the
// default when several devices share the process).
void SetBlasThreads(int threads);

}  // namespace loom::exec::cpu
