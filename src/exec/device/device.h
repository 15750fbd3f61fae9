// The narrow interface between the executor and a device, in the spirit of
// ggml's backends: allocate memory, say whether an op can run, run one array
// op, copy to and from the host, order work with events, and optionally run
// collectives natively. The executor (exec/executor.h) does everything else:
// control flow, tuples, which buffers alias which, when a buffer dies, and
// collectives over a Communicator for devices whose memory the host can see.
//
// The CPU device (exec/cpu/cpu_device.h) is the first implementation; a CUDA
// device (cuBLAS for dots, NCCL as its native collectives) plugs in here, so
// nothing in this header is specific to the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ir/instruction.h"
#include "ir/shape.h"
#include "support/status.h"

namespace loom::exec {

// Memory of one device, opaque to everyone but the device that made it.
class DeviceBuffer {
 public:
  virtual ~DeviceBuffer() = default;
  virtual int64_t size_bytes() const = 0;
};

// An array on a device: `shape` (packed row-major; layouts do not change the
// logical order) starting `offset` bytes into `buffer`. Arrays share buffers:
// reshape, bitcast, copy, tuple, get-tuple-element and contiguous slices name
// their operand's bytes instead of copying them.
struct Array {
  std::shared_ptr<DeviceBuffer> buffer;
  int64_t offset = 0;
  const ir::Shape* shape = nullptr;  // not owned: the IR's, which outlives every run

  int64_t bytes() const { return shape->ByteSize(); }
  ir::PrimitiveType type() const { return shape->type(); }
};

// Work on a device runs in the order it is issued; an event marks a point in
// that order, and waiting on it waits for everything issued before it.
using EventId = int64_t;

class Device {
 public:
  virtual ~Device() = default;

  // "cpu (OpenBLAS Haswell)", for reports.
  virtual std::string name() const = 0;

  // At least `bytes` bytes of device memory, contents unspecified.
  virtual Expected<std::shared_ptr<DeviceBuffer>> Allocate(int64_t bytes) = 0;

  // Whether Run can execute `op` on its operand and result types.
  virtual bool Supports(const ir::Instruction& op) const = 0;

  // Runs one array op: reads `operands` (one per operand of `op`), writes
  // `result`. `result` may share its buffer with an operand that nothing else
  // reads any more (the executor decides; see Executor): element-wise ops,
  // convert between types of one width, dynamic-update-slice and scatter then
  // work in place, which every implementation must allow.
  virtual Status Run(const ir::Instruction& op, std::span<const Array> operands,
                     const Array& result) = 0;

  virtual Status CopyFromHost(std::span<const std::byte> host, const Array& to) = 0;
  virtual Status CopyToHost(const Array& from, std::span<std::byte> host) = 0;

  // The bytes of `array` as host memory, when the device's memory is host
  // memory; empty otherwise. The executor runs collectives over a
  // Communicator on these views; a device without them must run
  // collectives natively.
  virtual std::span<std::byte> HostView(const Array& array) = 0;

  virtual EventId RecordEvent() = 0;
  virtual Status WaitEvent(EventId event) = 0;
};

}  // namespace loom::exec
