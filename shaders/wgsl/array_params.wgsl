// The parameter block of the graph-v2 array kernels (array.wgsl, array_nn.wgsl, index.wgsl,
// typed.wgsl): the WGSL side of wgpu_ops_array.cc's ArrayParams (240 bytes), bound at 0, and its
// accessors (`//#include array_params`; one definition). base: a first element's offset (pad_dyn's
// first kept element, index ops); one: 1.0 at run time (array_nn's compensated sums multiply by it
// so that the compiler keeps them); shape / sa / sb / sc: dims and strides of up to 8 dims; u: the
// kernel's own integers.
struct P {
  n: u32, nx: u32, code: u32, ndim: u32,
  f0: f32, f1: f32, base: u32, one: f32,
  shape: array<vec4<u32>, 2>,
  sa: array<vec4<u32>, 2>,
  sb: array<vec4<u32>, 2>,
  sc: array<vec4<u32>, 2>,
  u: array<vec4<u32>, 5>,
}
@group(0) @binding(0) var<uniform> p: P;

fn shp(d: u32) -> u32 { return p.shape[d >> 2u][d & 3u]; }
fn s_a(d: u32) -> u32 { return p.sa[d >> 2u][d & 3u]; }
fn s_b(d: u32) -> u32 { return p.sb[d >> 2u][d & 3u]; }
fn s_c(d: u32) -> u32 { return p.sc[d >> 2u][d & 3u]; }
fn uu(k: u32) -> u32 { return p.u[k >> 2u][k & 3u]; }
fn ui(k: u32) -> i32 { return bitcast<i32>(p.u[k >> 2u][k & 3u]); }
