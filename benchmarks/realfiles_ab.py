"""Tables the Go codec benchmark's huff2 rows (or another kind's) for two
builds run in alternation: DIR/before.N.txt and DIR/after.N.txt, each the
output of

    ZIPCCL_BENCH_FILES=... BIN -test.run X -test.bench 'RealFiles/.*/huff2/' -test.v

(BIN a `go test -c ./backend/codec` binary; the files from
benchmarks/codec_files.py; `-test.bench` may name encode or decode only;
without -test.v the bytes columns read "-"). Prints a markdown table:
frame bytes, and encode and decode MB/s as range (median) per build, with
after/before medians.

    python benchmarks/realfiles_ab.py benchmarks/results/huff2-escape
    python benchmarks/realfiles_ab.py benchmarks/results/lut-more huff2p
"""

import glob
import re
import statistics as st
import sys


def main(d: str, kind: str = "huff2") -> None:
    res: dict[tuple[str, str, str], list[float]] = {}
    sizes: dict[tuple[str, str], int] = {}
    for v in ("before", "after"):
        for f in sorted(glob.glob(f"{d}/{v}.*.txt")):
            for line in open(f):
                m = re.match(rf"BenchmarkRealFiles/(\S+)/{kind}/(encode|decode)-\d+\s+\d+\s+\d+ ns/op\s+([\d.]+) MB/s", line)
                if m:
                    res.setdefault((m[1], m[2], v), []).append(float(m[3]))
                m = re.search(rf" (\S+)/{kind}: (\d+) -> (\d+) bytes", line)
                if m:
                    sizes[(m[1], v)] = int(m[3])
    print("| data | bytes before | bytes after | encode before | encode after | medians | decode before | decode after | medians |")
    print("|---|---:|---:|---|---|---:|---|---|---:|")
    for n in sorted({k[0] for k in res}):
        row = [n] + [f"{sizes[(n, v)]:,}" if (n, v) in sizes else "-" for v in ("before", "after")]
        for op in ("encode", "decode"):
            b, a = res.get((n, op, "before")), res.get((n, op, "after"))
            if not b or not a:  # a run of one op only
                row += ["-", "-", "-"]
                continue
            row += [f"{min(b):.0f}-{max(b):.0f} ({st.median(b):.0f})",
                    f"{min(a):.0f}-{max(a):.0f} ({st.median(a):.0f})",
                    f"{st.median(a) / st.median(b):.2f}x"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
