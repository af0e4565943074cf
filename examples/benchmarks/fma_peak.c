/* The CPU's FP32 FMA peak: 12 independent AVX-512 FMA chains a thread, best of 5 runs.
 * Build and run: gcc -O2 -mavx512f -fopenmp examples/benchmarks/fma_peak.c -o /tmp/fma_peak && OMP_NUM_THREADS=2 /tmp/fma_peak
 * It is the ceiling for the GEMM template's GFLOP/s on the same machine (README, "Known gaps"). */
#include <immintrin.h>
#include <stdio.h>
#include <omp.h>
int main(){
  const long iters=400000000L/4;
  double best=0;
  for(int rep=0;rep<5;rep++){
    double t0=omp_get_wtime(); float sink=0;
    #pragma omp parallel reduction(+:sink)
    {
      __m512 a[12]; __m512 b=_mm512_set1_ps(1.0000001f), c=_mm512_set1_ps(1e-7f);
      for(int i=0;i<12;i++) a[i]=_mm512_set1_ps((float)i);
      for(long it=0;it<iters;it++){
        #pragma GCC unroll 12
        for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],b,c);
      }
      __m512 s=a[0]; for(int i=1;i<12;i++) s=_mm512_add_ps(s,a[i]);
      sink+=_mm512_reduce_add_ps(s);
    }
    double t=omp_get_wtime()-t0;
    double flops=2.0*16*12*(double)iters*omp_get_max_threads();
    if(flops/t/1e9>best) best=flops/t/1e9;
    printf("rep %d: %.1f GFLOP/s (sink %g)\n",rep,flops/t/1e9,sink);
  }
  printf("best %.1f GFLOP/s with %d threads\n",best,omp_get_max_threads());
}
