"""A progress bar: tqdm when it is installed, else a small one of our own,
so the benchmark needs nothing beyond torch and matplotlib."""

from __future__ import annotations

import sys
import time
from typing import Any


class _SimpleBar:
    """Redraws one line on a terminal; prints a line per 10% otherwise (CI
    logs)."""

    def __init__(self, total: int, desc: str) -> None:
        self.total = max(1, total)
        self.desc = desc
        self.n = 0
        self.label = ""
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()
        self._last_decile = -1
        self._draw()

    def _draw(self) -> None:
        frac = self.n / self.total
        elapsed = time.monotonic() - self.start
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        width = 30
        bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
        line = f"{self.desc} [{bar}] {self.n}/{self.total} {elapsed:5.0f}s<{eta:4.0f}s {self.label}"
        if self.tty:
            sys.stderr.write("\r" + line[:120].ljust(120))
            sys.stderr.flush()
        elif int(frac * 10) != self._last_decile:
            self._last_decile = int(frac * 10)
            print(line, file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def set_postfix_str(self, text: str) -> None:
        self.label = text
        if self.tty:
            self._draw()

    def write(self, text: str) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * 120 + "\r")
        print(text, flush=True)
        if self.tty:
            self._draw()

    def close(self) -> None:
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def progress_bar(total: int, desc: str) -> Any:
    """An object with update(n), set_postfix_str(s), write(s) and close()."""
    try:
        from tqdm import tqdm  # type: ignore[import-not-found]
    except ImportError:
        return _SimpleBar(total, desc)

    bar = tqdm(total=total, desc=desc, unit="case", dynamic_ncols=True)
    bar.write = tqdm.write  # type: ignore[method-assign]
    return bar
