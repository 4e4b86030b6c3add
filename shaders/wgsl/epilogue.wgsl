// The matrix kernels' fused epilogues (matmul.wgsl, matvec.wgsl: fused_matmul_gelu with GELU or
// GELU_TANH, fused_matmul_add with ADD), on token t's output of column col: the matmul's f32
// result v (bias included), then the op it replaces, as that op computes it. The including
// shader declares p.r_off, p.ldy and, with ADD, the residual R (laid out as the output).
//#include act
fn epi(v: f32, t: u32, col: u32) -> f32 {
  var o = v;
//#if GELU
  o = gelu_erf(v);
//#endif
//#if GELU_TANH
  o = gelu_tanh(v);
//#endif
//#if ADD
  o = v + R[p.r_off + t * p.ldy + col];
//#endif
  return o;
}
