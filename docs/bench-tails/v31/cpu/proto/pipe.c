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
static inline void ftile(const float*i,float*o,long N,long n0){
    for(int d0=0;d0<KD;d0+=8){__m256 r[8]; for(int q=0;q<8;q++) r[q]=_mm256_loadu_ps(i+(n0+q)*KD+d0);
      tr8(r); for(int q=0;q<8;q++) _mm256_storeu_ps(o+(d0+q)*N+n0,r[q]);}}
static inline void btile(const float*g,float*o,long N,long n0){
    for(int d0=0;d0<KD;d0+=8){__m256 r[8]; for(int q=0;q<8;q++) r[q]=_mm256_loadu_ps(g+(d0+q)*N+n0);
      tr8(r); for(int q=0;q<8;q++) _mm256_storeu_ps(o+(n0+q)*KD+d0,r[q]);}}
#define PF(p,w,l) do{ if(w) __builtin_prefetch(p,1,l); else __builtin_prefetch(p,0,l);}while(0)
/* mode: 0 none, 1 upfront t0, 2 upfront t1(loc2), 3 pipelined next slice t0, 4 pipelined loc2, 5 pipelined + upfront first, 6 pipelined in+out both */
void run(int fwd,int mode,const float*in,float*out,long S,long N){
  long sl=N*KD;
  #pragma omp parallel for schedule(static)
  for(long s=0;s<S;s++){const float*i=in+s*sl;float*o=out+s*sl;
    const float* merged = fwd? o : i; const float* half = fwd? i : o;
    if(mode==1) for(long k=0;k<sl;k+=16) PF(merged+k,fwd,3);
    if(mode==2) for(long k=0;k<sl;k+=16) PF(merged+k,fwd,2);
    long nt=(N+7)/8;
    for(long t=0;t<nt;t++){ long n0=t*8<N-8?t*8:N-8;
      if(mode>=3 && s+1<S){ const float* nx=merged+sl+n0*KD; 
        for(int j=0;j<16;j++){ if(mode==4) PF(nx+j*16,fwd,2); else PF(nx+j*16,fwd,3);} 
        if(mode==6){const float* hx=half+sl+n0*KD; for(int j=0;j<16;j++) PF(hx+j*16,!fwd,3);} }
      if(fwd) ftile(i,o,N,n0); else btile(i,o,N,n0);}
  }
}
void cp(const float*a,float*b,long n){
  #pragma omp parallel for schedule(static)
  for(long k=0;k<n;k+=16){_mm256_storeu_ps(b+k,_mm256_loadu_ps(a+k));_mm256_storeu_ps(b+k+8,_mm256_loadu_ps(a+k+8));}
}
int cmpd(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  long S=atol(argv[1]),N=atol(argv[2]); long tot=S*N*KD;
  float*in=aligned_alloc(64,tot*4+64),*out=aligned_alloc(64,tot*4+64),*c2=aligned_alloc(64,tot*4+64),*ref=aligned_alloc(64,tot*4+64),*refb=aligned_alloc(64,tot*4+64);
  for(long k=0;k<tot;k++){in[k]=k;out[k]=-1;c2[k]=0;}
  for(long s=0;s<S;s++)for(long n=0;n<N;n++)for(int d=0;d<KD;d++){ref[s*N*KD+d*N+n]=in[s*N*KD+n*KD+d]; refb[s*N*KD+n*KD+d]=in[s*N*KD+d*N+n];}
  int M=7;
  for(int f=0;f<2;f++) for(int c=0;c<M;c++){memset(out,0xff,tot*4); run(f,c,in,out,S,N); if(memcmp(out,f?ref:refb,tot*4)) printf("WRONG f%d m%d\n",f,c);}
  #define R 21
  double rt[14][R];
  for(int r=0;r<R;r++){double a,c; a=now();cp(in,c2,tot);c=now()-a;
    for(int f=0;f<2;f++) for(int m=0;m<M;m++){a=now();run(f,m,in,out,S,N);rt[f*M+m][r]=(now()-a)/c;}}
  for(int k=0;k<14;k++) qsort(rt[k],R,sizeof(double),cmpd);
  printf("S=%ld N=%ld %.2f MB/side |",S,N,tot*4/1e6);
  for(int f=1;f>=0;f--){printf(" %s:",f?"fwd":"bwd"); for(int m=0;m<M;m++) printf(" %.2f",rt[f*M+m][R/2]);} puts("");
}
