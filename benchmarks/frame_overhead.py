"""What a huff2 container spends besides its coded bits (RESULTS.md o6,
o10): the container header, the frame header, the block index with its
padding, the records' headers (mode bytes and stream lengths), the tables
and the dynamic part's padding, for the demo capture's tensors of
`python -m zipccl bench codec --data demo` (150 steps, seed 0), in the
packed frame that compress writes (docs/FORMAT.md 4b) and in the aligned
one (4a); and, when zipnn is installed, the size of ZipNN's output for the
same tensor.

    python benchmarks/frame_overhead.py activations:bfloat16 gradients:float32
"""

import struct
import sys

import torch

from zipccl import codec
from zipccl.bench.codec import capture_demo, trim_to_chunks

PLANES = {torch.bfloat16: 2, torch.float16: 2, torch.float32: 4}


def overhead(t: torch.Tensor, data: bytes) -> str:
    f = data.find(b"ZCCF")
    packed = data[f + 5] == 4  # FORMAT.md 4b: 4-byte index entries, uint16 stream lengths, no padding
    entry, lw, lfmt = (4, 2, "<4H") if packed else (16, 4, "<4I")
    numel, dyn = struct.unpack_from("<QQ", data, f + 8)
    nblocks = (numel + 65535) // 65536
    static = len(data) - f - 32 - dyn
    p, end = f + 32 + static, f + 32 + static + dyn
    hdr = tab = stream = raw = 0
    for b in range(nblocks):
        n = min(65536, numel - b * 65536)
        for _ in range(PLANES[t.dtype]):
            mode = data[p]
            if mode == 0:  # raw
                hdr, raw, p = hdr + 1, raw + n, p + 1 + n
            elif mode == 2:  # run
                hdr, p = hdr + 2, p + 2
            else:  # Huffman: table, four stream lengths, streams
                tl = 2 + (data[p + 2] + 3) // 2
                lens = sum(struct.unpack_from(lfmt, data, p + 1 + tl))
                hdr, tab, stream, p = hdr + 1 + 4 * lw, tab + tl, stream + lens, p + 1 + tl + 4 * lw + lens
    return (f"{len(data)} bytes ({'packed' if packed else 'aligned'}): container {f}, frame header 32, "
            f"index {static} ({entry * nblocks} used), "
            f"record headers {hdr}, tables {tab}, padding {end - p}; coded streams {stream}, raw planes {raw}")


def zipnn_len(t: torch.Tensor, dt: str) -> str:
    try:
        import zipnn
    except ImportError:
        return "zipnn not installed"
    z = zipnn.ZipNN(input_format="torch", bytearray_dtype=dt, threads=1)
    return f"ZipNN {len(z.compress(t.clone()))} bytes"


def main(specs: list[str]) -> None:
    cap = capture_demo(150, 0, None)
    for spec in specs:
        what, dt = spec.split(":")
        t = trim_to_chunks(cap[what])[0].to(getattr(torch, dt)).contiguous()
        packed = codec.compress(t, "huff2", threads=1)
        aligned, _ = codec._C()._codec_encode(t, 3, 1)  # ZC_CODEC_HUFF2: the aligned frame
        print(f"{what} {dt}: {overhead(t, packed)}")
        print(f"{what} {dt}: {overhead(t, aligned)}; {zipnn_len(t, dt)}")


if __name__ == "__main__":
    main(sys.argv[1:])
