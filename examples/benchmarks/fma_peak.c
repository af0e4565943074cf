/* The CPU's FP32 FMA peak, measured, and the time of one step of dependent FMAs of the same width.
 *
 * Build and run (no -m flags: each kernel carries its own target attribute and the program picks the
 * widest one this CPU runs, AVX-512 or AVX2 + FMA, with __builtin_cpu_supports at run time):
 *   gcc -O2 -fopenmp examples/benchmarks/fma_peak.c -o /tmp/fma_peak && OMP_NUM_THREADS=2 /tmp/fma_peak
 * It runs 1 thread, then OMP_NUM_THREADS threads (default: all), and prints for each (best of 5 runs)
 *   - GFLOP/s per thread and in total of 12 independent FMA chains a thread: more than FMA latency x FMA
 *     units (4 x 2 on the x86 CPUs of this project), so the pipes never wait on a result;
 *   - the time of one step of 4 chains of dependent FMAs of the same vector width, run by the same threads:
 *     as long as 4 <= latency x FMA units, a step takes exactly the FMA latency in cycles, so the clock the
 *     threads effectively got while running FMAs of that width is latency / step time. The latency is a
 *     fact of the CPU generation, not measured here: examples/benchmarks/gemm_peak.py takes it from
 *     schedule_gym.hardware. (A clock timed with scalar code is wrong for the FMA peak: AVX-512 code may
 *     run at a lower clock, and a CPU may execute chains of scalar adds faster than one a cycle.) Where the
 *     clock falls further with FMA density than between one FMA a cycle and the peak's, the clock is an
 *     upper bound.
 * Its last line is machine-readable: "RESULT threads=T gflops=G per_thread=P step_ns=S isa=I lanes=L".
 * It is the ceiling for the GEMM templates' GFLOP/s on the same machine (examples/benchmarks/gemm_peak.py). */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>

#define CHAINS 12
#define DEPENDENT 4

__attribute__((target("avx512f"))) static float fma_avx512(long iters, int chains) {
  __m512 a[CHAINS];
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
  if (chains == DEPENDENT) {
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 4
      for (int i = 0; i < DEPENDENT; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
  } else {
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
      for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
    }
  }
  __m512 s = a[0];
  for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters, int chains) {
  __m256 a[CHAINS]; /* 12 accumulators + 2 operands of the 16 ymm registers */
  __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
  if (chains == DEPENDENT) {
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 4
      for (int i = 0; i < DEPENDENT; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
  } else {
    for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
      for (int i = 0; i < CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
    }
  }
  __m256 s = a[0];
  for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

int main(void) {
  const int avx512 = __builtin_cpu_supports("avx512f");
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) { fprintf(stderr, "this CPU has neither AVX-512 nor AVX2 + FMA\n"); return 1; }
  const int lanes = avx512 ? 16 : 8;
  const char *isa = avx512 ? "avx512" : "avx2";
  const long iters = avx512 ? 100000000L : 200000000L, step_iters = 50000000L;
  const int max_threads = omp_get_max_threads();
  printf("FP32 FMA peak: %s kernels (%d lanes, %d independent chains a thread); clock steps: %d chains of "
         "dependent %d-bit FMAs\n", isa, lanes, CHAINS, DEPENDENT, lanes * 32);
  int counts[2] = {1, max_threads};
  for (int t = 0; t < (max_threads > 1 ? 2 : 1); t++) {
    const int threads = counts[t];
    omp_set_num_threads(threads);
    double best = 0, step_ns = 0;
    float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
      double t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
      sink += avx512 ? fma_avx512(step_iters, DEPENDENT) : fma_avx2(step_iters, DEPENDENT);
      double ns = (omp_get_wtime() - t0) / step_iters * 1e9;
      if (rep == 0 || ns < step_ns) step_ns = ns;
      t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
      sink += avx512 ? fma_avx512(iters, CHAINS) : fma_avx2(iters, CHAINS);
      double tf = omp_get_wtime() - t0;
      double gflops = 2.0 * lanes * CHAINS * (double)iters * threads / tf * 1e-9;
      if (gflops > best) best = gflops;
    }
    printf("%d thread%s: %.1f GFLOP/s (%.1f a thread); a step of dependent FMAs %.3f ns (sink %g)\n", threads,
           threads > 1 ? "s" : "", best, best / threads, step_ns, sink);
    if (t == (max_threads > 1 ? 1 : 0))
      printf("RESULT threads=%d gflops=%.1f per_thread=%.1f step_ns=%.4f isa=%s lanes=%d\n", threads, best,
             best / threads, step_ns, isa, lanes);
  }
  return 0;
}
