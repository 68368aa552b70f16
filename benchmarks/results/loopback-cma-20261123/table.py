import collections, csv, os
DIR = os.path.dirname(os.path.abspath(__file__))
def load(p):
    d = collections.defaultdict(dict)
    for r in csv.DictReader(open(p)):
        d[(r["op"], r["dtype"], int(r["bytes"]))][r["backend"]] = float(r["time_us"])
    return d
runs = {k: load(f"{DIR}/loopback-4ranks-{k}.csv") for k in ["a-cma1", "b-cma1", "a-cma0", "b-cma0"]}
keys = sorted(runs["a-cma1"], key=lambda k: (k[0], k[1], k[2]))
ops = []
for k in keys:
    if (k[0], k[1]) not in ops: ops.append((k[0], k[1]))
sizes = sorted({k[2] for k in keys})
print("| op | " + " | ".join(f"{s >> 20} MiB" for s in sizes) + " |")
print("|---|" + "---|" * len(sizes))
for op, dt in ops:
    cells = []
    for s in sizes:
        def r(run):
            x = runs[run].get((op, dt, s), {})
            z = [v for b, v in x.items() if b.startswith("zipccl")]
            return z[0] / x["gloo"] if z and "gloo" in x else float("nan")
        cells.append("%.2f %.2f / %.2f %.2f" % (r("a-cma1"), r("b-cma1"), r("a-cma0"), r("b-cma0")))
    print(f"| {op} ({'bf16' if dt == 'bfloat16' else 'fp32'}) | " + " | ".join(cells) + " |")
