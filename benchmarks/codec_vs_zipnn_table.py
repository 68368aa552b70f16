"""The RESULTS.md table of zipccl's `auto` against ZipNN from one or more
CSVs of `python -m zipccl bench codec --csv PATH` (runs of the same
command): per tensor, the ratios of both, then zipccl's wall GB/s over
ZipNN's for encode and decode on one thread each and on each one's default
threads; with several CSVs each cell is the range over them.

    python benchmarks/codec_vs_zipnn_table.py benchmarks/results/codec-vs-zipnn-o6-*.csv
"""

import csv
import sys

ORDER = ("minilm weights", "demo weights", "demo gradients", "demo activations")
SHORT = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def load(path: str) -> dict[tuple[str, str, str, str], dict[str, str]]:
    return {(r["data"], r["dtype"], r["name"], r["op"]): r
            for r in csv.DictReader(open(path)) if r["op"].startswith("api ")}


def cell(vals: list[float], fmt: str) -> str:
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if fmt.format(lo) == fmt.format(hi) else fmt.format(lo) + "-" + fmt.format(hi)


def main(paths: list[str]) -> None:
    runs = [load(p) for p in paths]
    keys = sorted({(k[0], k[1]) for k in runs[0]}, key=lambda k: (ORDER.index(k[0]), list(SHORT).index(k[1])))
    print("| data | dtype | ratio zipccl / ZipNN | encode, 1 thread each | decode, 1 thread each "
          "| encode, defaults | decode, defaults |")
    print("|---|---|---|---|---|---|---|")
    for data, dt in keys:
        r0 = runs[0]
        ratio = f"{float(r0[(data, dt, 'zipccl auto t=1', 'api encode')]['ratio']):.4f} / " \
                f"{float(r0[(data, dt, 'ZipNN t=1', 'api encode')]['ratio']):.4f}"
        cells = [data.replace(" weights", " weights").capitalize() if data.startswith("minilm") else data,
                 SHORT[dt], ratio]
        for ours, theirs in (("zipccl auto t=1", "ZipNN t=1"), ("zipccl auto t=default<=2", "ZipNN t=2")):
            for op in ("api encode", "api decode"):
                v = [float(r[(data, dt, ours, op)]["gbps"]) / float(r[(data, dt, theirs, op)]["gbps"]) for r in runs]
                cells.append(cell(v, "{:.2f}") + "x")
        cells[0] = "MiniLM weights" if data == "minilm weights" else data
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
