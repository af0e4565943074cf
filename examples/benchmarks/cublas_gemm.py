"""cuBLAS SGEMM 1024^3 through torch on a CUDA GPU: FP32 (TF32 off) and TF32, CUDA-event timed (README, "On a GPU")."""
import torch
torch.manual_seed(0)
a = torch.rand(1024, 1024, device="cuda") * 2 - 1
b = torch.rand(1024, 1024, device="cuda") * 2 - 1
for tf32 in (False, True):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    for _ in range(20):
        a @ b
    times = []
    for rep in range(7):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(100):
            a @ b
        e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 100 / 1e3)
    times.sort()
    flops = 2 * 1024**3
    print(f"torch {torch.__version__} cuBLAS {'TF32' if tf32 else 'FP32'}: best {flops/times[0]/1e9:.0f} GFLOP/s "
          f"({times[0]*1e6:.1f} us), median {flops/times[3]/1e9:.0f} GFLOP/s ({times[3]*1e6:.1f} us)")
