// A reduction over a workgroup of 256 invocations (`//#include wgreduce`: norm.wgsl, the
// decode attention of attention.wgsl).
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
