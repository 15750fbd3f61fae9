#include "pass/ring/chunked_reduction.h"

#include <fmt/format.h>

#include "pass/ring/block_ops.h"
#include "pass/ring/dimension_trace.h"

namespace loom::pass {

using ir::Instruction;
using ir::Opcode;

namespace {

constexpr std::string_view kFrontendAttributes = "frontend_attributes";
constexpr std::string_view kChunkKey = "_loom_chunk=";

// `collective` marked as chunk `index` of `chunks`, beside any frontend
// attributes it had.
void MarkChunk(Instruction& collective, int64_t index, int64_t chunks) {
  const std::string entry = fmt::format("{}\"{}/{}\"", kChunkKey, index, chunks);
  for (ir::RawAttribute& raw : collective.mutable_attrs().raw) {
    if (raw.key != kFrontendAttributes) continue;
    const size_t close = raw.value.rfind('}');
    if (close == std::string::npos) break;
    const bool empty = raw.value.find_first_not_of("{ ") == close;
    raw.value.insert(close, empty ? entry : "," + entry);
    return;
  }
  collective.mutable_attrs().raw.push_back(
      {std::string(kFrontendAttributes), "{" + entry + "}", {}});
}

}  // namespace

bool IsChunk(const Instruction& collective) {
  for (const ir::RawAttribute& raw : collective.attrs().raw) {
    if (raw.key == kFrontendAttributes && raw.value.find(kChunkKey) != std::string::npos) {
      return true;
    }
  }
  return false;
}

bool KeepsDimensions(const Instruction& op) {
  return (op.opcode() == Opcode::kConvert || op.opcode() == Opcode::kCopy) &&
         op.operand_count() == 1;
}

std::optional<int64_t> ChunkDimension(const Instruction& dot, int64_t scattered) {
  for (int64_t d = 0; d < dot.shape().rank(); ++d) {
    if (d != scattered && dot.shape().dim(d) >= 2) return d;
  }
  return std::nullopt;
}

namespace {

// Chunk `index` of the pair: the product of the operand slices that make
// that chunk of the output, the chain replayed on it, its own collective.
Expected<Instruction*> EmitChunk(ir::Builder& builder, const ChunkedReduction& m, int64_t index,
                                 int64_t chunks, ir::NameTable& names) {
  const std::vector<int64_t> dims(m.chain.size(), m.output_dim);
  LOOM_ASSIGN_OR_RETURN(Instruction * part,
                        ProductBlock(builder, *m.dot, m.dot->operand(0), m.dot->operand(1), m.dim,
                                     m.chain, dims, builder.S32(index), chunks));
  std::vector<int64_t> result = m.collective->shape().dims();
  result[static_cast<size_t>(m.output_dim)] /= chunks;
  Instruction* reduced = builder.CloneUnaryWithShape(
      *m.collective, part, ir::Shape(m.collective->shape().type(), std::move(result)));
  if (reduced->attrs().channel_id) reduced->mutable_attrs().channel_id = names.NextChannelId();
  MarkChunk(*reduced, index, chunks);
  return reduced;
}

}  // namespace

Status EmitChunkedReduction(const ChunkedReduction& match, int64_t chunks, ir::NameTable& names) {
  ir::Builder builder(*match.collective->parent(), names, match.collective);
  std::vector<Instruction*> parts;
  for (int64_t i = 0; i < chunks; ++i) {
    LOOM_ASSIGN_OR_RETURN(Instruction * part, EmitChunk(builder, match, i, chunks, names));
    parts.push_back(part);
  }
  LOOM_ASSIGN_OR_RETURN(Instruction * whole, builder.Concatenate(parts, match.output_dim));
  ReplaceByRewrite(builder, match.collective, whole,
                   match.chain.empty() ? match.dot : match.chain.back());
  return OkStatus();
}

}  // namespace loom::pass
