#include "analysis/flops.h"

namespace loom::analysis {

int64_t DotFlops(const ir::Instruction& dot) {
  if (!dot.attrs().dot || dot.operand_count() < 1) return 0;
  int64_t contracted = 1;
  const ir::Shape& lhs = dot.operand(0)->shape();
  for (int64_t d : dot.attrs().dot->lhs_contracting) {
    if (d >= 0 && d < lhs.rank()) contracted *= lhs.dim(d);
  }
  return 2 * dot.shape().ElementCount() * contracted;
}

}  // namespace loom::analysis
