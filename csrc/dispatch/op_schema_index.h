// The shape rules and semantic checks of the index and data-dependent-shape ops (op.h tags 60-79),
// used by their schema rows (dispatch/op_schema.cc) and by their reference kernels
// (dispatch/ref/array_index_kernels.h).
#pragma once
#include <vector>

#include "core/tensor.h"
#include "dispatch/op.h"

namespace cyb {

inline bool is_index_op(OpKind k) {
  const int t = static_cast<int>(k);
  return t >= 60 && t < 80;
}

// Output shapes of an index op (ShapeMismatch / InvalidConfig naming the op label when the inputs or
// attributes do not fit; outputs sized by input values read those values, host memory only).
std::vector<Shape> index_op_shapes(const Op& op, const Tensor* in, int n_in);

// Index-range checks (the schema rows' OpCheck): every index within [-dim, dim), InvalidConfig
// naming the op label, the index and its position otherwise.
void check_gather(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);
void check_gather_elements(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);
void check_gather_nd(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);
void check_scatter_nd(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);
// scatter_elements shares check_gather_elements (indices against data's dims).
void check_range_dtypes(const Op& op, const Tensor* in, int n_in, const Tensor* out, int n_out);

// Range's element count: max(ceil((limit - start) / delta), 0) (checked: delta != 0, finite, at
// most kMaxIndexOpElems).
int64_t range_count(const Op& op, const Tensor* in);
// The axis attribute of `op` normalized against `nd` dims (InvalidConfig naming `<label>.attrs.axis`).
int index_op_axis(const Op& op, int nd);

}  // namespace cyb
