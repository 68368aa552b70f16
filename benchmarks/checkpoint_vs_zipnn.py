"""zipccl's checkpoint CLI functions vs ZipNN's safetensors file tools
(the steps of zipnn/zipnn scripts/zipnn_compress_safetensors.py and
zipnn_decompress_safetensors.py, 0.5.4 library: per tensor
ZipNN(input_format="torch", bytearray_dtype=tensor.dtype, method="HUFFMAN",
threads=T).compress, torch.frombuffer(uint8), safetensors save_file with the
znn metadata; decompress: safe_open, ZipNN(...).decompress(tensor.numpy()),
save_file). Same input file, alternating, best of N rounds, wall clock
in-process (no interpreter start-up).

    python benchmarks/checkpoint_vs_zipnn.py FILE.safetensors [ROUNDS]

Needs zipnn (pip install zipnn==0.5.4) and safetensors."""
import os, sys, tempfile, time, hashlib, warnings
warnings.simplefilter("ignore")
import torch
import zipccl.checkpoint as ck

def zipnn_compress(src, dst, threads):
    from safetensors import safe_open
    from safetensors.torch import save_file
    from zipnn import ZipNN
    from zipnn.util_header import EnumFormat
    from zipnn.util_torch import zipnn_is_floating_point
    from zipnn.util_safetensors import build_compressed_tensor_info, set_compressed_tensors_metadata, COMPRESSED_DTYPE, COMPRESSION_METHOD
    tensors, infos = {}, {}
    with safe_open(src, "pt", "cpu") as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            if not zipnn_is_floating_point(EnumFormat.TORCH.value, tensor, tensor.dtype):
                tensors[name] = tensor
                continue
            info = build_compressed_tensor_info(tensor)
            znn = ZipNN(input_format="torch", bytearray_dtype=tensor.dtype, method=COMPRESSION_METHOD, threads=threads)
            n = tensor.element_size() * tensor.nelement()
            buf = znn.compress(tensor)
            if len(buf) >= n:
                tensors[name] = tensor
                continue
            tensors[name] = torch.frombuffer(buf, dtype=COMPRESSED_DTYPE)
            infos[name] = info
        metadata = f.metadata()
    set_compressed_tensors_metadata(infos, metadata)
    save_file(tensors, dst, metadata)

def zipnn_decompress(src, dst, threads):
    from safetensors import safe_open
    from safetensors.torch import save_file
    from zipnn import ZipNN
    from zipnn.util_safetensors import get_compressed_tensors_metadata, COMPRESSED_DTYPE, COMPRESSION_METHOD
    tensors = {}
    with safe_open(src, "pt", "cpu") as f:
        D = get_compressed_tensors_metadata(f.metadata())
        znn = ZipNN(input_format="torch", bytearray_dtype=COMPRESSED_DTYPE, method=COMPRESSION_METHOD, threads=threads)
        for name in f.keys():
            tensor = f.get_tensor(name)
            if name not in D:
                tensors[name] = tensor
                continue
            tensors[name] = znn.decompress(tensor.contiguous().numpy())
        metadata = f.metadata()
        if metadata:
            metadata.pop("znn_compressed_vectors", None)
    save_file(tensors, dst, metadata)

def sha(p):
    return hashlib.sha256(open(p, 'rb').read()).hexdigest()[:16]

def main(src, rounds=3):
    from safetensors.torch import load_file
    work = tempfile.mkdtemp(prefix="zipccl-ckpt-")
    ref = load_file(src)
    cands = [
        ("zipccl, --threads 1", lambda a, b: ck.compress_file(a, b, threads=1, force=True, progress=False),
         lambda a, b: ck.decompress_file(a, b, threads=1, force=True, progress=False)),
        ("zipccl, --threads 2", lambda a, b: ck.compress_file(a, b, threads=2, force=True, progress=False),
         lambda a, b: ck.decompress_file(a, b, threads=2, force=True, progress=False)),
        ("ZipNN scripts, threads=1", lambda a, b: zipnn_compress(a, b, 1), lambda a, b: zipnn_decompress(a, b, 1)),
        ("ZipNN scripts, default threads", lambda a, b: zipnn_compress(a, b, None), lambda a, b: zipnn_decompress(a, b, None)),
    ]
    best = {c[0]: [1e9, 1e9, 0, None] for c in cands}
    cpu = {}
    insize = os.path.getsize(src)
    for r in range(rounds):
        for label, comp, decomp in cands:
            z = os.path.join(work, "c.bin"); o = os.path.join(work, "o.safetensors")
            c0 = time.process_time(); t0 = time.perf_counter(); comp(src, z); t1 = time.perf_counter(); c1 = time.process_time()
            decomp(z, o); t2 = time.perf_counter(); c2 = time.process_time()
            b = best[label]
            b[0], b[1], b[2] = min(b[0], t1 - t0), min(b[1], t2 - t1), os.path.getsize(z)
            cpu.setdefault(label, [1e9, 1e9])
            cpu[label] = [min(cpu[label][0], c1 - c0), min(cpu[label][1], c2 - c1)]
            got = load_file(o)
            ok = set(got) == set(ref) and all(got[k].dtype == ref[k].dtype and got[k].shape == ref[k].shape and torch.equal(got[k].view(-1).view(torch.uint8), ref[k].view(-1).view(torch.uint8)) for k in ref)
            b[3] = f"tensors bit-exact: {ok}; file identical: {sha(o) == sha(src)}"
    print(f"input {src}: {insize} bytes; best of {rounds} alternating rounds, wall clock in-process (fsync included for zipccl)")
    print("| tool | compressed bytes | ratio | compress s (CPU s) | decompress s (CPU s) | check |")
    print("|---|---|---|---|---|---|")
    for label, (tc, td, size, chk) in best.items():
        cc, cd = cpu[label]
        print(f"| {label} | {size} | {insize/size:.4f} | {tc:.3f} ({cc:.3f}) | {td:.3f} ({cd:.3f}) | {chk} |")

if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3)
