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
// slice_dyn: per dim of x the first element read and the step between reads (dims not sliced: 0,
// 1), and the output shape (values read from the host inputs; InvalidConfig naming the input when an
// axis repeats or is out of range, a step is 0, or the counts disagree).
struct SliceDynPlan {
  int64_t start[Shape::kMaxDims] = {};
  int64_t step[Shape::kMaxDims] = {};
  Shape out;
};
SliceDynPlan slice_dyn_plan(const Op& op, const Tensor* in, int n_in);
// pad_dyn (as onnxruntime: negative pads crop x first, then the positive ones pad what is left): per
// dim of x the first element kept, the count kept and the begin pad; and the output shape.
struct PadDynPlan {
  int64_t first[Shape::kMaxDims] = {};
  int64_t kept[Shape::kMaxDims] = {};
  int64_t before[Shape::kMaxDims] = {};
  Shape out;
};
PadDynPlan pad_dyn_plan(const Op& op, const Tensor* in);
// The axis attribute of `op` normalized against `nd` dims (InvalidConfig naming `<label>.attrs.axis`).
int index_op_axis(const Op& op, int nd);

}  // namespace cyb
