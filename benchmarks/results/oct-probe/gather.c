#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
uint32_t tab[4096*4] __attribute__((aligned(64)));
int main(){
  for(int i=0;i<4096*4;i++) tab[i]=(i*2654435761u)>>3;
  long N=100000000;
  // throughput: 4 independent chains of zmm dword gathers
  __m512i a=_mm512_set1_epi32(1),b=_mm512_set1_epi32(2),c=_mm512_set1_epi32(3),d=_mm512_set1_epi32(4);
  __m512i m=_mm512_set1_epi32(4095);
  double t=now();
  for(long i=0;i<N/4;i++){
    a=_mm512_i32gather_epi32(_mm512_and_si512(a,m),tab,4);
    b=_mm512_i32gather_epi32(_mm512_and_si512(b,m),tab,4);
    c=_mm512_i32gather_epi32(_mm512_and_si512(c,m),tab,4);
    d=_mm512_i32gather_epi32(_mm512_and_si512(d,m),tab,4);
  }
  t=now()-t; printf("zmm dd gather: %.3f ns per gather (4 chains) %d\n",t/N*1e9,_mm512_reduce_add_epi32(a^b^c^d));
  t=now();
  for(long i=0;i<N/8;i++){
    a=_mm512_i32gather_epi32(_mm512_and_si512(a,m),tab,4);
  }
  t=now()-t; printf("zmm dd gather latency: %.3f ns %d\n",t/(N/8)*1e9,_mm512_reduce_add_epi32(a));
  __m256i x=_mm256_set1_epi32(1),y=_mm256_set1_epi32(2),z=_mm256_set1_epi32(3),w=_mm256_set1_epi32(4), m2=_mm256_set1_epi32(4095);
  t=now();
  for(long i=0;i<N/4;i++){
    x=_mm256_i32gather_epi32((int*)tab,_mm256_and_si256(x,m2),4);
    y=_mm256_i32gather_epi32((int*)tab,_mm256_and_si256(y,m2),4);
    z=_mm256_i32gather_epi32((int*)tab,_mm256_and_si256(z,m2),4);
    w=_mm256_i32gather_epi32((int*)tab,_mm256_and_si256(w,m2),4);
  }
  t=now()-t; printf("ymm dd gather: %.3f ns per gather %d\n",t/N*1e9,_mm256_extract_epi32(x^y^z^w,0));
  return 0;
}
