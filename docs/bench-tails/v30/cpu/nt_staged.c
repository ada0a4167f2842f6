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
static inline void tile(const float*in,float*out,long N,long n0,int d0){
  __m256 r[8]; for(int i=0;i<8;i++) r[i]=_mm256_loadu_ps(in+(n0+i)*KD+d0);
  tr8(r); for(int i=0;i<8;i++) _mm256_storeu_ps(out+(d0+i)*N+n0,r[i]);
}
void cur(const float*in,float*out,long S,long N){
  #pragma omp parallel for schedule(static)
  for(long s=0;s<S;s++){const float*i=in+s*N*KD;float*o=out+s*N*KD;
    for(long t=0;t<(N+7)/8;t++){long n0=t*8<N-8?t*8:N-8; for(int d0=0;d0<KD;d0+=8) tile(i,o,N,n0,d0);}}
}
#define P 64
#define W (P+16)
// staged + NT full lines
void stg(const float*in,float*out,long S,long N,int nt){
  #pragma omp parallel for schedule(static)
  for(long s=0;s<S;s++){const float*i=in+s*N*KD;float*o=out+s*N*KD;
    float buf[KD][W] __attribute__((aligned(64)));
    long head[KD];
    for(int d=0;d<KD;d++){ uintptr_t a=((uintptr_t)(o+d*N)>>2)&15; head[d]=(16-a)&15; if(head[d]>N) head[d]=N;
      for(long n=0;n<head[d];n++) o[d*N+n]=i[n*KD+d]; }
    for(long k0=0;k0<N;k0+=P){
      long cnt=N-k0<W?N-k0:W; // positions staged
      long full=cnt&~7L;
      for(long n=0;n<full;n+=8) for(int d0=0;d0<KD;d0+=8){
        __m256 r[8]; for(int q=0;q<8;q++) r[q]=_mm256_loadu_ps(i+(k0+n+q)*KD+d0);
        tr8(r); for(int q=0;q<8;q++) _mm256_store_ps(&buf[d0+q][n],r[q]); }
      for(long n=full;n<cnt;n++) for(int d=0;d<KD;d++) buf[d][n]=i[(k0+n)*KD+d];
      for(int d=0;d<KD;d++){
        float*row=o+d*N;
        for(long n=k0+head[d]; n<k0+head[d]+P && n+16<=N; n+=16){
          const float*src=&buf[d][n-k0];
          __m256 a=_mm256_loadu_ps(src),b=_mm256_loadu_ps(src+8);
          if(nt){_mm256_stream_ps(row+n,a);_mm256_stream_ps(row+n+8,b);} else {_mm256_storeu_ps(row+n,a);_mm256_storeu_ps(row+n+8,b);}
        }
      }
    }
    for(int d=0;d<KD;d++){ long full_end=head[d]+((N-head[d])&~15L); for(long n=full_end;n<N;n++) o[d*N+n]=i[n*KD+d]; }
  }
  _mm_sfence();
}
void cp(const float*a,float*b,long n){
  #pragma omp parallel for schedule(static)
  for(long k=0;k<n;k+=8) _mm256_storeu_ps(b+k,_mm256_loadu_ps(a+k));
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  long S=atol(argv[1]),N=atol(argv[2]); long tot=S*N*KD;
  float*in=aligned_alloc(64,tot*4+64),*out=aligned_alloc(64,tot*4+64),*ref=aligned_alloc(64,tot*4+64),*c2=aligned_alloc(64,tot*4+64);
  for(long k=0;k<tot;k++){in[k]=k;out[k]=-1;c2[k]=0;}
  for(long s=0;s<S;s++)for(long n=0;n<N;n++)for(int d=0;d<KD;d++) ref[s*N*KD+d*N+n]=in[s*N*KD+n*KD+d];
  stg(in,out,S,N,1); if(memcmp(out,ref,tot*4)) puts("stg WRONG");
  #define R 30
  #define K 4
  double t[K][R]; const char*nm[K]={"copy","cur","stg reg","stg nt"};
  for(int r=0;r<R;r++){double a;
    a=now();cp(in,c2,tot);t[0][r]=now()-a;
    a=now();cur(in,out,S,N);t[1][r]=now()-a;
    a=now();stg(in,out,S,N,0);t[2][r]=now()-a;
    a=now();stg(in,out,S,N,1);t[3][r]=now()-a;
  }
  for(int k=0;k<K;k++){qsort(t[k],R,sizeof(double),cmpd);} 
  printf("S=%ld N=%ld %.1f MB/side: ",S,N,tot*4/1e6); for(int k=0;k<K;k++) printf("%s %.0f us x%.2f | ",nm[k],t[k][R/2],t[k][R/2]/t[0][R/2]); puts("");
}
