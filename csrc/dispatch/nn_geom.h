// Geometry of the graph-v2 nn ops (conv, conv_transpose, pool, resize, matmul_nd, concat, ...):
// the output shapes from the attributes and the input shapes, checked once here (structured
// ShapeMismatch / InvalidConfig naming the op label and what is wrong) for validate_op,
// infer_output_shapes and the kernels (dispatch/ref/array_nn_kernels.h).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "dispatch/op.h"

namespace cyb {

// conv, conv_transpose, pool over sd = 1 or 2 spatial dims of x [N, C, spatial..].
struct ConvGeom {
  int sd = 0;
  int64_t N = 0, C = 0, O = 0;  // O: output channels (pool: C)
  int64_t group = 1;
  int64_t in[2] = {1, 1}, k[2] = {1, 1}, out[2] = {1, 1};
  int64_t stride[2] = {1, 1}, dil[2] = {1, 1}, pb[2] = {0, 0}, pe[2] = {0, 0}, opad[2] = {0, 0};
  Shape out_shape;
};
ConvGeom conv_geom(const Op& op, const Tensor* in, int n_in);

// matmul_nd: a [.., M, K] @ b [.., K, N] with numpy's rules.
struct MatmulGeom {
  int64_t M = 0, K = 0, N = 0, batch = 1;
  Shape batch_shape;            // the broadcast batch dims
  int64_t a_bstride[Shape::kMaxDims] = {}, b_bstride[Shape::kMaxDims] = {};  // per batch dim, in matrices
  Shape out_shape;
};
MatmulGeom matmul_geom(const Op& op, const Shape& a, const Shape& b);

// The output shapes of the nn ops (ShapeRule::Computed rows); the op's geometry checks.
std::vector<Shape> nn_output_shapes(const Op& op, const Tensor* in, int n_in);

// An axis attribute (negative from the end) as a dim of a rank-nd array; InvalidConfig otherwise.
int nn_axis(const Op& op, int nd);

// Resize along one dim of n_in -> n_out values: output index o reads source indices a and b with
// weight 1 - f and f (nearest: a = b, f = 0; a dim whose size is unchanged: o itself), by the
// op's mode, coordinate_transformation_mode and nearest_mode, in double (the cpu reference and
// the wgpu+rs kernel's host-side tables share it).
void resize_source(const Op& op, int64_t o, int64_t n_in, int64_t n_out, int64_t* a, int64_t* b, double* f);
// The same as up to four taps: source indices idx[k] with weights w[k], k < the count returned
// (nearest 1, linear 2 (1 - f, f; one where f = 0), cubic 4: floor(c) - 1 .. floor(c) + 2 with
// Keys' weights of coefficient a = cubic_coeff_a (op.a.alpha), indices clamped to the dim (ONNX's
// edge padding), or with exclude_outside (op.a.exclusive) the taps outside it dropped and the
// others' weights scaled to sum to 1); a dim whose size is unchanged: o itself, weight 1.
int resize_taps(const Op& op, int64_t o, int64_t n_in, int64_t n_out, int64_t idx[4], double w[4]);

}  // namespace cyb
