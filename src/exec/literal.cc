#include "exec/literal.h"

#include <fmt/format.h>

#include "ir/literal.h"

namespace loom::exec {

Expected<Tensor> ParseLiteral(std::string_view literal, const ir::Shape& shape) {
  if (shape.IsTuple()) return Error{"tuple literals are not supported", SourceLoc{}};
  LOOM_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Zeros(shape));
  const bool integral = ir::IsInteger(shape.type()) || shape.type() == ir::PrimitiveType::kPred;
  LOOM_ASSIGN_OR_RETURN(
      const ir::LiteralForm form,
      ir::ReadLiteral(literal, shape, [&](int64_t index, const ir::LiteralElement& element) {
        if (integral) {
          tensor.SetInt(index, element.integer);
        } else {
          tensor.SetDouble(index, element.floating);
        }
      }));
  switch (form) {
    case ir::LiteralForm::kElements:
      break;
    case ir::LiteralForm::kScalarForAll:
      for (int64_t i = 1; i < tensor.ElementCount(); ++i) tensor.SetBits(i, tensor.GetBits(0));
      break;
    case ir::LiteralForm::kElided:
      return Error{"the literal was elided ({...}) when the module was printed", SourceLoc{}};
    case ir::LiteralForm::kNotRead:
      return Error{
          fmt::format("literals of {} are not supported", ir::PrimitiveTypeName(shape.type())),
          SourceLoc{}};
  }
  return tensor;
}

Expected<Tensor> EvaluateConstant(const ir::Instruction& constant) {
  Expected<Tensor> tensor = ParseLiteral(constant.literal(), constant.shape());
  if (tensor.ok()) return tensor;
  return Error{fmt::format("constant %{}: {}", constant.name(), tensor.error().message),
               constant.loc()};
}

Expected<Tensor> DimensionSize(const ir::Instruction& get_dimension_size) {
  const std::vector<int64_t> dims =
      get_dimension_size.attrs().dimensions.value_or(std::vector<int64_t>{});
  const ir::Shape& shape = get_dimension_size.shape();
  if (get_dimension_size.operand_count() != 1 || dims.size() != 1 || !shape.IsArray() ||
      shape.rank() != 0 || !get_dimension_size.operand(0)->shape().IsArray() || dims[0] < 0 ||
      dims[0] >= get_dimension_size.operand(0)->shape().rank()) {
    return Error{fmt::format("%{}: get-dimension-size takes an array and one of its dimensions",
                             get_dimension_size.name()),
                 get_dimension_size.loc()};
  }
  LOOM_ASSIGN_OR_RETURN(Tensor size, Tensor::Zeros(shape));
  size.SetInt(0, get_dimension_size.operand(0)->shape().dims()[static_cast<size_t>(dims[0])]);
  return size;
}

}  // namespace loom::exec
