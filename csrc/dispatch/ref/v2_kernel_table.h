// The kernels of the graph-v2 ops (op.h tags 33..44, 49..74 and 85, and conv1d, 28) under a math policy M
// (core/math_policy.h): the cpu backend's reference table takes them with StdMath, the nox backend
// with NoxMath. One definition of each kernel (dispatch/ref/*_kernels.h); the views of graph v2
// (reshape_to, squeeze, unsqueeze, flatten) have no kernel (the executor resolves them).
#pragma once
#include "dispatch/ref/array_index_kernels.h"
#include "dispatch/ref/array_nn_kernels.h"
#include "dispatch/ref/array_ops_kernels.h"
#include "dispatch/ref/v2_elem_kernels.h"

namespace cyb {

// t[OpKind] = kernel, for every graph-v2 op; Table: an array of
// void (*)(const Op&, const Tensor*, int, Tensor*, int, ExecContext&) indexed by OpKind.
template <class M, class Table>
void fill_v2_kernels(Table& t) {
  using E = V2ElemKernels<M>;
  t[OpKind::Conv1d] = &E::conv1d;
  t[OpKind::Sigmoid] = &E::sigmoid;
  t[OpKind::Tanh] = &E::tanh;
  t[OpKind::Sqrt] = &E::sqrt;
  t[OpKind::Transpose] = &E::transpose;
  t[OpKind::Slice] = &E::slice;
  t[OpKind::Pad] = &E::pad;
  t[OpKind::Lstm] = &E::lstm;
  using A = ArrayOpKernels<M>;
  t[OpKind::Unary] = &A::unary;
  t[OpKind::Binary] = &A::binary;
  t[OpKind::Where] = &A::where;
  t[OpKind::Cast] = &A::cast;
  t[OpKind::Reduce] = &A::reduce;
  t[OpKind::ShapeOf] = &A::shape_of;
  using N = ArrayNnKernels<M>;
  t[OpKind::Conv] = &N::conv;
  t[OpKind::ConvTranspose] = &N::conv_transpose;
  t[OpKind::MatmulNd] = &N::matmul_nd;
  t[OpKind::InstanceNorm] = &N::norm_groups;
  t[OpKind::GroupNorm] = &N::norm_groups;
  t[OpKind::Resize] = &N::resize;
  t[OpKind::Concat] = &N::concat;
  t[OpKind::Pool] = &N::pool;
  t[OpKind::SoftmaxAxis] = &N::softmax_axis;
  t[OpKind::AttentionNd] = &N::attention_nd;
  using I = ArrayIndexKernels<M>;
  t[OpKind::Gather] = &I::gather;
  t[OpKind::GatherElements] = &I::gather_elements;
  t[OpKind::GatherNd] = &I::gather_nd;
  t[OpKind::ScatterNd] = &I::scatter_nd;
  t[OpKind::ScatterElements] = &I::scatter_elements;
  t[OpKind::NonZero] = &I::nonzero;
  t[OpKind::Range] = &I::range;
  t[OpKind::CumSum] = &I::cumsum;
  t[OpKind::ConstantOfShape] = &I::constant_of_shape;
  t[OpKind::Expand] = &I::expand;
  t[OpKind::Tile] = &I::tile;
  t[OpKind::RandomNormalLike] = &I::random_normal_like;
  t[OpKind::ArgMax] = &I::argmax;
  t[OpKind::SliceDyn] = &I::slice_dyn;
  t[OpKind::PadDyn] = &I::pad_dyn;
}

}  // namespace cyb
