"""The demo: a small GPT trained on 4 ranks with gloo and with zipccl, DDP
then FSDP2, over shaped links (``python -m zipccl demo``, ``make demo``);
with ``--lossy``, zipccl's lossy collectives against lossless zipccl and
gloo: FSDP2 with ZeRO++, or tensor parallelism with fp8.

cli.py drives it, train.py is one rank, model.py and corpus.py are the model
and its offline text, report.py the table, checks and plot.
"""
