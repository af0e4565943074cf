/* The CPU's FP32 FMA peak, measured and checked against the machine's theoretical one.
 *
 * Build and run (no -m flags: each kernel carries its own target attribute and the program picks the
 * widest one this CPU runs, AVX-512 or AVX2 + FMA, with __builtin_cpu_supports at run time):
 *   gcc -O2 -fopenmp examples/benchmarks/fma_peak.c -o /tmp/fma_peak && OMP_NUM_THREADS=2 /tmp/fma_peak
 * It runs 1 thread, then OMP_NUM_THREADS threads (default: all), and prints for each
 *   - GFLOP/s per thread and in total (best of 5 runs) of 12 independent FMA chains a thread: more than
 *     FMA latency x FMA units (4 x 2 on Zen 3/4/5), so the pipes never wait on a result;
 *   - the clock measured while the same threads run a chain of dependent integer adds (1 a cycle): the
 *     cycles each thread effectively got, lower than the real clock when other work shares its core;
 *   - FLOP per cycle per thread = GFLOP/s per thread / GHz, and the theoretical peak =
 *     threads x FMA FLOP/cycle/core x GHz, with the FLOP/cycle/core of the CPU family (AMD Zen 3 and
 *     Zen 4: 2 x 256-bit FMA units = 32; Zen 5: 2 x 512-bit = 64) or, for a CPU not in the table, the
 *     vector width's 2-unit figure, marked as assumed.
 * Its last line is machine-readable: "RESULT threads=T gflops=G per_thread=P ghz=F theoretical=X isa=I".
 * It is the ceiling for the GEMM templates' GFLOP/s on the same machine (examples/benchmarks/gemm_peak.py). */
#include <cpuid.h>
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAINS 12

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
  __m512 a[CHAINS];
  __m512 b = _mm512_set1_ps(1.0000001f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  __m512 s = a[0];
  for (int i = 1; i < CHAINS; i++) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
  __m256 a[CHAINS]; /* 12 accumulators + 2 operands of the 16 ymm registers */
  __m256 b = _mm256_set1_ps(1.0000001f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < CHAINS; i++) a[i] = _mm256_set1_ps((float)i);
  for (long it = 0; it < iters; it++) {
#pragma GCC unroll 12
    for (int i = 0; i < CHAINS; i++) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  __m256 s = a[0];
  for (int i = 1; i < CHAINS; i++) s = _mm256_add_ps(s, a[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[1] + out[2] + out[3] + out[4] + out[5] + out[6] + out[7];
}

/* 8 dependent 1-cycle adds an iteration: 8 cycles an iteration (the loop counter runs beside it). */
static long add_chain(long iters) {
  long x = 0;
  for (long it = 0; it < iters; it++)
    __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                     "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                     : "+r"(x));
  return x;
}

/* FMA FLOP per cycle per core of the CPU family, or 0 if it is not in the table. */
static int family_flop_per_cycle(const char **name) {
  unsigned eax, ebx, ecx, edx;
  char vendor[13] = {0};
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return 0;
  memcpy(vendor, &ebx, 4); memcpy(vendor + 4, &edx, 4); memcpy(vendor + 8, &ecx, 4);
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  unsigned family = (eax >> 8) & 0xf, model = (eax >> 4) & 0xf;
  if (family == 0xf) family += (eax >> 20) & 0xff;
  model |= ((eax >> 16) & 0xf) << 4;
  if (strcmp(vendor, "AuthenticAMD") != 0) return 0;
  if (family == 0x19 && (model <= 0x0f || (model >= 0x20 && model <= 0x5f))) { *name = "AMD Zen 3 (2 x 256-bit FMA)"; return 32; }
  if (family == 0x19) { *name = "AMD Zen 4 (AVX-512 on 2 x 256-bit FMA)"; return 32; }
  if (family == 0x1a) { *name = "AMD Zen 5 (2 x 512-bit FMA)"; return 64; }
  return 0;
}

int main(void) {
  const int avx512 = __builtin_cpu_supports("avx512f");
  const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) { fprintf(stderr, "this CPU has neither AVX-512 nor AVX2 + FMA\n"); return 1; }
  const int lanes = avx512 ? 16 : 8;
  const char *isa = avx512 ? "avx512" : "avx2";
  const long iters = avx512 ? 100000000L : 200000000L;
  const char *family = NULL;
  int flop_cycle_core = family_flop_per_cycle(&family);
  int assumed = 0;
  if (!flop_cycle_core) { flop_cycle_core = 2 * lanes * 2; family = "not in the table"; assumed = 1; }
  const int max_threads = omp_get_max_threads();
  printf("FP32 FMA peak: %s kernels (%d lanes, %d independent chains a thread); CPU family: %s, "
         "%d FMA FLOP/cycle/core%s\n", isa, lanes, CHAINS, family, flop_cycle_core,
         assumed ? " (assumed: 2 FMA units of the vector width)" : "");
  int counts[2] = {1, max_threads};
  for (int t = 0; t < (max_threads > 1 ? 2 : 1); t++) {
    const int threads = counts[t];
    omp_set_num_threads(threads);
    double best = 0, ghz = 0;
    float sink = 0;
    for (int rep = 0; rep < 5; rep++) {
      const long chain_iters = 100000000L;
      double t0 = omp_get_wtime();
      long xs = 0;
#pragma omp parallel reduction(+ : xs)
      xs += add_chain(chain_iters);
      double tc = omp_get_wtime() - t0;
      double g = 8.0 * chain_iters / tc * 1e-9 + 0.0 * (double)xs;
      if (g > ghz) ghz = g;
      t0 = omp_get_wtime();
#pragma omp parallel reduction(+ : sink)
      sink += avx512 ? fma_avx512(iters) : fma_avx2(iters);
      double tf = omp_get_wtime() - t0;
      double gflops = 2.0 * lanes * CHAINS * (double)iters * threads / tf * 1e-9;
      if (gflops > best) best = gflops;
    }
    double per_thread = best / threads, theoretical = threads * flop_cycle_core * ghz;
    printf("%d thread%s: %.1f GFLOP/s (%.1f a thread), clock %.2f GHz (effective), %.1f FLOP/cycle/thread; "
           "theoretical %d x %d x %.2f = %.1f GFLOP/s; measured/theoretical %.3f (sink %g)\n",
           threads, threads > 1 ? "s" : "", best, per_thread, ghz, per_thread / ghz, threads, flop_cycle_core, ghz,
           theoretical, best / theoretical, sink);
    if (t == (max_threads > 1 ? 1 : 0))
      printf("RESULT threads=%d gflops=%.1f per_thread=%.1f ghz=%.3f theoretical=%.1f isa=%s\n", threads, best,
             per_thread, ghz, theoretical, isa);
  }
  return 0;
}
