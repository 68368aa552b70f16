// One to eight chains of index (AND), table load and shift (SHRX), with an XOR to keep the buffers random: cycles per step at an assumed 4.2 GHz. gcc -O2 -mbmi2 chain.c
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
static uint64_t lut[2048];
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
#define STEP(b) { uint64_t e = lut[b & 2047]; b = (b >> (e & 63)) ^ e; }
int main(){
  srand(1); for(int i=0;i<2048;i++){ uint64_t r=((uint64_t)rand()<<33)^((uint64_t)rand()<<11)^rand(); lut[i]=(r&~63ull)|(4+rand()%7); }
  long N=200000000; double ghz=4.2;
  uint64_t b[8]={1,2,3,4,5,6,7,8};
  for (int chains=1; chains<=8; chains*=2){
    double t0=now();
    for(long i=0;i<N;i++){ STEP(b[0]); if(chains>1){STEP(b[1]);} if(chains>2){STEP(b[2]);STEP(b[3]);} if(chains>4){STEP(b[4]);STEP(b[5]);STEP(b[6]);STEP(b[7]);} }
    double t=now()-t0; printf("%d chains: %.2f cycles per lookup-step of one chain, %.2f cycles per lookup overall (at %.1f GHz) %lu\n", chains, t*ghz*1e9/N, t*ghz*1e9/N/chains, ghz, b[0]^b[1]^b[2]^b[3]^b[4]^b[5]^b[6]^b[7]);
  }
}
