#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
uint8_t lt[8192] __attribute__((aligned(4096)));
uint64_t tab[2048] __attribute__((aligned(4096)));
int main(){
  long N=100000000;
  uint64_t vals[]={0,1,777,2047,2040,1024,3000,4095};
  for(int off=0; off<1; off+=1024)
  for(int v=0; v<8; v++){
    uint64_t b=vals[v]; uint8_t*base=lt+off;
    double t=now();
    for(long i=0;i<N;i++){ uint64_t e; __asm__ volatile("movl %k1, %%eax\n\tandl $0x7ff, %%eax\n\tmovzbq (%2,%%rax,1), %0\n\tshrx %0, %1, %1" : "=&r"(e), "+r"(b) : "r"(base) : "rax"); }
    t=now()-t; printf("bytetab base+%d idx %lu: %.2f\n", off, vals[v]&0x7ff, t/N*4.2e9);
  }
  for(int v=0; v<8; v++){
    uint64_t b=vals[v]; uint64_t*base=tab;
    double t=now();
    for(long i=0;i<N;i++){ uint64_t e; __asm__ volatile("movl %k1, %%eax\n\tandl $0x7ff, %%eax\n\tmovq (%2,%%rax,8), %0\n\tshrx %0, %1, %1" : "=&r"(e), "+r"(b) : "r"(base) : "rax"); }
    t=now()-t; printf("qtab scale8 idx %lu: %.2f\n", vals[v]&0x7ff, t/N*4.2e9);
  }
  for(int v=0; v<8; v++){
    uint64_t b=vals[v]+ (1ull<<40); uint8_t*base=lt;
    double t=now();
    for(long i=0;i<N;i++){ uint64_t e; __asm__ volatile("movl %k1, %%eax\n\tandl $0x7ff, %%eax\n\tmovzbq (%2,%%rax,1), %0\n\tshrx %0, %1, %1" : "=&r"(e), "+r"(b) : "r"(base) : "rax"); }
    t=now()-t; printf("bytetab bigb idx %lu: %.2f\n", vals[v]&0x7ff, t/N*4.2e9);
  }
  for(int v=0; v<3; v++){
    uint64_t b=vals[v]; uint8_t*base=lt-16384;
    double t=now();
    for(long i=0;i<N;i++){ uint64_t e; __asm__ volatile("movl %k1, %%eax\n\tandl $0x7ff, %%eax\n\tmovzbq 16384(%2,%%rax,1), %0\n\tshrx %0, %1, %1" : "=&r"(e), "+r"(b) : "r"(base) : "rax"); }
    t=now()-t; printf("bytetab disp16384 idx %lu: %.2f\n", vals[v]&0x7ff, t/N*4.2e9);
  }
  for(int v=0; v<3; v++){
    uint64_t b=vals[v]; uint8_t*base=lt-8;
    double t=now();
    for(long i=0;i<N;i++){ uint64_t e; __asm__ volatile("movl %k1, %%eax\n\tandl $0x7ff, %%eax\n\tmovzbq 8(%2,%%rax,1), %0\n\tshrx %0, %1, %1" : "=&r"(e), "+r"(b) : "r"(base) : "rax"); }
    t=now()-t; printf("bytetab disp8 idx %lu: %.2f\n", vals[v]&0x7ff, t/N*4.2e9);
  }
  return 0;
}
