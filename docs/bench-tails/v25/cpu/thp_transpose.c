// CPU probe (docs/perf.md v25): does this host's transpose cost come from the TLB? A naive
// 64-position tile transpose of the merge forward (B*nh = 64, N = 1600, kd = 32, float32) beside
// a memcpy of the same bytes, 2 OpenMP threads, buffers madvise'd MADV_NOHUGEPAGE (arg 0) or
// MADV_HUGEPAGE (arg 1); the last line shows the huge pages the process really got.
//   gcc -O3 -march=native -fopenmp thp_transpose.c -o t && OMP_NUM_THREADS=2 ./t 1
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <omp.h>
#define R 64
#define N 1600
#define KD 32
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec*1e-3;}
static float* alloc(size_t bytes,int huge){void*p=mmap(0,bytes,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
 madvise(p,bytes,huge?MADV_HUGEPAGE:MADV_NOHUGEPAGE); memset(p,1,bytes); return p;}
int main(int argc,char**argv){int huge=atoi(argv[1]);
 size_t half=(size_t)R*N*KD; float*in=alloc(2*half*4,huge),*out=alloc(2*half*4,huge),*dst=alloc(2*half*4,huge);
 for(int rep=0;rep<6;rep++){
 double best_c=1e18,best_t=1e18;
 for(int it=0;it<10;it++){double s=now();
  #pragma omp parallel for
  for(int c=0;c<64;c++) memcpy(dst+c*(2*half/64),in+c*(2*half/64),2*half*4/64);
  double e=now(); if(e-s<best_c)best_c=e-s;
  s=now();
  #pragma omp parallel for collapse(2) schedule(static)
  for(int b=0;b<2*R;b++) for(int t=0;t<N/64;t++){
    int r=b>>1,sx=b&1; const float*src=in+(size_t)sx*half+((size_t)r*N+t*64)*KD; float*o=out+(size_t)(r*2+sx)*KD*N+t*64;
    for(int d=0;d<KD;d++) for(int p=0;p<64;p++) o[(size_t)d*N+p]=src[p*KD+d];}
  e=now(); if(e-s<best_t)best_t=e-s;}
 printf("huge=%d copy %.0f us transpose %.0f us ratio %.2f\n",huge,best_c,best_t,best_t/best_c);}
 FILE*f=fopen("/proc/self/smaps_rollup","r");char l[256];while(fgets(l,256,f)) if(strstr(l,"AnonHuge"))fputs(l,stdout);
}
