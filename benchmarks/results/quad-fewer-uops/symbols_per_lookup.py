"""Symbols a lookup of a W-bit multi-symbol table (up to four codes, each
wholly within the W bits, greedily) on huff2's float16 plane 0 (bits 14..7
of each element) of the files of benchmarks/codec_files.py in /tmp/codec:
the first 8 blocks of 65536 symbols each, a Huffman code of each block's
histogram with lengths clipped at 11 (an approximation of the encoder's
length-limited code). Prints file, W, mean symbols a lookup.

    python symbols_per_lookup.py
"""
import heapq

import numpy as np
for f in ["demo_weights","demo_gradients","demo_activations","minilm"]:
    a=np.fromfile(f"/tmp/codec/{f}.fp16",dtype=np.uint16)
    s=((a>>7)&0xff).astype(np.int64)
    res=[]
    for blk in range(0, min(len(s), 65536*8), 65536):
        x=s[blk:blk+65536]
        h=np.bincount(x,minlength=256).astype(float)
        # huffman lengths
        heap=[(c,i,[i]) for i,c in enumerate(h) if c>0]
        heapq.heapify(heap); L=np.zeros(256,int)
        while len(heap)>1:
            c1,i1,s1=heapq.heappop(heap); c2,i2,s2=heapq.heappop(heap)
            for q in s1+s2: L[q]+=1
            heapq.heappush(heap,(c1+c2,min(i1,i2),s1+s2))
        L=np.minimum(L,11)
        ls=L[x]
        for W in (11,12,13):
            i=0;n=len(ls);look=0
            # vectorless greedy
            cs=ls.tolist()
            while i<n:
                t=cs[i]; k=1
                while k<4 and i+k<n and t+cs[i+k]<=W: t+=cs[i+k]; k+=1
                i+=k; look+=1
            res.append((W,n/look))
    for W in (11,12,13):
        v=[r for w,r in res if w==W]; print(f, W, "%.3f"%np.mean(v))
