"""The look-back's scratch words, kept zero between calls without a fill on every call.

A look-back (PHASE 3 and 4) reads a scratch of ``1 + 3 B n_seg`` words (a ticket, then three
planes of published words, zero until published) that must be zero when it starts. A fresh
``torch.zeros`` costs a fill kernel before each scan, 1.7-2.1 us on the H200
(data/h200/ncu_look_back_rows.csv against the graph-timed call). Instead each stream keeps a
pair: a call reads one while its programs zero the words the previous call on that stream
left in the other (``clear_spare`` in affine_scan.py), so the next call finds it ready
(data/h200/links_ab.csv: 0.90-0.97x the time at most look-back shapes). Calls on one stream
run in order, so the words being zeroed are never being read.

The host tracks, per buffer, an interval that holds every word that may be nonzero; a call
whose words reach into it zeroes that interval first (shape changes only). Under CUDA-graph
capture the pair belongs to that capture (its fills are captured with it, so every replay
starts from zeros); where the capture cannot be told apart from an earlier one, or with
``PAPER_REPRO_LINK_FILL=1``, every call takes a freshly zeroed pair, as before.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading

import torch

MAX_STREAMS = 64  # pairs kept (one per device, stream and word type); beyond that, start over


class _Pair:
    """Two scratch buffers of one stream and word type, the one to read next, and for each
    the interval ``[lo, hi)`` outside which it is known to be zero."""

    __slots__ = ("buffers", "dirty", "turn", "lock")

    def __init__(self):
        self.buffers = [None, None]
        self.dirty = [(0, 0), (0, 0)]
        self.turn = 0
        self.lock = threading.Lock()

    def ready(self, which: int, n_words: int, dtype, device, zero=True) -> torch.Tensor:
        """Buffer ``which``, at least ``n_words`` long and (``zero``) zero on its first
        ``n_words``; a new spare (``zero=False``) is left unfilled, since the call zeroes it."""
        buf = self.buffers[which]
        if buf is None or buf.numel() < n_words:
            size = n_words if buf is None else max(n_words, 2 * buf.numel())
            make = torch.zeros if zero else torch.empty
            buf = self.buffers[which] = make(size, dtype=dtype, device=device)
            self.dirty[which] = (0, 0) if zero else (0, size)
        lo, hi = self.dirty[which]
        if zero and lo < min(hi, n_words):
            buf[lo:hi].zero_()
            self.dirty[which] = (0, 0)
        return buf

    def used(self, n_words: int) -> None:
        """After a call that read ``turn``'s first ``n_words`` and zeroed the other's."""
        use, spare = self.turn, 1 - self.turn
        self.dirty[use] = (0, max(self.dirty[use][1], n_words))
        lo, hi = self.dirty[spare]
        self.dirty[spare] = (max(lo, n_words), hi) if hi > n_words else (0, 0)
        self.turn = spare


_PAIRS: dict = {}
_PAIRS_LOCK = threading.Lock()


def _capture_id(stream: int):
    """The id of the capture under way on ``stream`` (a raw CUDA stream), or None where the
    driver cannot say."""
    query = _capture_query()
    if query is None:
        return None
    status, ident = ctypes.c_int(0), ctypes.c_ulonglong(0)
    if query(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(ident),
              None, None, None) != 0 or status.value != 1:  # 1: CU_STREAM_CAPTURE_STATUS_ACTIVE
        return None
    return ident.value


_QUERY: list = []


def _capture_query():
    """The driver's ``cuStreamGetCaptureInfo_v2`` (a versioned, stable symbol), or None."""
    if not _QUERY:
        try:
            fn = ctypes.CDLL("libcuda.so.1").cuStreamGetCaptureInfo_v2
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int),
                           ctypes.POINTER(ctypes.c_ulonglong), ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p]
        except (OSError, AttributeError):
            fn = None
        _QUERY.append(fn)
    return _QUERY[0]


def _key(device: torch.device, dtype) -> tuple | None:
    """Whose pair a call on ``device`` uses: its stream's (and capture's, while capturing), or
    None for a fresh pair."""
    if os.environ.get("PAPER_REPRO_LINK_FILL") == "1":
        return None
    if device.type != "cuda":
        return device.type, device.index, dtype, None, None
    stream = torch.cuda.current_stream(device).cuda_stream
    capture = None
    if torch.cuda.is_current_stream_capturing():
        capture = _capture_id(stream)
        if capture is None:
            return None
    return device.type, device.index, dtype, stream, capture


@contextlib.contextmanager
def links(device: torch.device, dtype, n_words: int):
    """``(words, spare)``: scratch whose first ``n_words`` are zero, for the look-back to read,
    and one of as many words for its programs to zero. The state moves on only if the body
    (the launch) returns."""
    key = _key(device, dtype)
    if key is None:
        start = -(-n_words // 4) * 4  # the spare 16-byte aligned too, as Triton keys it
        fresh = torch.zeros(start + n_words, dtype=dtype, device=device)
        yield fresh[:n_words], fresh[start:]
        return
    with _PAIRS_LOCK:
        pair = _PAIRS.get(key)
        if pair is None:
            if len(_PAIRS) >= MAX_STREAMS:
                _PAIRS.clear()
            if key[4] is not None:  # one capture's pair a stream: drop earlier captures'
                for old in [k for k in _PAIRS if k[:4] == key[:4] and k[4] is not None]:
                    del _PAIRS[old]
            pair = _PAIRS[key] = _Pair()
    with pair.lock:
        words = pair.ready(pair.turn, n_words, dtype, device)
        spare = pair.ready(1 - pair.turn, n_words, dtype, device, zero=False)
        yield words, spare
        pair.used(n_words)
