"""The CUDA kernels (cuda/, libzipccl_cuda.so) against the Go codec, bit for bit.

* the golden vectors of tests/cuda_emu (written by the Go codec: frames,
  split parts, decode+reduce outputs) on the real kernels, the same vectors
  the CPU emulation runs;
* GPU encode -> Go decode (zipccl.codec.decompress) and Go encode
  (zipccl.codec.compress) -> GPU decode, on fresh random tensors of every
  coded dtype, including multi-block tensors and the chunk-per-destination
  layout;
* fused decode+reduce against torch's float32 sum in rank order;
* corrupted frames are rejected;
* the c10d backend on CUDA tensors (the GPU path of torchext/cuda_path.cpp):
  every kind of op bit for bit against torch's NCCL backend (two GPUs),
  its stream semantics (one GPU); the coded path (GPU coding, zipccl's own
  transport), the host-staged path, and a job mixing the two, against the
  CPU path (one GPU shared by two ranks).

The kernel tests need a CUDA GPU and a built libzipccl_cuda.so (``make
cuda``); the backend tests need GPUs (and NCCL for the NCCL path) but not
the kernel library. Without them they skip with the reason. ``make
test-gpu`` runs them.

With ZIPCCL_CUDA_EMU_LIB pointing at the CPU emulation of the same C API
(build/cuda_emu/libzipccl_cuda_emu.so; ``make test-cuda-emu`` does this)
and no GPU, the kernel tests run on the emulator instead, on smaller sizes:
that checks this file and the ctypes layer (zipccl.bench.kernels) without
a GPU.
"""

from __future__ import annotations

import datetime
import os
import struct
import tempfile
import time

import pytest
import torch
import torch.distributed as dist

from harness import spawn
from refs import check_exact, generator, guard, no_failures

pytestmark = pytest.mark.gpu

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "cuda_emu", "golden", "golden.bin")


EMU_LIB = os.environ.get("ZIPCCL_CUDA_EMU_LIB")
EMULATED = not torch.cuda.is_available() and bool(EMU_LIB)


def _skip_reason() -> str | None:
    if EMULATED:
        return None if os.path.exists(EMU_LIB or "") else f"ZIPCCL_CUDA_EMU_LIB={EMU_LIB} does not exist"
    if not torch.cuda.is_available():
        return "no GPU: torch.cuda.is_available() is False"
    from zipccl.bench.kernels import find_library

    if find_library() is None:
        return "libzipccl_cuda.so not built (make cuda) and ZIPCCL_CUDA_LIB not set"
    return None


@pytest.fixture(scope="module")
def k():
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    from zipccl.bench.kernels import KernelLib

    lib = KernelLib(EMU_LIB, emulated=True) if EMULATED else KernelLib()
    if lib.lib.zccl_device_count() < 1:
        pytest.skip("no GPU: libzipccl_cuda.so sees no CUDA device")
    yield lib
    lib.close()


# ---------------------------------------------------------------- golden vectors

def _load_golden() -> dict[str, bytes]:
    with open(GOLDEN, "rb") as f:
        data = f.read()
    assert data[:8] == b"ZCGOLD1\n"
    out, p = {}, 8
    while p < len(data):
        (nl,) = struct.unpack_from("<H", data, p)
        p += 2
        name = data[p:p + nl].decode()
        p += nl
        (ln,) = struct.unpack_from("<Q", data, p)
        p += 8
        out[name] = data[p:p + ln]
        p += ln
    return out


def _meta(b: bytes) -> dict[str, str]:
    return dict(kv.split("=", 1) for kv in b.decode().split())


_LAYOUT = {3: (2, 7, 8), 1: (4, 23, 8), 4: (2, 10, 5), 12: (1, 2, 5), 11: (1, 3, 4)}
_TORCH = {3: torch.bfloat16, 1: torch.float32, 4: torch.float16, 12: torch.float8_e5m2, 11: torch.float8_e4m3fn}
_M64 = (1 << 64) - 1


def _generate(dtype: int, spec: str, n: int, seed: int) -> bytes:
    """The Python twin of cudaGenerate (backend/codec/cuda_golden_test.go)."""
    size, shift, bits = _LAYOUT[dtype]
    maxf = (1 << bits) - 1
    mant_mask = (1 << shift) - 1
    sign_bit = shift + bits
    name, _, arg = spec.partition(":")
    center = int(arg) if arg else 0
    s = seed

    def nxt() -> int:
        nonlocal s
        s = (s + 0x9E3779B97F4A7C15) & _M64
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
        return z ^ (z >> 31)

    clamp = lambda f: 0 if f < 0 else (maxf if f > maxf else f)  # noqa: E731
    const = nxt()
    out = bytearray(n * size)
    for i in range(n):
        x = nxt()
        sign, mant, field = x & 1, (x >> 32) & mant_mask, 0
        if name in ("gauss", "sparse", "special"):
            field = clamp(center + (x >> 8) % 3 + (x >> 16) % 3 + (x >> 24) % 3 + (x >> 28) % 3 - 4)
        elif name == "wide":
            field = clamp(center + (x >> 8) % 7 + (x >> 16) % 7 + (x >> 24) % 7 - 9)
        elif name == "tight":
            field = clamp(center + (x >> 8) % 4 + (x >> 16) % 4 - 3)
        v = sign << sign_bit | field << shift | mant
        if name == "sparse" and (x >> 40) % 10 < 3:
            v = sign << sign_bit
        elif name == "special" and (x >> 40) % 100 < 4:
            kind = (x >> 48) % 6
            v = [sign << sign_bit,
                 sign << sign_bit | maxf << shift,
                 sign << sign_bit | maxf << shift | (mant | 1),
                 sign << sign_bit | mant,
                 sign << sign_bit | ((x >> 56) & maxf) << shift | mant,
                 sign << sign_bit | (maxf - 1) << shift | mant][kind]
        elif name == "random":
            v = x
        elif name == "const":
            v = const
        out[i * size:(i + 1) * size] = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    return bytes(out)


def _tensor(raw: bytes, dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


@pytest.fixture(scope="module")
def golden():
    return _load_golden()


def test_golden_codec_cases(k, golden):
    from zipccl.bench.kernels import DTYPE_CODES

    cases = [n[:-5] for n in golden if n.endswith("/meta") and _meta(golden[n])["op"] == "codec"]
    assert cases
    for name in cases:
        m = _meta(golden[name + "/meta"])
        dt = int(m["dtype"])
        counts = [int(c) for c in m["counts"].split(",")]
        raw = _generate(dt, m["dist"], sum(counts), int(m["seed"]))
        t = _tensor(raw, _TORCH[dt]).to(k.dev)
        assert DTYPE_CODES[t.dtype] == dt
        frames = [golden[f"{name}/frame/{i}"] for i in range(len(counts))]
        got = k.encode(t, counts)
        for i, (g, w) in enumerate(zip(got, frames)):
            assert g == w, f"{name}: GPU frame {i} differs from the Go frame"
        dec = k.decode(frames, counts, t.dtype)
        assert _bits(dec) == raw, f"{name}: GPU decode of the Go frames differs from the input"
        if len(counts) == 1:
            st, dyn = k.encode_split(t)
            if f"{name}/static/0" in golden:
                want_st, want_dyn = golden[f"{name}/static/0"], golden[f"{name}/dynamic/0"]
            else:
                sl = k.lib.zccl_zip3_static_len(dt, counts[0])
                want_st, want_dyn = frames[0][32:32 + sl], frames[0][32 + sl:]
            assert st == want_st and dyn == want_dyn, f"{name}: split parts differ"


def test_golden_reduce_cases(k, golden):
    cases = [n[:-5] for n in golden if n.endswith("/meta") and _meta(golden[n])["op"] == "reduce"]
    assert cases
    for name in cases:
        m = _meta(golden[name + "/meta"])
        dt, op, n, seed = int(m["dtype"]), int(m["rop"]), int(m["n"]), int(m["seed"])
        dists = m["dists"].split(",")
        frames = [golden[f"{name}/frame/{r}"] for r in range(len(dists))]
        got = k.decode_reduce(frames, n, _TORCH[dt], op=op)
        assert _bits(got) == golden[name + "/out"], f"{name}: decode+reduce differs from Go's fold"
        mid = (len(dists) - 1) // 2
        plain = _tensor(_generate(dt, dists[mid], n, seed + mid * 1000), _TORCH[dt]).to(k.dev)
        got = k.decode_reduce(frames, n, _TORCH[dt], op=op, plain={mid: plain})
        assert _bits(got) == golden[name + "/out"], f"{name}: with a plain source"


# ---------------------------------------------------------------- against zipccl.codec

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2]
SIZES = [1, 33, 1000, 16384, 16385, 70001] + ([] if EMULATED else [(1 << 20) + 3])


def _random(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scale = 1.0 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else 0.02
    return (torch.randn(n, generator=g) * scale).to(dtype)


def _go_frame(t: torch.Tensor) -> bytes:
    import zipccl.codec

    blob = zipccl.codec.compress(t.cpu(), codec="zip3")
    hdr = 12 + 8 * t.dim()  # tensor container header (docs/FORMAT.md 7)
    return blob[hdr:]


def _go_decode(frame: bytes, t: torch.Tensor) -> torch.Tensor:
    import zipccl.codec

    head = b"ZCCT" + bytes([1, {v: k for k, v in _TORCH.items()}[t.dtype], 1, 0]) + struct.pack("<q", t.numel())
    crc = _crc32c(head)
    return zipccl.codec.decompress(head + struct.pack("<I", crc) + frame)


def _crc32c(b: bytes) -> int:
    crc = 0xFFFFFFFF
    for x in b:
        crc ^= x
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_gpu_encode_go_decode(k, dtype):
    for i, n in enumerate(SIZES):
        t = _random(n, dtype, 10 + i)
        frame = k.encode(t.to(k.dev))[0]
        assert frame == _go_frame(t), f"{dtype} n={n}: GPU frame differs from zipccl.codec.compress"
        back = _go_decode(frame, t)
        assert _bits(back) == _bits(t)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
def test_go_encode_gpu_decode(k, dtype):
    for i, n in enumerate(SIZES):
        t = _random(n, dtype, 100 + i)
        got = k.decode([_go_frame(t)], [n], dtype)
        assert _bits(got) == _bits(t), f"{dtype} n={n}"


def test_chunk_per_destination(k):
    counts = [1000, 3, 0, 5001, 16385, 77, 40000]
    t = _random(sum(counts), torch.bfloat16, 7)
    frames = k.encode(t.to(k.dev), counts)
    off = 0
    for c, f in zip(counts, frames):
        assert f == _go_frame(t[off:off + c]), f"chunk of {c}"
        off += c
    assert _bits(k.decode(frames, counts, torch.bfloat16)) == _bits(t)


@pytest.mark.parametrize("nsrc", [1, 2, 4, 8])
def test_decode_reduce_matches_torch(k, nsrc):
    n = 20_003 if EMULATED else 100_003
    srcs = [_random(n, torch.bfloat16, 1000 + r) for r in range(nsrc)]
    frames = [_go_frame(s) for s in srcs]
    got = k.decode_reduce(frames, n, torch.bfloat16)
    acc = srcs[0].float()
    for s in srcs[1:]:
        acc = acc + s.float()
    want = srcs[0] if nsrc == 1 else acc.to(torch.bfloat16)
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize("mode", ["int8", "int4", "fp8"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_quant_kernels_through_the_benchmark_bindings(k, mode, dtype):
    # The lossy kernels as `bench kernels --quant` drives them: a decode
    # within the format's bound, accumulate(first) equal to the float32
    # decode, and three messages folded in order equal to their float32
    # decodes summed in order (the byte-for-byte checks against Go are in
    # cuda/gotest and the emulation's golden cases).
    from zipccl.bench.kernels import quant_accumulate_call, quant_check, quant_decode_call

    n = 5 * 2048 + 77
    ws = k.workspace(k.lib.zccl_quant_workspace_size(n))
    srcs = [_random(n, dtype, 2000 + r).to(k.dev) for r in range(3)]
    msgs = []
    for s in srcs:
        m, bad = quant_check(k, s, mode, ws)
        assert bad is None, bad
        msgs.append(m)
    acc = torch.empty(n, dtype=torch.float32, device=k.dev)
    quant_accumulate_call(k, msgs, acc, ws, sync=True)()
    want = None
    for m in msgs:  # the float32 values of each message: its accumulate alone
        one = torch.empty(n, dtype=torch.float32, device=k.dev)
        quant_accumulate_call(k, [m], one, ws, sync=True)()
        want = one if want is None else want + one
    assert torch.equal(acc.cpu().view(torch.int32), want.cpu().view(torch.int32))
    out = torch.empty(n, dtype=dtype, device=k.dev)
    quant_decode_call(k, msgs[0], out, ws, sync=True)()
    assert not torch.equal(out.cpu(), srcs[0].cpu()), "lossy"


def test_corrupt_frames_rejected(k):
    from zipccl.bench.kernels import ZcclError

    t = _random(40000, torch.bfloat16, 3)
    frame = bytearray(_go_frame(t))
    for pos in (5, 40, 32 + 16 * 3 + 2, len(frame) // 2, len(frame) - 200):
        bad = bytearray(frame)
        bad[pos] ^= 0x10
        with pytest.raises(ZcclError):
            k.decode([bytes(bad)], [t.numel()], torch.bfloat16)


# ---------------------------------------------------------------- the c10d backend on CUDA tensors
#
# zipccl's GPU path (torchext/cuda_path.cpp over backend/gpu): the engine
# plans each CUDA op; the NCCL path enqueues it on a communication stream
# ordered after the caller's current stream, the host-staged path runs it on
# the CPU over pinned copies. The ranks are spawned (harness.spawn) and
# capture their stderr, where the engine warns once per process when it
# stages CUDA tensors: that tells which path ran. Needs, besides a GPU:
#   * the NCCL path: NCCL found by the engine (zipccl.info()["nccl"]) and one
#     GPU per rank (NCCL cannot put two ranks of a communicator on one GPU);
#   * the staged path (ZIPCCL_GPU_PATH=staged): one GPU, shared by the ranks.
# Without them these tests skip with the reason.

STAGED_WARNING = "host-staged slow path"
CODED_LOG = "GPU-coded over zipccl's transport"
# Makes the switcher code every float op the coded path can code (the
# cases' sizes are below the default thresholds), on CUDA and CPU tensors
# alike: lossless, so the reference bits do not change.
# The engine logs the GPU path it takes at INFO.
CODE_ENV = {"ZIPCCL_COMPRESS": "always", "ZIPCCL_TWO_SHOT_MIN": "4096", "ZIPCCL_COMPRESS_MIN": "4096",
            "ZIPCCL_DEBUG": "INFO"}


def _need_gpus(n: int) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no GPU: torch.cuda.is_available() is False")
    if torch.cuda.device_count() < n:
        pytest.skip(
            f"needs {n} GPUs (one per rank: NCCL cannot put two ranks on one GPU), "
            f"found {torch.cuda.device_count()}"
        )


def _gpu_rank(rank: int, ws: int, task: str, need_nccl: bool) -> dict:
    """One rank: stderr to a file (the engine's log), the rank's GPU, a
    zipccl default group; runs _TASKS[task] and returns its failures and
    the log (or why it could not run)."""
    fd, log_path = tempfile.mkstemp(prefix=f"zipccl-gpu-rank{rank}-", suffix=".log")
    os.dup2(fd, 2)
    os.close(fd)
    import zipccl

    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("zipccl", rank=rank, world_size=ws, timeout=datetime.timedelta(seconds=120))
    out: dict = {"failures": []}
    try:
        nccl = zipccl.info()["nccl"]
        if need_nccl and not nccl.get("found"):
            out["skip"] = f"the engine found no NCCL: {nccl}"
        else:
            guard(out["failures"], task, lambda: _TASKS[task](rank, ws, dev, out["failures"]))
        torch.cuda.synchronize()
        dist.destroy_process_group()
    finally:
        with open(log_path, errors="replace") as f:
            out["log"] = f.read()
        os.unlink(log_path)
    return out


def _run_gpu(ws: int, task: str, need_nccl: bool, env: dict | None = None) -> list[str]:
    """Runs task on ws spawned ranks; skips when a rank could not run it,
    fails on any rank's failure; returns the ranks' logs."""
    out = spawn(ws, _gpu_rank, task, need_nccl, env=env, timeout=420)
    skips = sorted({o["skip"] for o in out if o and o.get("skip")})
    if skips:
        pytest.skip("; ".join(skips))
    no_failures([o["failures"] if o else ["died without answering"] for o in out])
    return [o["log"] for o in out]


def _gen(rank: int, salt: str, shape, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Rank rank's input (on the CPU): normal floats, integers in +-1000."""
    g = generator(7, rank, salt)
    if dtype.is_floating_point:
        return torch.randn(tuple(shape), generator=g).to(dtype)
    return torch.randint(-1000, 1000, tuple(shape), generator=g).to(dtype)


def _compare(f: list, what: str, run) -> None:
    """run(a) -> tensors, with a = "zipccl" or "ref"; the two must agree
    bit for bit."""
    got = guard(f, f"{what} (zipccl)", lambda: run("zipccl"))
    want = guard(f, f"{what} (reference)", lambda: run("ref"))
    if got is None or want is None:
        return
    torch.cuda.synchronize()
    if len(got) != len(want):
        f.append(f"{what}: {len(got)} results, reference {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        check_exact(f, f"{what} [{i}]", a.cpu(), b.cpu())


def _collective_cases(rank: int, ws: int, group, place, strided_ref: bool) -> list:
    """(name, run(which)) cases over every kind of op; run builds its
    inputs with place(tensor, which) and calls the op on group(which).
    Non-contiguous tensors go to the reference too when strided_ref
    (torch's NCCL backend refuses some)."""

    n = 100_003
    f32, bf16 = torch.float32, torch.bfloat16
    cases = []

    def all_reduce(dtype, op):
        def run(which):
            t = place(_gen(rank, f"ar/{dtype}/{op}", (n,), dtype), which)
            redop = dist._make_nccl_premul_sum(0.5) if op == "PREMUL_SUM" else getattr(dist.ReduceOp, op)
            dist.all_reduce(t, op=redop, group=group(which))
            return [t]

        return run

    for dtype, op in [(f32, "SUM"), (bf16, "SUM"), (torch.int64, "SUM"), (f32, "AVG"), (f32, "PREMUL_SUM"), (torch.float16, "MAX")]:
        cases.append((f"all_reduce {dtype} {op}", all_reduce(dtype, op)))

    def strided(which) -> bool:
        return which == "zipccl" or strided_ref

    def broadcast(which):
        # Non-contiguous: copied back into the strided tensor after the op.
        t = place(_gen(rank, "bc", (5, 7)), which).t()
        t = t if strided(which) else t.contiguous()
        dist.broadcast(t, src=ws - 1, group=group(which))
        return [t]

    def reduce(which):
        t = place(_gen(rank, "reduce", (n,)), which)
        dist.reduce(t, dst=ws - 1, group=group(which))
        return [t] if rank == ws - 1 else []  # elsewhere undefined

    def all_gather_into_tensor(which):
        x = place(_gen(rank, "agit", (n,), bf16), which)
        out = place(torch.empty(ws * n, dtype=bf16), which)
        dist.all_gather_into_tensor(out, x, group=group(which))
        return [out]

    def all_gather_in_place(which):
        # The input is this rank's slice of the output.
        out = place(torch.zeros(ws * 1000), which)
        x = out[rank * 1000:(rank + 1) * 1000]
        x.copy_(place(_gen(rank, "agip", (1000,)), which))
        dist.all_gather_into_tensor(out, x, group=group(which))
        return [out]

    def all_gather_strided(which):
        x = place(_gen(rank, "ag", (7, 5)), which)
        outs = [place(torch.zeros(5, 7), which).t() for _ in range(ws)]
        outs = outs if strided(which) else [o.contiguous() for o in outs]
        dist.all_gather(outs, x, group=group(which))
        return outs

    def reduce_scatter(which):
        x = place(_gen(rank, "rs", (ws * n,)), which)
        out = place(torch.empty(n), which)
        dist.reduce_scatter_tensor(out, x, group=group(which))
        return [out]

    def all_to_all_uneven(which):
        # Rank s sends 1 + d + s rows to rank d.
        ins = [1 + d + rank for d in range(ws)]
        outs = [1 + s + rank for s in range(ws)]
        x = place(_gen(rank, "a2a", (sum(ins), 3)), which)
        y = place(torch.zeros(sum(outs), 3), which)
        dist.all_to_all_single(y, x, outs, ins, group=group(which))
        return [y]

    def gather(which):
        x = place(_gen(rank, "gather", (33,)), which)
        outs = [place(torch.zeros(33), which) for _ in range(ws)] if rank == 0 else None
        dist.gather(x, outs, dst=0, group=group(which))
        return outs or [x]

    def scatter(which):
        out = place(torch.zeros(33), which)
        ins = [place(_gen(0, f"scatter/{i}", (33,)), which) for i in range(ws)] if rank == 0 else None
        dist.scatter(out, ins, src=0, group=group(which))
        return [out]

    def send_recv(which):
        x = place(_gen(rank, "p2p", (1000,)), which)
        y = place(torch.zeros(1000), which)
        if rank == 0:
            dist.send(x, 1, group=group(which))
            dist.recv(y, 1, group=group(which))
        elif rank == 1:
            dist.recv(y, 0, group=group(which))
            dist.send(x, 0, group=group(which))
        return [y]

    def batch_ring(which):
        # Every rank sends and receives at once: the ops must go in one
        # group (coalescing) or they deadlock.
        x = place(_gen(rank, "batch", (4097,)), which)
        y = place(torch.zeros(4097), which)
        g = group(which)
        ops = [dist.P2POp(dist.isend, x, (rank + 1) % ws, g), dist.P2POp(dist.irecv, y, (rank - 1) % ws, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        return [y]

    def coalesced_all_reduce(which):
        ts = [place(_gen(rank, f"coal/{i}", (100 + i,)), which) for i in range(3)]
        g = group(which)
        with dist._coalescing_manager(group=g, device=ts[0].device, async_ops=True) as cm:
            for t in ts:
                dist.all_reduce(t, group=g)
        cm.wait()
        return ts

    for fn in (broadcast, reduce, all_gather_into_tensor, all_gather_in_place, all_gather_strided, reduce_scatter,
               all_to_all_uneven, gather, scatter, send_recv, batch_ring, coalesced_all_reduce):
        cases.append((fn.__name__, fn))
    return cases


def _task_vs_nccl(rank, ws, dev, f):
    """Every kind of op on CUDA tensors (NCCL path), bit for bit against the
    same op through torch's NCCL backend; then the coded path (a group with
    gpu_path coded, every float op coded) against NCCL's uncoded
    results, except AVG and PREMUL_SUM, whose scaling NCCL does elsewhere
    in the arithmetic (two ranks: a sum of two is one rounding either
    way)."""
    import zipccl

    nccl = dist.new_group(backend="nccl", timeout=datetime.timedelta(seconds=120))
    for what, run in _collective_cases(rank, ws, lambda which: None if which == "zipccl" else nccl,
                                       lambda t, which: t.to(dev), strided_ref=False):
        _compare(f, what, run)
    coded = dist.new_group(backend="zipccl", pg_options=zipccl.Options(
        gpu_path="coded", compression="always", extra={"two_shot_min": 4096, "compress_min": 4096}))
    for what, run in _collective_cases(rank, ws, lambda which: coded if which == "zipccl" else nccl,
                                       lambda t, which: t.to(dev), strided_ref=False):
        if "AVG" not in what and "PREMUL_SUM" not in what:
            _compare(f, f"coded path: {what}", run)
    if _gpu_stats(coded)["gpu_coded"] == 0:
        f.append("the coded group coded nothing on the GPU")
    # Two CUDA devices in one call.
    other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count())
    try:
        dist.all_gather_into_tensor(torch.zeros(2 * ws, device=dev), torch.ones(2, device=other))
        f.append("all_gather_into_tensor over two devices: accepted")
    except RuntimeError as e:
        if "one call takes tensors of one device" not in str(e):
            f.append(f"all_gather_into_tensor over two devices: unclear message: {str(e)[:300]}")


def _task_staged(rank, ws, dev, f):
    """Every kind of op on CUDA tensors, host-staged (the ranks share one
    GPU), bit for bit against the same op on CPU tensors (the same engine);
    then the stream order of a staged op, and the any-source refusal."""
    for what, run in _collective_cases(rank, ws, lambda which: None,
                                       lambda t, which: t.to(dev) if which == "zipccl" else t, strided_ref=True):
        _compare(f, what, run)

    # Issued on a side stream behind a long kernel; read on the default
    # stream after wait(): only right when the inputs were copied after the
    # side stream's fill and the result copied back before the read.
    y, _, _, done = _side_stream_all_reduce(dev)
    if not done:
        f.append("a staged work was not complete after wait() (its CPU part is waited for on the host)")
    if not bool((y == 3.0 * ws).all()):
        f.append(f"staged all_reduce on a side stream: read {y.unique()[:4].tolist()} after wait(), want {3.0 * ws}")

    try:
        dist.recv(torch.zeros(4, device=dev))
        f.append("recv from any source into a CUDA tensor: accepted")
    except RuntimeError as e:
        if "any source" not in str(e):
            f.append(f"recv from any source: unclear message: {str(e)[:300]}")


def _gpu_stats(group=None) -> dict[str, int]:
    """How many ops of the group ran coded on the GPU, and how many the
    engine staged, on the coded path (the engine's statistics)."""
    import zipccl

    ops = zipccl.stats(group).get("ops", {}).values()
    return {k: sum(int(v.get(k, 0)) for v in ops) for k in ("gpu_coded", "gpu_staged")}


def _task_coded(rank, ws, dev, f):
    """Every kind of op on CUDA tensors on the coded path (the ranks share
    one GPU, which NCCL refuses), bit for bit against the same op on CPU
    tensors, the GPU coding what the switcher codes (CODE_ENV); then the
    path's stream order: launching does not wait for the caller's stream,
    the op reads its inputs after the work already on it, and wait() makes
    its result visible to the caller's stream."""
    for what, run in _collective_cases(rank, ws, lambda which: None,
                                       lambda t, which: t.to(dev) if which == "zipccl" else t, strided_ref=True):
        _compare(f, what, run)
    st = _gpu_stats()
    if st["gpu_coded"] < 5 or st["gpu_staged"] < 3:
        f.append(f"the coded path coded {st['gpu_coded']} ops on the GPU and staged {st['gpu_staged']}; "
                 "expected the float collectives coded and the rest (int64, MAX, AVG, gather...) staged")

    y, launch_s, busy, done = _side_stream_all_reduce(dev)
    if launch_s > 0.5:
        f.append(f"launching took {launch_s:.2f}s: the host waited for the caller's stream")
    if not busy:
        f.append("the work was complete while the stream it follows was still busy")
    if not done:
        f.append("a coded-path work was not complete after wait()")
    if not bool((y == 3.0 * ws).all()):
        f.append(f"coded all_reduce on a side stream: read {y.unique()[:4].tolist()} after wait(), want {3.0 * ws}")


def _task_mixed(rank, ws, dev, f):
    """A mixed job: rank 0's group stages its CUDA tensors (gpu_path
    staged), rank 1's codes them on the GPU; together they give the CPU
    path's bits."""
    import zipccl

    g = dist.new_group(backend="zipccl", pg_options=zipccl.Options(gpu_path="staged" if rank == 0 else None))
    wanted = {"all_reduce torch.bfloat16 SUM", "all_reduce torch.float32 SUM", "all_gather_into_tensor",
              "reduce_scatter", "all_to_all_uneven", "broadcast", "send_recv"}
    for what, run in _collective_cases(rank, ws, lambda which: g if which == "zipccl" else None,
                                       lambda t, which: t.to(dev) if which == "zipccl" else t, strided_ref=True):
        if what in wanted:
            _compare(f, what, run)
    st = _gpu_stats(g)
    if (st["gpu_coded"] > 0) != (rank == 1):
        f.append(f"rank {rank} coded {st['gpu_coded']} ops on the GPU (only rank 1 codes)")


def _side_stream_all_reduce(dev) -> tuple[torch.Tensor, float, bool, bool]:
    """An all_reduce of 3.0s issued on a side stream behind a 1 s kernel and
    the fill it reduces, then waited for and read on the default stream:
    (what was read, seconds the launch took, whether the work was still
    busy after the launch, whether it was complete after wait())."""
    cycles = _sleep_cycles(1.0)
    x = torch.zeros(1 << 20, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    t0 = time.monotonic()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        x.fill_(3.0)
        work = dist.all_reduce(x, async_op=True)
    launch_s = time.monotonic() - t0
    busy = not work.is_completed()
    work.wait()
    done = work.is_completed()
    y = x.clone()
    torch.cuda.synchronize()
    return y, launch_s, busy, done


def _sleep_cycles(seconds: float) -> int:
    """The torch.cuda._sleep argument that keeps the current stream busy
    for about seconds."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(100_000_000)
    end.record()
    end.synchronize()
    return int(100_000_000 * seconds / (start.elapsed_time(end) / 1000))


def _task_streams(rank, ws, dev, f):
    """The NCCL path's stream semantics (one rank): launching an op does not
    block the host, the op runs after the work already on the caller's
    current stream (here a side stream), and wait() orders the waiting
    stream after the op without blocking the host; completion reaches the
    host afterwards."""
    warm = torch.ones(1024, device=dev)
    dist.all_reduce(warm)  # creates the NCCL communicator
    torch.cuda.synchronize()

    cycles = _sleep_cycles(2.0)
    x = torch.zeros(1 << 22, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    t0 = time.monotonic()
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        x.fill_(3.0)
        # x2, so that running before the fill or being read before the op
        # shows in the value read below.
        work = dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0), async_op=True)
    launch_s = time.monotonic() - t0
    busy = not work.is_completed()
    t0 = time.monotonic()
    work.wait()  # the default stream waits
    wait_s = time.monotonic() - t0
    y = x.clone()
    torch.cuda.synchronize()
    if launch_s > 1.0:
        f.append(f"launching took {launch_s:.2f}s: the host waited for the side stream")
    if wait_s > 1.0:
        f.append(f"wait() took {wait_s:.2f}s: the host waited (the NCCL path only makes the stream wait)")
    if not busy:
        f.append("the work was complete while the stream it follows was still busy")
    if not bool((y == 6.0).all()):
        f.append(f"read after wait() on another stream saw {y.unique()[:4].tolist()}, want 6.0")
    deadline = time.monotonic() + 10
    while not work.is_completed() and time.monotonic() < deadline:
        time.sleep(0.01)
    if not work.is_completed():
        f.append("the work was not completed 10 s after its stream finished")
    value = work.get_future().wait()
    if not bool((value[0] == 6.0).all()):
        f.append("the future's value is not the result")


def _task_shared(rank, ws, dev, f):
    """Ranks on one GPU, nothing forced: NCCL would refuse them ("Duplicate
    GPU detected"), so the plan stages, and the ops are right."""
    x = torch.full((1000,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    if not bool((x == ws * (ws + 1) / 2).all()):
        f.append(f"all_reduce on a shared GPU: {x.unique()[:4].tolist()}")
    y = torch.empty(ws * 10, device=dev)
    dist.all_gather_into_tensor(y, torch.full((10,), float(rank), device=dev))
    want = torch.arange(ws, device=dev).repeat_interleave(10).float()
    if not torch.equal(y, want):
        f.append("all_gather_into_tensor on a shared GPU: wrong result")


_TASKS = {"vs_nccl": _task_vs_nccl, "staged": _task_staged, "streams": _task_streams, "shared": _task_shared,
          "coded": _task_coded, "mixed": _task_mixed}


def _kernels_found() -> bool:
    from zipccl.bench.kernels import find_library

    return bool(find_library())


def test_backend_cuda_matches_nccl():
    _need_gpus(2)
    if not dist.is_nccl_available():
        pytest.skip("torch was built without NCCL (the reference)")
    logs = _run_gpu(2, "vs_nccl", need_nccl=True)
    for r, log in enumerate(logs):
        assert STAGED_WARNING not in log, f"rank {r} staged CUDA tensors; the NCCL path was expected:\n{log[-3000:]}"


def test_backend_cuda_stream_semantics():
    _need_gpus(1)
    logs = _run_gpu(1, "streams", need_nccl=True)
    assert STAGED_WARNING not in logs[0], f"CUDA tensors were staged; the NCCL path was expected:\n{logs[0][-3000:]}"


def test_backend_cuda_ranks_sharing_a_gpu():
    """NCCL refuses ranks that share a GPU: they take the coded path (the
    staged one without the kernel library), and say why."""
    _need_gpus(1)
    if torch.cuda.device_count() > 1:
        pytest.skip("every rank gets its own GPU here; this needs ranks that share one")
    logs = _run_gpu(2, "shared", need_nccl=False, env={"ZIPCCL_DEBUG": "INFO"})
    path = CODED_LOG if _kernels_found() else STAGED_WARNING
    for r, log in enumerate(logs):
        assert path in log and "share GPU" in log, f"rank {r} did not log {path!r} for sharing a GPU:\n{log[-3000:]}"


def test_backend_cuda_coded_path():
    _need_gpus(1)
    if not _kernels_found():
        pytest.skip("the coded path needs the CUDA kernel library (make cuda)")
    logs = _run_gpu(2, "coded", need_nccl=False, env=CODE_ENV)
    for r, log in enumerate(logs):
        assert CODED_LOG in log and STAGED_WARNING not in log, f"rank {r} did not run the coded path:\n{log[-3000:]}"


def test_backend_cuda_mixed_coded_and_staged():
    _need_gpus(1)
    if not _kernels_found():
        pytest.skip("the coded path needs the CUDA kernel library (make cuda)")
    logs = _run_gpu(2, "mixed", need_nccl=False, env=CODE_ENV)
    assert STAGED_WARNING in logs[0], f"rank 0 did not stage:\n{logs[0][-3000:]}"
    assert CODED_LOG in logs[1] and STAGED_WARNING not in logs[1], f"rank 1 did not code:\n{logs[1][-3000:]}"


def test_backend_cuda_host_staged():
    _need_gpus(1)
    logs = _run_gpu(2, "staged", need_nccl=False, env={"ZIPCCL_GPU_PATH": "staged"})
    for r, log in enumerate(logs):
        assert STAGED_WARNING in log and "ZIPCCL_GPU_PATH=staged" in log, (
            f"rank {r} did not log the staged path:\n{log[-3000:]}"
        )
