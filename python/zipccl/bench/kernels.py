"""``python -m zipccl bench kernels``: GB/s of the CUDA codec kernels.

Loads ``libzipccl_cuda.so`` (cuda/, built by ``make cuda``) with ctypes and,
on torch CUDA tensors, times in one run and on the same data:

* a device-to-device copy (``dst.copy_(src)``, torch), the reference;
* zip3 encode of the tensor into one frame;
* zip3 decode of that frame;
* fused decode+reduce of ``--sources`` frames (SUM in float32, rounded once).

GB/s counts the tensor's raw (uncompressed) bytes per second: for the copy
the bytes copied, for encode the bytes read, for decode the bytes written,
for decode+reduce the raw bytes of all sources decoded. Each result is
checked (decode is bit-identical to the input, decode+reduce to torch's
float32 sum in rank order) before it is timed. Without a GPU it prints
"no GPU: kernel benchmark skipped" and exits 0.

The module also holds ``KernelLib``, the small ctypes wrapper that
tests/test_gpu.py uses.
"""

from __future__ import annotations

import argparse
import ctypes
from typing import Any, NamedTuple, Optional, Sequence

import torch

from .._paths import cuda_library

DTYPE_CODES = {
    torch.float32: 1,
    torch.bfloat16: 3,
    torch.float16: 4,
    torch.float8_e4m3fn: 11,
    torch.float8_e5m2: 12,
}
SRC_FRAME, SRC_SPLIT_ZIP3, SRC_SPLIT_RAW, SRC_PLAIN = 0, 1, 2, 3
OP_SUM, OP_PRODUCT = 0, 2
FLAG_SYNC = 1
STATUS_NAMES = {
    0: "ok", 1: "invalid", 2: "cuda", 3: "unsupported", 4: "corrupt", 5: "truncated",
    6: "checksum", 7: "version", 8: "size", 9: "dtype", 10: "kind", 11: "nomem",
}
_NAMES = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float16": torch.float16,
          "fp16": torch.float16, "float32": torch.float32, "fp32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn, "e4m3": torch.float8_e4m3fn,
          "float8_e5m2": torch.float8_e5m2, "e5m2": torch.float8_e5m2}


def find_library() -> Optional[str]:
    """$ZIPCCL_CUDA_LIB, else libzipccl_cuda.so next to the package, else the
    repository's build/cuda/ (make cuda)."""
    return cuda_library()


class ZcclError(RuntimeError):
    def __init__(self, status: int, message: str):
        super().__init__(f"{STATUS_NAMES.get(status, status)}: {message}")
        self.status = status
        self.name = STATUS_NAMES.get(status, str(status))


class Source(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("len", ctypes.c_int64)]


def _i64s(values: Sequence[int]) -> Any:
    return (ctypes.c_int64 * max(1, len(values)))(*values)


class KernelLib:
    """ctypes access to libzipccl_cuda.so for torch CUDA tensors.

    emulated=True loads the CPU emulation of the same C API instead
    (build/cuda_emu/libzipccl_cuda_emu.so, ``make -C tests/cuda_emu lib``):
    "device" tensors are then CPU tensors and the kernels run on the
    emulated grid, which lets the ctypes layer be tested without a GPU."""

    def __init__(self, path: Optional[str] = None, device: Optional[int] = None, emulated: bool = False):
        path = path or (None if emulated else find_library())
        if path is None:
            raise FileNotFoundError("libzipccl_cuda.so not found (run `make cuda`, or set ZIPCCL_CUDA_LIB)")
        self.path = path
        lib = ctypes.CDLL(path)
        self.lib = lib
        P, I64, I, U = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_uint
        PI64 = ctypes.POINTER(ctypes.c_int64)
        sig = {
            "zccl_build_info": (ctypes.c_char_p, []),
            "zccl_last_error": (ctypes.c_char_p, []),
            "zccl_device_count": (I, []),
            "zccl_ctx_create": (I, [I, ctypes.POINTER(P)]),
            "zccl_ctx_destroy": (None, [P]),
            "zccl_zip3_static_len": (I64, [I, I64]),
            "zccl_zip3_max_dynamic_len": (I64, [I, I64]),
            "zccl_max_frame_len": (I64, [I, I64]),
            "zccl_frame_slots": (I, [I, PI64, I, PI64]),
            "zccl_encode_workspace_size": (I64, [I, PI64, I]),
            "zccl_decode_workspace_size": (I64, [I, PI64, I]),
            "zccl_reduce_workspace_size": (I64, [I, I64, I]),
            "zccl_encode_frames": (I, [P, I, P, PI64, I, P, PI64, P, P, I64, P, U]),
            "zccl_encode_split": (I, [P, I, P, PI64, I, P, PI64, P, PI64, P, P, I64, P, U]),
            "zccl_decode_frames": (I, [P, I, P, PI64, PI64, PI64, I, P, P, I64, P, U]),
            "zccl_decode_split": (I, [P, I, I, P, PI64, P, PI64, PI64, PI64, I, P, P, I64, P, U]),
            "zccl_decode_reduce": (I, [P, I, I, ctypes.POINTER(Source), I, I64, P, P, I64, P, U]),
            "zccl_workspace_status": (I, [P, P, P, ctypes.c_char_p, ctypes.c_size_t]),
            "zccl_quant_main_len": (I64, [I, I64, I]),
            "zccl_quant_workspace_size": (I64, [I64]),
            "zccl_quant_encode": (I, [P, I, I, I, P, I64, P, P, I64, P, P, I64, P, U]),
            "zccl_quant_decode": (I, [P, P, I64, P, I64, I, I64, P, P, I64, P, U]),
            "zccl_quant_accumulate": (I, [P, P, I64, P, I64, I64, P, I, P, I64, P, U]),
        }
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        self.emulated = emulated
        if emulated:
            self.device, self.dev = 0, torch.device("cpu")
        else:
            self.device = torch.cuda.current_device() if device is None else device
            self.dev = torch.device(f"cuda:{self.device}")
        ctx = ctypes.c_void_p()
        self._check(lib.zccl_ctx_create(self.device, ctypes.byref(ctx)))
        self.ctx = ctx

    def close(self) -> None:
        if getattr(self, "ctx", None):
            self.lib.zccl_ctx_destroy(self.ctx)
            self.ctx = None

    def build_info(self) -> str:
        return self.lib.zccl_build_info().decode()

    def _check(self, status: int) -> None:
        if status != 0:
            raise ZcclError(status, self.lib.zccl_last_error().decode(errors="replace"))

    def _stream(self) -> ctypes.c_void_p:
        if self.emulated:
            return ctypes.c_void_p(None)
        return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def status(self, ws: torch.Tensor) -> tuple[int, str]:
        msg = ctypes.create_string_buffer(256)
        st = self.lib.zccl_workspace_status(self.ctx, ws.data_ptr(), self._stream(), msg, 256)
        return st, msg.value.decode(errors="replace")

    def workspace(self, nbytes: int) -> torch.Tensor:
        return torch.empty(max(16, nbytes), dtype=torch.uint8, device=self.dev)

    # ---- encode

    def slots(self, dtype: torch.dtype, counts: Sequence[int]) -> list[int]:
        offs = (ctypes.c_int64 * (len(counts) + 1))()
        self._check(self.lib.zccl_frame_slots(DTYPE_CODES[dtype], _i64s(counts), len(counts), offs))
        return list(offs)

    def encode_call(self, src: torch.Tensor, counts: Sequence[int], out: torch.Tensor, offsets: Sequence[int],
                    lens: torch.Tensor, ws: torch.Tensor, sync: bool = False) -> Any:
        """A prepared zccl_encode_frames call (arguments converted once): calling
        the result enqueues the kernels on the current stream."""
        args = (self.ctx, DTYPE_CODES[src.dtype], src.data_ptr(), _i64s(counts), len(counts), out.data_ptr(),
                _i64s(offsets), lens.data_ptr(), ws.data_ptr(), ws.numel(), self._stream(), FLAG_SYNC if sync else 0)
        fn, check = self.lib.zccl_encode_frames, self._check
        return lambda: check(fn(*args))

    def encode_into(self, src: torch.Tensor, counts: Sequence[int], out: torch.Tensor, offsets: Sequence[int],
                    lens: torch.Tensor, ws: torch.Tensor, sync: bool = False) -> None:
        """Raw call: src's elements cut into chunks, frames at out + offsets; no host copies."""
        self.encode_call(src, counts, out, offsets, lens, ws, sync)()

    def encode(self, src: torch.Tensor, counts: Optional[Sequence[int]] = None) -> list[bytes]:
        """Encodes a contiguous CUDA tensor (cut into chunks) and returns the frames."""
        src = src.contiguous().view(-1)
        counts = list(counts) if counts is not None else [src.numel()]
        assert sum(counts) == src.numel()
        offs = self.slots(src.dtype, counts)
        out = torch.empty(max(1, offs[-1]), dtype=torch.uint8, device=src.device)
        lens = torch.empty(max(1, len(counts)), dtype=torch.int64, device=src.device)
        ws = self.workspace(self.lib.zccl_encode_workspace_size(DTYPE_CODES[src.dtype], _i64s(counts), len(counts)))
        self.encode_into(src, counts, out, offs, lens, ws, sync=True)
        host, lens_h = out.cpu(), lens.cpu().tolist()
        return [bytes(host[offs[k]:offs[k] + lens_h[k]].numpy().tobytes()) for k in range(len(counts))]

    def encode_split(self, src: torch.Tensor) -> tuple[bytes, bytes]:
        src = src.contiguous().view(-1)
        code, n = DTYPE_CODES[src.dtype], src.numel()
        st = torch.empty(max(1, self.lib.zccl_zip3_static_len(code, n)), dtype=torch.uint8, device=src.device)
        dyn = torch.empty(max(1, self.lib.zccl_zip3_max_dynamic_len(code, n)), dtype=torch.uint8, device=src.device)
        dl = torch.empty(1, dtype=torch.int64, device=src.device)
        ws = self.workspace(self.lib.zccl_encode_workspace_size(code, _i64s([n]), 1))
        self._check(self.lib.zccl_encode_split(
            self.ctx, code, src.data_ptr(), _i64s([n]), 1, st.data_ptr(), _i64s([0]), dyn.data_ptr(), _i64s([0]),
            dl.data_ptr(), ws.data_ptr(), ws.numel(), self._stream(), FLAG_SYNC))
        sl = self.lib.zccl_zip3_static_len(code, n)
        return bytes(st.cpu()[:sl].numpy().tobytes()), bytes(dyn.cpu()[:int(dl.item())].numpy().tobytes())

    # ---- decode

    def decode(self, frames: Sequence[bytes], counts: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Decodes frames (host bytes) into one CUDA tensor of sum(counts) elements."""
        dev = self.dev
        offs, total = [], 0
        for f in frames:
            offs.append(total)
            total += (len(f) + 127) // 128 * 128
        buf = torch.zeros(max(1, total), dtype=torch.uint8)
        for o, f in zip(offs, frames):
            if f:
                buf[o:o + len(f)] = torch.frombuffer(bytearray(f), dtype=torch.uint8)
        dbuf = buf.to(dev)
        dst = torch.empty(sum(counts), dtype=dtype, device=dev)
        ws = self.workspace(self.lib.zccl_decode_workspace_size(DTYPE_CODES[dtype], _i64s(counts), len(counts)))
        self._check(self.lib.zccl_decode_frames(
            self.ctx, DTYPE_CODES[dtype], dbuf.data_ptr(), _i64s(offs), _i64s([len(f) for f in frames]),
            _i64s(counts), len(counts), dst.data_ptr(), ws.data_ptr(), ws.numel(), self._stream(), FLAG_SYNC))
        return dst

    def decode_reduce_call(self, sources: Sequence[Source], numel: int, dst: torch.Tensor, ws: torch.Tensor,
                           op: int = OP_SUM, sync: bool = False) -> Any:
        """A prepared zccl_decode_reduce call (see encode_call)."""
        arr = (Source * len(sources))(*sources)
        args = (self.ctx, DTYPE_CODES[dst.dtype], op, arr, len(sources), numel, dst.data_ptr(), ws.data_ptr(),
                ws.numel(), self._stream(), FLAG_SYNC if sync else 0)
        fn, check = self.lib.zccl_decode_reduce, self._check
        return lambda: check(fn(*args))

    def decode_reduce_into(self, sources: Sequence[Source], numel: int, dst: torch.Tensor, ws: torch.Tensor,
                           op: int = OP_SUM, sync: bool = False) -> None:
        self.decode_reduce_call(sources, numel, dst, ws, op, sync)()

    def decode_reduce(self, frames: Sequence[bytes], numel: int, dtype: torch.dtype, op: int = OP_SUM,
                      plain: Optional[dict[int, torch.Tensor]] = None) -> torch.Tensor:
        """Reduces frames (host bytes) in rank order; plain[r] replaces source r by a CUDA tensor."""
        dev = self.dev
        keep, srcs = [], []
        for r, f in enumerate(frames):
            if plain and r in plain:
                t = plain[r].contiguous()
                keep.append(t)
                srcs.append(Source(SRC_PLAIN, t.data_ptr(), None, 0))
                continue
            t = torch.frombuffer(bytearray(f), dtype=torch.uint8).to(dev)
            keep.append(t)
            srcs.append(Source(SRC_FRAME, t.data_ptr(), None, len(f)))
        dst = torch.empty(numel, dtype=dtype, device=dev)
        ws = self.workspace(self.lib.zccl_reduce_workspace_size(DTYPE_CODES[dtype], numel, len(srcs)))
        self.decode_reduce_into(srcs, numel, dst, ws, op=op, sync=True)
        return dst


# ---------------------------------------------------------------- the benchmark


QUANT_MODES = {"int8": 1, "int4": 2, "fp8": 3}
QUANT_BLOCK = {"int8": 2048, "int4": 256, "fp8": 256}  # backend/lossy.BlockOf (fp8: the policy's default fp8_block)


class QuantMessage(NamedTuple):
    """A lossy message on the device: the main part, then room for the
    exact part, in one buffer (as the collectives send it)."""

    buf: torch.Tensor
    main_len: int
    exact_len: torch.Tensor  # int64, on the device


def quant_encode_call(k: "KernelLib", src: torch.Tensor, mode: str, msg: QuantMessage, ws: torch.Tensor,
                      sync: bool = False) -> Any:
    """A prepared zccl_quant_encode call of src into msg."""
    n = src.numel()
    args = (k.ctx, DTYPE_CODES[src.dtype], QUANT_MODES[mode], QUANT_BLOCK[mode], src.data_ptr(), n, msg.buf.data_ptr(),
            msg.buf.data_ptr() + msg.main_len, msg.buf.numel() - msg.main_len, msg.exact_len.data_ptr(),
            ws.data_ptr(), ws.numel(), k._stream(), FLAG_SYNC if sync else 0)
    return lambda: k._check(k.lib.zccl_quant_encode(*args))


def quant_message(k: "KernelLib", src: torch.Tensor, mode: str) -> QuantMessage:
    """A buffer for src's message: main part plus the largest exact part."""
    n = src.numel()
    main = k.lib.zccl_quant_main_len(QUANT_MODES[mode], n, QUANT_BLOCK[mode])
    buf = torch.empty(main + n * src.element_size(), dtype=torch.uint8, device=k.dev)
    return QuantMessage(buf, main, torch.zeros(1, dtype=torch.int64, device=k.dev))


def quant_decode_call(k: "KernelLib", msg: QuantMessage, dst: torch.Tensor, ws: torch.Tensor,
                      sync: bool = False) -> Any:
    """A prepared zccl_quant_decode call of msg into dst (its dtype)."""
    el = int(msg.exact_len.item())
    args = (k.ctx, msg.buf.data_ptr(), msg.main_len, msg.buf.data_ptr() + msg.main_len, el,
            DTYPE_CODES[dst.dtype], dst.numel(), dst.data_ptr(), ws.data_ptr(), ws.numel(), k._stream(),
            FLAG_SYNC if sync else 0)
    return lambda: k._check(k.lib.zccl_quant_decode(*args))


def quant_accumulate_call(k: "KernelLib", msgs: Sequence[QuantMessage], acc: torch.Tensor, ws: torch.Tensor,
                          sync: bool = False) -> Any:
    """Prepared zccl_quant_accumulate calls folding msgs into acc (float32),
    the first setting it."""
    calls = []
    for i, m in enumerate(msgs):
        el = int(m.exact_len.item())
        calls.append((k.ctx, m.buf.data_ptr(), m.main_len, m.buf.data_ptr() + m.main_len, el, acc.numel(),
                      acc.data_ptr(), int(i == 0), ws.data_ptr(), ws.numel(), k._stream(), FLAG_SYNC if sync else 0))

    def run() -> None:
        for args in calls:
            k._check(k.lib.zccl_quant_accumulate(*args))
    return run


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes-mib", default="1,16,64,256", help="tensor sizes in MiB (default 1,16,64,256)")
    p.add_argument("--dtype", default="bfloat16",
                   help="bfloat16 (default), float16, float32, float8_e4m3fn or float8_e5m2; "
                        "several, comma-separated, run one after the other")
    p.add_argument("--sigma", type=float, default=0.02, help="std of the Gaussian data (default 0.02)")
    p.add_argument("--sources", type=int, default=4, help="frames reduced by decode+reduce (default 4)")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per measurement (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first (default 3)")
    p.add_argument("--quant", default=None,
                   help="the lossy kernels instead (int8, int4, fp8, or several comma-separated): quantize, "
                        "dequantize and dequantize+accumulate of --sources messages, against a copy")
    p.add_argument("--csv", default=None, help="also write the results to this CSV file")


def _time(fn: Any, iters: int, warmup: int) -> float:
    """Mean seconds per call, by CUDA events around `iters` calls."""
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def run(args: argparse.Namespace) -> int:
    if not torch.cuda.is_available():
        print("no GPU: kernel benchmark skipped (torch.cuda.is_available() is False)")
        return 0
    path = find_library()
    if path is None:
        print("kernel benchmark: libzipccl_cuda.so not found; run `make cuda` (or set ZIPCCL_CUDA_LIB)")
        return 1
    names = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for name in names:
        if name.lower() not in _NAMES:
            raise SystemExit(f"bench kernels: unknown dtype {name!r}")
    k = KernelLib(path)
    rows: list[tuple[str, float, float, float, float, float, float]] = []
    try:
        if args.quant:
            return _bench_quant(k, names, args)
        for name in names:
            if _bench_dtype(k, name, args, rows) != 0:
                return 1
    finally:
        k.close()
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("size_mib,dtype,ratio,copy_gbs,encode_gbs,decode_gbs,decode_reduce_gbs,sources\n")
            for r in rows:
                f.write(f"{r[1]:g},{r[0]},{r[2]:.4f},{r[3]:.1f},{r[4]:.1f},{r[5]:.1f},{r[6]:.1f},{args.sources}\n")
    return 0


def _bench_dtype(k: KernelLib, name: str, args: argparse.Namespace, rows: list) -> int:
    """One dtype's table; appends (dtype, MiB, ratio, copy, encode, decode, decode+reduce) to rows."""
    dtype = _NAMES[name.lower()]
    dev = torch.device(f"cuda:{k.device}")
    code = DTYPE_CODES[dtype]
    esize = torch.empty(0, dtype=dtype).element_size()
    print(f"kernel benchmark on {torch.cuda.get_device_name(dev)}: {k.build_info()}")
    print(f"{name}, N(0, {args.sigma}^2) data, decode+reduce of {args.sources} frames (SUM); "
          "GB/s = raw tensor bytes per second (decode+reduce: all sources' raw bytes)")
    header = (f"{'size':>8} {'ratio':>6} {'copy GB/s':>10} {'encode GB/s':>16} {'decode GB/s':>16} "
              f"{'dec+reduce GB/s':>18}")
    print(header)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    for mib in [float(s) for s in args.sizes_mib.split(",") if s.strip()]:
        n = int(mib * (1 << 20)) // esize
        srcs = [(torch.randn(n, device=dev, generator=gen) * args.sigma).to(dtype) for _ in range(args.sources)]
        x = srcs[0]
        nbytes = n * esize
        # copy
        y = torch.empty_like(x)
        t_copy = _time(lambda: y.copy_(x), args.iters, args.warmup)
        # encode
        counts = [n]
        offs = k.slots(dtype, counts)
        frames = [torch.empty(offs[-1], dtype=torch.uint8, device=dev) for _ in srcs]
        lens = torch.empty(args.sources, dtype=torch.int64, device=dev)
        ws = k.workspace(max(k.lib.zccl_encode_workspace_size(code, _i64s(counts), 1),
                             k.lib.zccl_decode_workspace_size(code, _i64s(counts), 1),
                             k.lib.zccl_reduce_workspace_size(code, n, args.sources)))
        for i, s in enumerate(srcs):
            k.encode_into(s, counts, frames[i], offs, lens[i:i + 1], ws, sync=True)
        flen = lens.cpu().tolist()
        t_enc = _time(k.encode_call(x, counts, frames[0], offs, lens[0:1], ws), args.iters, args.warmup)
        # decode (checked first)
        out = torch.empty_like(x)
        fsrc = Source(SRC_FRAME, frames[0].data_ptr(), None, flen[0])
        k.decode_reduce_into([fsrc], n, out, ws, sync=True)
        if not torch.equal(out.view(torch.uint8), x.view(torch.uint8)):
            print(f"{mib:g} MiB: decode is NOT bit-identical to the input")
            return 1
        t_dec = _time(k.decode_reduce_call([fsrc], n, out, ws), args.iters, args.warmup)
        # decode + reduce (checked against torch's float32 sum in rank order)
        sources = [Source(SRC_FRAME, frames[i].data_ptr(), None, flen[i]) for i in range(args.sources)]
        k.decode_reduce_into(sources, n, out, ws, sync=True)
        acc = srcs[0].float()
        for s in srcs[1:]:
            acc = acc + s.float()
        if not torch.equal(out.view(torch.uint8), acc.to(dtype).view(torch.uint8)):
            print(f"{mib:g} MiB: decode+reduce differs from torch's float32 sum")
            return 1
        t_red = _time(k.decode_reduce_call(sources, n, out, ws), args.iters, args.warmup)
        gbs = lambda b, t: b / t / 1e9  # noqa: E731
        copy, enc, dec = gbs(nbytes, t_copy), gbs(nbytes, t_enc), gbs(nbytes, t_dec)
        red = gbs(nbytes * args.sources, t_red)
        ratio = nbytes / flen[0]
        rows.append((name, mib, ratio, copy, enc, dec, red))
        print(f"{mib:>5g} MiB {ratio:>6.3f} {copy:>10.1f} {enc:>9.1f} ({enc / copy:4.0%}) {dec:>9.1f} ({dec / copy:4.0%}) "
              f"{red:>11.1f} ({red / copy:4.0%})")
        del srcs, frames, out, y, ws
        torch.cuda.empty_cache()
    return 0


def _fp8_bound(ref: torch.Tensor, B: int) -> torch.Tensor:
    """fp8's error bound per element (float64, ref's shape): x' = H(u + d)/B,
    u = Hx over the block zero-padded to B, with |d_j| <= |u_j| / 16 (E4M3's
    half step, 2^-4 relative) + s 2^-10 (its subnormals' half step, s =
    max|u| / 448), so |x' - x| <= mean|u| / 16 + s / 1024, plus float32's
    roundings (below max|u| 2^-20)."""
    n = ref.numel()
    nb = (n + B - 1) // B
    u = torch.zeros(nb * B, dtype=torch.float64)
    u[:n] = ref
    u = u.view(nb, B)
    h = 1
    while h < B:
        v = u.view(nb, B // (2 * h), 2, h)
        u = torch.stack((v[:, :, 0] + v[:, :, 1], v[:, :, 0] - v[:, :, 1]), dim=2).view(nb, B)
        h *= 2
    a = u.abs()
    m = a.amax(dim=1)
    tol = (a.mean(dim=1) / 16 + m / 448 / 1024 + m * 2.0 ** -20) * (1 + 1e-3)
    return tol.repeat_interleave(B)[:n]


def quant_check(k: KernelLib, x: torch.Tensor, mode: str, ws: torch.Tensor) -> tuple[QuantMessage, str | None]:
    """Encodes x and checks the kernels against each other and the format's
    bound: the decode within half a step of each block's absmax (int8,
    int4; fp8: _fp8_bound) plus the rounding to x's dtype,
    and accumulate(first) equal to the decode into float32 bit for bit
    (float32 only: other dtypes round on decode). Returns the message and a
    failure, or None."""
    msg = quant_message(k, x, mode)
    quant_encode_call(k, x, mode, msg, ws, sync=True)()
    out = torch.empty_like(x)
    quant_decode_call(k, msg, out, ws, sync=True)()
    ref = x.double().cpu()
    got = out.double().cpu()
    B = QUANT_BLOCK[mode]
    if mode == "fp8":
        tol = _fp8_bound(ref, B)
    else:
        q = 127 if mode == "int8" else 7
        tol = torch.empty_like(ref)
        for lo in range(0, ref.numel(), B):
            tol[lo:lo + B] = ref[lo:lo + B].abs().max() / q / 2 * (1 + 1e-4)
    ulp = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}.get(x.dtype, 2.0 ** -24)
    if not bool(((got - ref).abs() <= tol + got.abs() * ulp).all()):
        return msg, f"{mode} {x.dtype}: decode outside the format's bound"
    acc = torch.empty(x.numel(), dtype=torch.float32, device=k.dev)
    quant_accumulate_call(k, [msg], acc, ws, sync=True)()
    if x.dtype == torch.float32 and not torch.equal(acc.cpu().view(torch.int32), out.cpu().view(torch.int32)):
        return msg, f"{mode} {x.dtype}: accumulate(first) differs from the decode"
    return msg, None


def _bench_quant(k: KernelLib, names: Sequence[str], args: argparse.Namespace) -> int:
    """The lossy kernels' table: quantize, dequantize (into the dtype) and
    dequantize+accumulate of --sources messages into float32, in GB/s of raw
    tensor bytes (accumulate: all messages' raw bytes), against a copy."""
    dev = k.dev
    modes = [m.strip() for m in args.quant.split(",") if m.strip()]
    for m in modes:
        if m not in QUANT_MODES:
            raise SystemExit(f"bench kernels: --quant {m!r}: want int8, int4 or fp8")
    print(f"lossy kernel benchmark on {torch.cuda.get_device_name(dev)}: {k.build_info()}")
    print(f"N(0, {args.sigma}^2) data, the collectives' blocks (int8 2048, int4 256, fp8 256); "
          f"accumulate folds {args.sources} messages")
    rows = []
    gen = torch.Generator(device=dev)
    gen.manual_seed(99)
    for name in names:
        dtype = _NAMES[name.lower()]
        for mib in [float(s) for s in args.sizes_mib.split(",") if s.strip()]:
            esize = torch.empty(0, dtype=dtype).element_size()
            n = int(mib * (1 << 20)) // esize
            srcs = [(torch.randn(n, device=dev, generator=gen) * args.sigma).to(dtype) for _ in range(args.sources)]
            x = srcs[0]
            y = torch.empty_like(x)
            t_copy = _time(lambda: y.copy_(x), args.iters, args.warmup)
            ws = k.workspace(k.lib.zccl_quant_workspace_size(n))
            for mode in modes:
                msgs = []
                for s in srcs:
                    m, bad = quant_check(k, s, mode, ws)
                    if bad:
                        print(f"{mib:g} MiB: {bad}")
                        return 1
                    msgs.append(m)
                t_enc = _time(quant_encode_call(k, x, mode, msgs[0], ws), args.iters, args.warmup)
                t_dec = _time(quant_decode_call(k, msgs[0], y, ws), args.iters, args.warmup)
                acc = torch.empty(n, dtype=torch.float32, device=dev)
                t_acc = _time(quant_accumulate_call(k, msgs, acc, ws), args.iters, args.warmup)
                nbytes = n * esize
                gbs = lambda b, t: b / t / 1e9  # noqa: E731
                copy, enc, dec = gbs(nbytes, t_copy), gbs(nbytes, t_enc), gbs(nbytes, t_dec)
                accu = gbs(nbytes * args.sources, t_acc)
                rows.append((name, mib, mode, copy, enc, dec, accu))
                print(f"{name:>9} {mode} {mib:>5g} MiB copy {copy:8.1f}  quantize {enc:8.1f} ({enc / copy:4.0%})  "
                      f"dequantize {dec:8.1f} ({dec / copy:4.0%})  accumulate {accu:8.1f} ({accu / copy:4.0%})")
            del srcs, y, ws
            torch.cuda.empty_cache()
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("size_mib,dtype,mode,copy_gbs,quantize_gbs,dequantize_gbs,accumulate_gbs,sources\n")
            for r in rows:
                f.write(f"{r[1]:g},{r[0]},{r[2]},{r[3]:.1f},{r[4]:.1f},{r[5]:.1f},{r[6]:.1f},{args.sources}\n")
    return 0
