"""``python -m zipccl codec compress|decompress`` (zipccl.checkpoint): round
trips of safetensors and torch.save files, bit for bit; corrupt and
truncated input; no partial output left behind."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from collections import OrderedDict

import pytest
import torch

import zipccl.checkpoint as ck
import zipccl.codec as zc

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous().reshape(-1)
    return t.view(torch.uint8) if t.numel() else t


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(300, 700, generator=g) * 0.02
    return {
        "emb.weight": w.bfloat16(),
        "fc.weight": (torch.randn(512, 512, generator=g) * 0.05),
        "fc.bias": torch.zeros(512, dtype=torch.float16),
        "ln.weight": torch.ones(64, dtype=torch.float16),
        "pos_ids": torch.arange(128, dtype=torch.int64).reshape(1, 128),
        "mask": torch.rand(7, 9, generator=g) > 0.5,
        "fp8": (torch.randn(1000, generator=g) * 0.1).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(3.5, dtype=torch.float32),
        "empty": torch.zeros(0, 5, dtype=torch.bfloat16),
        "big": (torch.randn(3 << 20, generator=g) * 0.01).bfloat16(),  # past the 4 MiB huge-page line
    }


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(zc.__file__)))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "zipccl", "codec", *args], capture_output=True, text=True,
                          timeout=300, env=env)


def test_safetensors_round_trip_is_byte_identical(tmp_path):
    from safetensors.torch import load_file, save_file

    src, z, back = tmp_path / "m.safetensors", tmp_path / "m.zcc", tmp_path / "back.safetensors"
    tensors = state()
    # U16 has no codec dtype: stored as bytes
    tensors["u16"] = torch.arange(1000, dtype=torch.int32).to(torch.uint16)
    save_file(tensors, str(src), metadata={"format": "pt", "note": "x"})
    p = run_cli("compress", str(src), str(z))
    assert p.returncode == 0, p.stderr
    assert "ratio" in p.stdout and "compress m.safetensors" in p.stderr  # summary, progress bar
    assert os.path.getsize(z) < os.path.getsize(src)
    p = run_cli("decompress", str(z), str(back))
    assert p.returncode == 0, p.stderr
    assert src.read_bytes() == back.read_bytes()
    got = load_file(str(back))
    assert set(got) == set(tensors)
    for k, v in tensors.items():
        assert same(got[k], v), k
    assert not list(tmp_path.glob("*.tmp"))


def test_torch_save_round_trip_keeps_structure(tmp_path):
    sd = OrderedDict(state())
    sd._metadata = {"": {"version": 2}}  # type: ignore[attr-defined]  # as state_dict() sets it
    tied = torch.randn(64, 32)
    obj = {
        "model": sd,
        "optimizer": {"state": {0: {"step": torch.tensor(10.0), "exp_avg": torch.randn(100, 3)}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0]}]},
        "epoch": 7,
        "name": "run-1",
        "nothing": None,
        "tied": [tied, tied],  # one storage: stored once, shared again
        "param": torch.nn.Parameter(torch.randn(5, 5)),
        "frozen": torch.nn.Parameter(torch.randn(2, 2), requires_grad=False),
        "strided": torch.randn(40, 30)[:, ::3],  # comes back contiguous, same values
        "on_meta": torch.empty(4, 4, device="meta"),
        "c64": torch.randn(10, dtype=torch.complex64),  # no codec dtype: bytes
    }
    src, z, back = tmp_path / "ckpt.pt", tmp_path / "ckpt.zcc", tmp_path / "back.pt"
    torch.save(obj, src)
    st = ck.compress_file(str(src), str(z), threads=2, progress=False)
    assert st.source == "torch" and st.tensors == len(sd) + 8  # the meta tensor is not listed
    ck.decompress_file(str(z), str(back), progress=False)
    got = torch.load(back, weights_only=True)
    assert list(got) == list(obj)
    assert type(got["model"]) is OrderedDict and got["model"]._metadata == {"": {"version": 2}}
    assert list(got["model"]) == list(sd)
    for k, v in sd.items():
        assert same(got["model"][k], v), k
    o = got["optimizer"]
    assert same(o["state"][0]["exp_avg"], obj["optimizer"]["state"][0]["exp_avg"])
    assert 0 in o["state"] and o["param_groups"] == obj["optimizer"]["param_groups"]
    assert got["epoch"] == 7 and got["name"] == "run-1" and got["nothing"] is None
    assert same(got["tied"][0], tied) and got["tied"][0].data_ptr() == got["tied"][1].data_ptr()
    assert isinstance(got["param"], torch.nn.Parameter) and got["param"].requires_grad
    assert same(got["param"].detach(), obj["param"].detach())
    assert isinstance(got["frozen"], torch.nn.Parameter) and not got["frozen"].requires_grad
    assert same(got["strided"], obj["strided"])
    assert got["on_meta"].device.type == "meta" and got["on_meta"].shape == (4, 4)
    assert same(got["c64"], obj["c64"])


def test_codec_option_and_threads_give_the_same_tensors(tmp_path):
    from safetensors.torch import save_file

    src = tmp_path / "m.safetensors"
    save_file(state(1), str(src))
    outs = []
    for codec, threads in (("zip3", 1), ("huff", 3), ("raw", 2)):
        z = tmp_path / f"m.{codec}.zcc"
        st = ck.compress_file(str(src), str(z), codec=codec, threads=threads, progress=False)
        assert codec in st.codecs, st.codecs
        back = tmp_path / f"back.{codec}"
        ck.decompress_file(str(z), str(back), progress=False)
        outs.append(back.read_bytes())
    assert outs[0] == outs[1] == outs[2] == src.read_bytes()


@pytest.fixture
def compressed(tmp_path):
    from safetensors.torch import save_file

    src, z = tmp_path / "m.safetensors", tmp_path / "m.zcc"
    save_file(state(2), str(src))
    ck.compress_file(str(src), str(z), progress=False)
    return z


def _fails_cleanly(tmp_path, data: bytes, match: str) -> None:
    bad, out = tmp_path / "bad.zcc", tmp_path / "out.safetensors"
    bad.write_bytes(data)
    with pytest.raises(ValueError, match=match):
        ck.decompress_file(str(bad), str(out), progress=False)
    assert not out.exists() and not (tmp_path / "out.safetensors.tmp").exists()


def test_truncated_input_is_refused(tmp_path, compressed):
    data = compressed.read_bytes()
    for cut in (0, 10, 40, len(data) // 2, len(data) - 1):
        _fails_cleanly(tmp_path, data[:cut], "truncated|empty")


def test_corrupt_input_is_refused(tmp_path, compressed):
    data = bytearray(compressed.read_bytes())
    (off,) = struct.unpack("<Q", data[-24:-16])
    index = json.loads(zlib.decompress(data[off:-24]))
    big = max(index["tensors"], key=lambda e: e.get("length", 0))
    for pos, match in ((0, "not a zipccl"), (off + 5, "corrupt index"), (len(data) - 2, "end marker"),
                       (big["offset"] + big["length"] // 2, big["name"]), (big["offset"] + 3, big["name"])):
        d = bytearray(data)
        d[pos] ^= 0x40
        _fails_cleanly(tmp_path, bytes(d), match)


def test_cli_errors_and_no_partial_output(tmp_path, compressed):
    out = tmp_path / "out.safetensors"
    bad = tmp_path / "bad.zcc"
    bad.write_bytes(compressed.read_bytes()[:-100])
    p = run_cli("decompress", str(bad), str(out))
    assert p.returncode == 1 and "truncated" in p.stderr, p.stderr
    assert not out.exists() and not list(tmp_path.glob("*.tmp"))
    # a file neither safetensors nor torch.save
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"hello world" * 100)
    p = run_cli("compress", str(junk), str(tmp_path / "junk.zcc"))
    assert p.returncode == 1 and "not a readable safetensors or torch.save file" in p.stderr, p.stderr
    assert not (tmp_path / "junk.zcc").exists()
    # a truncated safetensors input
    st = tmp_path / "cut.safetensors"
    from safetensors.torch import save_file

    save_file(state(3), str(st))
    st.write_bytes(st.read_bytes()[:-1000])
    p = run_cli("compress", str(st), str(tmp_path / "cut.zcc"))
    assert p.returncode == 1 and "truncated" in p.stderr, p.stderr
    # an existing output needs --force
    good = tmp_path / "good.safetensors"
    good.write_bytes(b"keep me")
    p = run_cli("decompress", str(compressed), str(good), "--quiet")
    assert p.returncode == 1 and "--force" in p.stderr
    assert good.read_bytes() == b"keep me"
    p = run_cli("decompress", str(compressed), str(good), "--quiet", "--force")
    assert p.returncode == 0 and p.stdout == "" and good.read_bytes() != b"keep me"
