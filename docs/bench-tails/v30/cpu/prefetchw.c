#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
#define KD 32
static inline void tr8(__m256 r[8]){
  __m256 t0=_mm256_unpacklo_ps(r[0],r[1]),t1=_mm256_unpackhi_ps(r[0],r[1]),t2=_mm256_unpacklo_ps(r[2],r[3]),t3=_mm256_unpackhi_ps(r[2],r[3]);
  __m256 t4=_mm256_unpacklo_ps(r[4],r[5]),t5=_mm256_unpackhi_ps(r[4],r[5]),t6=_mm256_unpacklo_ps(r[6],r[7]),t7=_mm256_unpackhi_ps(r[6],r[7]);
  __m256 s0=_mm256_shuffle_ps(t0,t2,0x44),s1=_mm256_shuffle_ps(t0,t2,0xEE),s2=_mm256_shuffle_ps(t1,t3,0x44),s3=_mm256_shuffle_ps(t1,t3,0xEE);
  __m256 s4=_mm256_shuffle_ps(t4,t6,0x44),s5=_mm256_shuffle_ps(t4,t6,0xEE),s6=_mm256_shuffle_ps(t5,t7,0x44),s7=_mm256_shuffle_ps(t5,t7,0xEE);
  r[0]=_mm256_permute2f128_ps(s0,s4,0x20);r[1]=_mm256_permute2f128_ps(s1,s5,0x20);r[2]=_mm256_permute2f128_ps(s2,s6,0x20);r[3]=_mm256_permute2f128_ps(s3,s7,0x20);
  r[4]=_mm256_permute2f128_ps(s0,s4,0x31);r[5]=_mm256_permute2f128_ps(s1,s5,0x31);r[6]=_mm256_permute2f128_ps(s2,s6,0x31);r[7]=_mm256_permute2f128_ps(s3,s7,0x31);
}
static inline void tile(const float*in,float*out,long N,long n0,int d0){
  __m256 r[8]; for(int i=0;i<8;i++) r[i]=_mm256_loadu_ps(in+(n0+i)*KD+d0);
  tr8(r); for(int i=0;i<8;i++) _mm256_storeu_ps(out+(d0+i)*N+n0,r[i]);
}
// cur pattern; pf>0: prefetchw each output row pf positions ahead (once per 16 positions)
void cur(const float*in,float*out,long S,long N,long pf,int rd){
  #pragma omp parallel for schedule(static)
  for(long s=0;s<S;s++){const float*i=in+s*N*KD;float*o=out+s*N*KD;
    for(long t=0;t<(N+7)/8;t++){long n0=t*8<N-8?t*8:N-8;
      if(pf && (t&1)==0 && n0+pf<N){ for(int d=0;d<KD;d++) __builtin_prefetch(o+d*N+n0+pf,1,3);
        if(rd) __builtin_prefetch(i+(n0+pf)*KD,0,3),__builtin_prefetch(i+(n0+pf)*KD+16,0,3); }
      for(int d0=0;d0<KD;d0+=8) tile(i,o,N,n0,d0);}}
}
void cp(const float*a,float*b,long n){
  #pragma omp parallel for schedule(static)
  for(long k=0;k<n;k+=8) _mm256_storeu_ps(b+k,_mm256_loadu_ps(a+k));
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  long S=atol(argv[1]),N=atol(argv[2]); long tot=S*N*KD;
  float*in=aligned_alloc(64,tot*4+64),*out=aligned_alloc(64,tot*4+64),*c2=aligned_alloc(64,tot*4+64);
  for(long k=0;k<tot;k++){in[k]=k;out[k]=-1;c2[k]=0;}
  #define R 30
  #define K 6
  long pfs[K]={0,0,16,32,64,128};
  double t[K][R]; 
  for(int r=0;r<R;r++){double a;
    a=now();cp(in,c2,tot);t[0][r]=now()-a;
    for(int k=1;k<K;k++){a=now();cur(in,out,S,N,pfs[k],0);t[k][r]=now()-a;}
  }
  for(int k=0;k<K;k++){qsort(t[k],R,sizeof(double),cmpd);} 
  printf("S=%ld N=%ld %.1f MB/side: copy %.0f us | ",S,N,tot*4/1e6,t[0][R/2]); for(int k=1;k<K;k++) printf("pf%ld x%.2f | ",pfs[k],t[k][R/2]/t[0][R/2]); puts("");
}
