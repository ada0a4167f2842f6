#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
// write 128 rows of N f16 with 32B stores, R rows round-robin at a time, P stores per row per visit
int main(int argc,char**argv){
  int N=atoi(argv[1]); int R=atoi(argv[2]); int P=atoi(argv[3]);
  size_t rowb=(size_t)N*2, rows=128;
  char*base=aligned_alloc(64,rows*rowb+4096);
  __m256i v=_mm256_set1_epi32(7);
  double best=1e30;
  for(int rep=0;rep<2000;rep++){
    double t0=now();
    for(size_t g=0;g<rows;g+=R){
      for(size_t pos=0;pos+32*P<=rowb;pos+=32*P) for(int r=0;r<R;r++) for(int p=0;p<P;p++) _mm256_storeu_si256((__m256i*)(base+(g+r)*rowb+pos+32*p),v);
    }
    double t=now()-t0; if(t<best)best=t;
    v=_mm256_add_epi32(v,_mm256_set1_epi32(1));
  }
  printf("N=%d R=%d P=%d best=%.2f us (%.2f cyc/store @3.8)\n",N,R,P,best/1e3, best*3.8/(rows*rowb/32));
}
