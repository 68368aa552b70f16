#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static uint64_t st[2048]; static uint8_t out[1<<16];
__attribute__((noinline)) uint8_t* c512(const uint64_t*e,int n,uint8_t*p){
  const __m512i cidx=_mm512_set_epi8(11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3,11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3,11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3,11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3);
  const __m512i pos=_mm512_set1_epi64(0x04030201ffffffffull);
  for(int j=0;j<n;j+=8){ __m512i v=_mm512_loadu_si512(e+j); __m512i c=_mm512_shuffle_epi8(v,cidx);
    __mmask64 m=_mm512_cmple_epu8_mask(pos,c); _mm512_storeu_si512(p,_mm512_maskz_compress_epi8(m,v)); p+=_mm_popcnt_u64(m);} return p;}
__attribute__((noinline)) uint8_t* c256(const uint64_t*e,int n,uint8_t*p){
  const __m256i cidx=_mm256_set_epi8(11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3,11,11,11,11,11,11,11,11,3,3,3,3,3,3,3,3);
  const __m256i pos=_mm256_set1_epi64x(0x04030201ffffffffull);
  for(int j=0;j<n;j+=4){ __m256i v=_mm256_loadu_si256((void*)(e+j)); __m256i c=_mm256_shuffle_epi8(v,cidx);
    __mmask32 m=_mm256_cmple_epu8_mask(pos,c); _mm256_storeu_si256((void*)p,_mm256_maskz_compress_epi8(m,v)); p+=_mm_popcnt_u32(m);} return p;}
int main(){ for(int i=0;i<2048;i++) st[i]=((uint64_t)(i*2654435761u)<<32)|((uint64_t)(1+i%3)<<24)|7;
  for(int it=0;it<3;it++){ double t=now(); long s=0; for(int r=0;r<160000;r++) s+=c512(st,256,out)-out; t=now()-t; printf("zmm %.3f ns/entry %ld\n",t/160000/256*1e9,s);
   t=now(); s=0; for(int r=0;r<20000;r++) s+=c256(st,2048,out)-out; t=now()-t; printf("ymm %.3f ns/entry %ld\n",t/20000/2048*1e9,s);}
}
