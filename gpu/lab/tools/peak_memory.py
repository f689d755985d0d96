"""Peak memory of one timed arm of ``ridgefill bench``: the CPU's resident set sampled in a
thread, or the CUDA allocator's peak."""
from __future__ import annotations

import ctypes
import threading
import time

import torch


class PeakMemory:
    """Peak resident memory over the baseline (CPU: RSS sampled every 2 ms, after glibc hands
    the memory freed by earlier arms back to the system, so that an arm is not charged or
    credited for its predecessor's heap; CUDA: the allocator's peak)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            _trim()
            self.base, self.peak, self.stop = self.rss(), self.rss(), False
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def _poll(self):
        while not self.stop:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.extra = torch.cuda.max_memory_allocated() - self.base
        else:
            self.stop = True
            self.thread.join()
            self.extra = max(self.peak, self.rss()) - self.base


def _trim() -> None:
    """``malloc_trim(0)``: return freed heap pages to the system (glibc; a no-op elsewhere)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
