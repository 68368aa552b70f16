"""Medians and bests per tensor of ab.sh's log: python table.py ab.log"""
import collections
import statistics as st
import sys

d = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[1] not in d:
        order.append(f[1])
    d[f[1]][f[0]].append(float(f[5]))
print("| tensor | median before MB/s | median after | after / before | best before | best after | after / before |")
print("|---|---|---|---|---|---|---|")
for k in order:
    (a, va), (b, vb) = d[k].items()
    ma, mb, ba, bb = st.median(va), st.median(vb), max(va), max(vb)
    print(f"| {k.split('/')[1]} | {ma:.0f} | {mb:.0f} | {mb / ma:.2f}x | {ba:.0f} | {bb:.0f} | {bb / ba:.2f}x |")
