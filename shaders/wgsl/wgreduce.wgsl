// Reductions over a workgroup of 256 invocations (`//#include wgreduce`: norm.wgsl, the
// decode attention of attention.wgsl, beam.wgsl; sample.wgsl keeps its own, sized by its WG64
// variant).
var<workgroup> red: array<f32, 256>;

// The workgroup's 256 values v combined (their maximum with is_max, else their sum): every
// lane gets it, and red is free again on return. Call from uniform control flow.
fn wg_reduce(v: f32, li: u32, is_max: bool) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) {
      if (is_max) { red[li] = max(red[li], red[li + s]); } else { red[li] += red[li + s]; }
    }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

var<workgroup> red_min: array<u32, 256>;
var<workgroup> red_min_res: u32;

// The smallest of the workgroup's 256 values v, as a uniform value (every lane gets it; the
// sampling and beam kernels' first non-finite logit). Call from uniform control flow.
fn wg_min_u32(v: u32, li: u32) -> u32 {
  red_min[li] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) { red_min[li] = min(red_min[li], red_min[li + s]); }
    workgroupBarrier();
  }
  if (li == 0u) { red_min_res = red_min[0]; }
  return workgroupUniformLoad(&red_min_res);
}
