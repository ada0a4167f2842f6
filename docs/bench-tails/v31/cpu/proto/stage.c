#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
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
/* forward slice: in [N][KD] -> out [KD][N], tiles 8x8, last tile overlapping */
static inline void fwd_slice(const float*i,float*o,long N){
  for(long t=0;t<(N+7)/8;t++){long n0=t*8<N-8?t*8:N-8;
    for(int d0=0;d0<KD;d0+=8){__m256 r[8]; for(int q=0;q<8;q++) r[q]=_mm256_loadu_ps(i+(n0+q)*KD+d0);
      tr8(r); for(int q=0;q<8;q++) _mm256_storeu_ps(o+(d0+q)*N+n0,r[q]);}}
}
static inline void bwd_slice(const float*g,float*o,long N){ /* g [KD][N] -> o [N][KD] */
  for(long t=0;t<(N+7)/8;t++){long n0=t*8<N-8?t*8:N-8;
    for(int d0=0;d0<KD;d0+=8){__m256 r[8]; for(int q=0;q<8;q++) r[q]=_mm256_loadu_ps(g+(d0+q)*N+n0);
      tr8(r); for(int q=0;q<8;q++) _mm256_storeu_ps(o+(n0+q)*KD+d0,r[q]);}}
}
static inline void ntcopy(const float*a,float*b,long n){ /* b 64B aligned, n multiple of 8 assumed + tail */
  long k=0; for(;k+16<=n;k+=16){_mm256_stream_ps(b+k,_mm256_loadu_ps(a+k));_mm256_stream_ps(b+k+8,_mm256_loadu_ps(a+k+8));}
  for(;k<n;k++) b[k]=a[k];
}
static inline void touch(const float*a,long n,float*sink){ __m256 s=_mm256_setzero_ps(); for(long k=0;k<n;k+=16) s=_mm256_add_ps(s,_mm256_loadu_ps(a+k)); *sink+=s[0];}
float SINK;
void run(int variant,const float*in,float*out,long S,long N){
  long sl=N*KD;
  #pragma omp parallel
  { float*buf=aligned_alloc(64,sl*4+64);
    #pragma omp for schedule(static)
    for(long s=0;s<S;s++){const float*i=in+s*sl;float*o=out+s*sl;
      switch(variant){
      case 0: fwd_slice(i,o,N);break;
      case 1: fwd_slice(i,buf,N); memcpy(o,buf,sl*4); break;
      case 2: fwd_slice(i,buf,N); ntcopy(buf,o,sl); break;
      case 3: bwd_slice(i,o,N);break;
      case 4: memcpy(buf,i,sl*4); bwd_slice(buf,o,N); break;
      case 5: bwd_slice(i,buf,N); ntcopy(buf,o,sl); break;
      case 6: memcpy(buf,i,sl*4); bwd_slice(buf,buf+0,N); break; /* invalid, skip */
      case 7: {float z; touch(i,sl,&z); SINK+=z; bwd_slice(i,o,N);} break;
      case 8: {float z; touch(i,sl,&z); SINK+=z; bwd_slice(i,buf,N); ntcopy(buf,o,sl);} break;
      }}
    free(buf);}
  _mm_sfence();
}
void cp(const float*a,float*b,long n,int mode){
  if(mode==2){ /* memcpy split over threads */
    #pragma omp parallel
    { int t=omp_get_thread_num(),T=omp_get_num_threads(); long c=(n/T+15)&~15L; long s=t*c,e=s+c<n?s+c:n; if(s<e) memcpy(b+s,a+s,(e-s)*4);} return;}
  #pragma omp parallel for schedule(static)
  for(long k=0;k<n;k+=16){ if(mode) {_mm256_stream_ps(b+k,_mm256_loadu_ps(a+k));_mm256_stream_ps(b+k+8,_mm256_loadu_ps(a+k+8));} else {_mm256_storeu_ps(b+k,_mm256_loadu_ps(a+k));_mm256_storeu_ps(b+k+8,_mm256_loadu_ps(a+k+8));}}
  _mm_sfence();
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  long S=atol(argv[1]),N=atol(argv[2]); long tot=S*N*KD;
  float*in=aligned_alloc(64,tot*4+64),*out=aligned_alloc(64,tot*4+64),*c2=aligned_alloc(64,tot*4+64),*ref=aligned_alloc(64,tot*4+64),*refb=aligned_alloc(64,tot*4+64);
  for(long k=0;k<tot;k++){in[k]=k;out[k]=-1;c2[k]=0;}
  for(long s=0;s<S;s++)for(long n=0;n<N;n++)for(int d=0;d<KD;d++){ref[s*N*KD+d*N+n]=in[s*N*KD+n*KD+d]; refb[s*N*KD+n*KD+d]=in[s*N*KD+d*N+n];}
  int vs[]={0,1,2,3,4,5,7,8}; const char*nm[]={"fwd cur","fwd stage+memcpy","fwd stage+nt","bwd cur","bwd prefetch-copy","bwd stage+nt","bwd touch","bwd touch+stage+nt"};
  for(int k=0;k<8;k++){memset(out,0xff,tot*4); run(vs[k],in,out,S,N); if(memcmp(out,vs[k]<3?ref:refb,tot*4)) printf("%s WRONG\n",nm[k]);}
  #define R 25
  double t[11][R];
  for(int r=0;r<R;r++){double a;
    a=now();cp(in,c2,tot,0);t[0][r]=now()-a;
    a=now();cp(in,c2,tot,1);t[1][r]=now()-a;
    a=now();cp(in,c2,tot,2);t[2][r]=now()-a;
    for(int k=0;k<8;k++){a=now();run(vs[k],in,out,S,N);t[3+k][r]=now()-a;}
  }
  for(int k=0;k<11;k++) qsort(t[k],R,sizeof(double),cmpd);
  const char*cn[]={"copy reg","copy nt","memcpy"};
  printf("S=%ld N=%ld %.1f MB/side\n",S,N,tot*4/1e6);
  for(int k=0;k<11;k++) printf("  %-22s %7.0f us  x%.2f (vs memcpy)\n",k<3?cn[k]:nm[k-3],t[k][R/2],t[k][R/2]/t[2][R/2]);
}
