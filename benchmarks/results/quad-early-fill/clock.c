#include <stdio.h>
#include <time.h>
int main(){ struct timespec a,b; long n=2000000000; long x=0;
clock_gettime(CLOCK_MONOTONIC,&a);
__asm__ volatile("1: addq $1, %0\n addq $1, %0\n addq $1, %0\n addq $1, %0\n subq $4, %1\n jnz 1b" : "+r"(x), "+r"(n));
clock_gettime(CLOCK_MONOTONIC,&b);
double t=(b.tv_sec-a.tv_sec)+(b.tv_nsec-a.tv_nsec)*1e-9; printf("%.2f GHz (chain of %ld adds in %.3f s)\n", 2e9/t/1e9, x, t); }
