// The float16 conversions the kernels use on the device (zc_port.h
// cvt_f16_f32 / cvt_f32_f16 plus zc_format.h's NaN rule), checked against
// the bitwise ones the emulation runs, for every float16 and every float32
// input. x86's F16C instructions (IEEE, round to nearest even, as PTX's
// cvt.f32.f16 and cvt.rn.f16.f32) stand in for the device's cvt:
//
//   g++ -O2 -mf16c -std=c++17 -Icuda benchmarks/results/gpu-h100-20261127/f16-cvt-check.cpp -o /tmp/f16-cvt-check
//   /tmp/f16-cvt-check        # prints bad=0
#include <immintrin.h>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include "zc_port.h"
#include "zc_format.h"
using namespace zc;
static float hw16(uint32_t h){ return _cvtsh_ss((unsigned short)h); }
static uint32_t hw32(float f){ return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
static float dev_w(uint32_t h){ const uint32_t n=h&0x7FFFu; float f=hw16(h); return n>0x7C00u? as_float(((h&0x8000u)<<16)|((n<<13)+(224u<<23))|0x00400000u):f; }
static uint32_t dev_n(float f){ uint32_t v=as_u32(f), n=v&0x7FFFFFFFu; uint32_t h=hw32(f); return n>0x7F800000u?(((v>>16)&0x8000u)|0x7E00u|((n>>13)&0x3FFu)):h; }
int main(){
  long bad=0;
  for(uint32_t h=0;h<65536;h++){ if(as_u32(dev_w(h))!=as_u32(f16_to_f32(h))){ if(bad<5)printf("w %04x\n",h); bad++;} }
  for(uint64_t u=0;u<(1ull<<32);u+=1){ float f=as_float((uint32_t)u); if(dev_n(f)!=f32_to_f16(f)){ if(bad<10)printf("n %08x %04x %04x\n",(uint32_t)u,dev_n(f),f32_to_f16(f)); bad++;} }
  printf("bad=%ld\n",bad); return bad!=0;
}
