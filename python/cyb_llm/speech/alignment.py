"""Whisper word timestamps (docs/whisper.md, "Word timestamps"), as faster-whisper computes them:
the cross-attention of the alignment heads over a window's text, standardized and median-filtered
(`alignment_matrix`), the monotonic path through it (`negative_dtw`), the tokens grouped into
words (`split_to_word_tokens`), the punctuation merged into its word, and faster-whisper's timing
rules for long words and pauses (`add_word_timestamps`).
"""
from __future__ import annotations

import string
from typing import Any, Optional, Sequence

import numpy as np

from .common import (FRAMES_PER_SECOND, HOP_LENGTH, INPUT_STRIDE, SAMPLE_RATE, WhisperRuntime, WhisperTokens,
                     log_softmax)

PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
TOKENS_PER_SECOND = SAMPLE_RATE // (HOP_LENGTH * INPUT_STRIDE)   # 50 encoder positions a second
MEDIAN_FILTER_WIDTH = 7
_NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


def median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over a window of `width` (odd) along the last axis, the edges reflected without
    repeating the edge value (x[1], x[0], x[1], ...). Rows no longer than width // 2 come back
    unchanged."""
    x = np.asarray(x)
    r = width // 2
    n = x.shape[-1]
    if r == 0 or n <= r:
        return x.copy()
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(r, r)], mode="reflect")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.median(windows, axis=-1).astype(x.dtype)


def negative_dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The monotonic path through x [n, m] (float32) that maximizes the summed values: the
    (row, column) pairs from (0, 0) to (n-1, m-1). float32 costs; a step takes the diagonal when
    it is strictly cheapest, else the vertical one when strictly cheapest, else the horizontal
    one. Computed along anti-diagonals (every cell of one depends only on the two before)."""
    x = np.asarray(x, dtype=np.float32)
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    cost[0, 0] = 0
    for k in range(2, n + m + 1):          # cells (i, j) with i + j = k, 1 <= i <= n, 1 <= j <= m
        i = np.arange(max(1, k - m), min(n, k - 1) + 1)
        j = k - i
        c0 = cost[i - 1, j - 1]
        c1 = cost[i - 1, j]
        c2 = cost[i, j - 1]
        t = np.where((c0 < c1) & (c0 < c2), 0, np.where((c1 < c0) & (c1 < c2), 1, 2)).astype(np.int8)
        c = np.where(t == 0, c0, np.where(t == 1, c1, c2))
        cost[i, j] = -x[i - 1, j - 1] + c
        trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    rows: list[int] = []
    cols: list[int] = []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        t = trace[i, j]
        if t == 0:
            i -= 1
            j -= 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return np.array(rows[::-1], dtype=np.int64), np.array(cols[::-1], dtype=np.int64)


def _decode_text(tok: WhisperTokens, tokens: Sequence[int]) -> str:
    return tok.decode([t for t in tokens if t < tok.eot])


def split_tokens_on_unicode(tok: WhisperTokens, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
    """Cuts `tokens` where the decoded text is whole characters (no U+FFFD from a split UTF-8
    sequence, unless the full text has one there)."""
    full = _decode_text(tok, tokens)
    words: list[str] = []
    word_tokens: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for t in tokens:
        current.append(int(t))
        decoded = _decode_text(tok, current)
        bad = decoded.find("\ufffd")
        if bad < 0 or (bad + offset < len(full) and full[bad + offset] == "\ufffd"):
            words.append(decoded)
            word_tokens.append(current)
            current = []
            offset += len(decoded)
    return words, word_tokens


def split_tokens_on_spaces(tok: WhisperTokens, tokens: Sequence[int]) -> tuple[list[str], list[list[int]]]:
    """Whole-character pieces joined into words: a piece starts a word when it is a special
    token, starts with a space or is punctuation."""
    words: list[str] = []
    word_tokens: list[list[int]] = []
    for sub, sub_tokens in zip(*split_tokens_on_unicode(tok, tokens)):
        special = sub_tokens[0] >= tok.eot
        # `in string.punctuation` is a substring test (the empty text of a special token is in it)
        if special or sub.startswith(" ") or sub.strip() in string.punctuation or not words:
            words.append(sub)
            word_tokens.append(list(sub_tokens))
        else:
            words[-1] += sub
            word_tokens[-1].extend(sub_tokens)
    return words, word_tokens


def split_to_word_tokens(tok: WhisperTokens, tokens: Sequence[int], language: Optional[str]
                         ) -> tuple[list[str], list[list[int]]]:
    if language in _NO_SPACE_LANGUAGES:
        return split_tokens_on_unicode(tok, tokens)
    return split_tokens_on_spaces(tok, tokens)


def alignment_matrix(attn: np.ndarray, sot_len: int, n_text: int,
                     median_filter_width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """attn float32 [heads, tokens, frames] (the probabilities over the window's frames) ->
    the DTW input [n_text + 1, frames]: each head and frame standardized over the token axis
    (mean 0, variance 1; no epsilon), median-filtered along the frames, averaged over the
    heads, the rows of the positions that predict the text tokens and the end token."""
    w = np.asarray(attn, dtype=np.float32)
    n = np.float32(w.shape[1])
    mean = w.sum(axis=1, keepdims=True, dtype=np.float32) / n
    var = np.maximum((w * w).sum(axis=1, keepdims=True, dtype=np.float32) / n - mean * mean, np.float32(0))
    with np.errstate(divide="ignore", invalid="ignore"):
        w = (w - mean) * (np.float32(1) / np.sqrt(var))
    w = median_filter(w, median_filter_width)
    w = w.mean(axis=0, dtype=np.float32)
    return np.ascontiguousarray(w[sot_len:sot_len + n_text + 1])


def find_alignment(runtime: WhisperRuntime, tok: WhisperTokens, encoder_output: Any, sot_sequence: Sequence[int],
                   text_tokens: Sequence[int], num_frames: int, heads: Sequence[Sequence[int]],
                   language: Optional[str], median_filter_width: int = MEDIAN_FILTER_WIDTH) -> list[dict]:
    """The words of `text_tokens` with their start / end (seconds from the window start) and
    probability (mean of the tokens' probabilities among the text tokens)."""
    text = [int(t) for t in text_tokens]
    frames = num_frames // INPUT_STRIDE
    if frames == 0:
        return []
    seq = list(sot_sequence) + [tok.no_timestamps] + text + [tok.eot]
    logits, attn = runtime.cross_attention(encoder_output, seq, [tuple(h) for h in heads], frames)
    logits = np.asarray(logits, dtype=np.float32)
    off = len(sot_sequence)
    text_logits = logits[off:off + len(text), :tok.eot]
    probs = np.exp(log_softmax(text_logits))
    token_probs = [float(probs[i, t]) for i, t in enumerate(text)]
    matrix = alignment_matrix(np.asarray(attn, dtype=np.float32), len(sot_sequence), len(text),
                              median_filter_width)
    text_idx, time_idx = negative_dtw(matrix)
    words, word_tokens = split_to_word_tokens(tok, text + [tok.eot], language)
    if len(word_tokens) <= 1:
        return []
    bounds = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts = jump_times[bounds[:-1]]
    ends = jump_times[bounds[1:]]
    out = []
    for w, wt, s, e, i, j in zip(words, word_tokens, starts, ends, bounds[:-1], bounds[1:]):
        out.append(dict(word=w, tokens=wt, start=s, end=e, probability=float(np.mean(token_probs[i:j]))))
    return out


def merge_punctuations(alignment: list[dict], prepended: str, appended: str) -> None:
    """Prepended marks (a separate word starting with a space) join the next word, appended
    marks join the previous one; the emptied entries stay with word "" and no tokens."""
    i, j = len(alignment) - 2, len(alignment) - 1
    while i >= 0:
        prev, foll = alignment[i], alignment[j]
        if prev["word"].startswith(" ") and prev["word"].strip() in prepended:
            foll["word"] = prev["word"] + foll["word"]
            foll["tokens"] = prev["tokens"] + foll["tokens"]
            prev["word"], prev["tokens"] = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(alignment):
        prev, foll = alignment[i], alignment[j]
        if not prev["word"].endswith(" ") and foll["word"] in appended:
            prev["word"] = prev["word"] + foll["word"]
            prev["tokens"] = prev["tokens"] + foll["tokens"]
            foll["word"], foll["tokens"] = "", []
        else:
            i = j
        j += 1


def add_word_timestamps(runtime: WhisperRuntime, tok: WhisperTokens, segments: list[dict], encoder_output: Any,
                        sot_sequence: Sequence[int], num_frames: int, heads: Sequence[Sequence[int]],
                        language: Optional[str], prepend_punctuations: str, append_punctuations: str,
                        last_speech_timestamp: float, median_filter_width: int = MEDIAN_FILTER_WIDTH) -> float:
    """Gives every segment of one window (split_segments_by_timestamps) its "words"
    [{"word", "start", "end", "probability"}] (seconds, rounded to 0.01) and moves the segment's
    start / end to its first / last word unless that word is implausibly long. Returns the end
    of the last segment with words (else `last_speech_timestamp`)."""
    if not segments:
        return last_speech_timestamp
    per_segment = [[t for t in s["tokens"] if t < tok.eot] for s in segments]
    text = [t for ts in per_segment for t in ts]
    alignment = find_alignment(runtime, tok, encoder_output, sot_sequence, text, num_frames, heads, language,
                               median_filter_width)
    durations = np.array([w["end"] - w["start"] for w in alignment])
    durations = durations[durations.nonzero()]
    median = min(0.7, float(np.median(durations) if len(durations) > 0 else 0.0))
    max_duration = median * 2
    if len(durations) > 0:   # words at sentence boundaries no longer than twice the median
        ends = ".。!！?？"
        for i in range(1, len(alignment)):
            if alignment[i]["end"] - alignment[i]["start"] > max_duration:
                if alignment[i]["word"] in ends:
                    alignment[i]["end"] = alignment[i]["start"] + max_duration
                elif alignment[i - 1]["word"] in ends:
                    alignment[i]["start"] = alignment[i]["end"] - max_duration
    merge_punctuations(alignment, prepend_punctuations, append_punctuations)
    time_offset = segments[0]["seek"] / FRAMES_PER_SECOND
    k = 0
    for seg, seg_tokens in zip(segments, per_segment):
        saved = 0
        words: list[dict] = []
        while k < len(alignment) and saved < len(seg_tokens):
            timing = alignment[k]
            if timing["word"]:
                words.append(dict(word=timing["word"], start=round(time_offset + timing["start"], 2),
                                  end=round(time_offset + timing["end"], 2), probability=timing["probability"]))
            saved += len(timing["tokens"])
            k += 1
        if words:
            # the first and second word after a pause no longer than twice the median
            if words[0]["end"] - last_speech_timestamp > median * 4 and (
                    words[0]["end"] - words[0]["start"] > max_duration
                    or (len(words) > 1 and words[1]["end"] - words[0]["start"] > max_duration * 2)):
                if len(words) > 1 and words[1]["end"] - words[1]["start"] > max_duration:
                    boundary = max(words[1]["end"] / 2, words[1]["end"] - max_duration)
                    words[0]["end"] = words[1]["start"] = boundary
                words[0]["start"] = max(0, words[0]["end"] - max_duration)
            # the segment's start when the first word is too long, else the first word's start
            if seg["start"] < words[0]["end"] and seg["start"] - 0.5 > words[0]["start"]:
                words[0]["start"] = max(0, min(words[0]["end"] - median, seg["start"]))
            else:
                seg["start"] = words[0]["start"]
            # the segment's end when the last word is too long, else the last word's end
            if seg["end"] > words[-1]["start"] and seg["end"] + 0.5 < words[-1]["end"]:
                words[-1]["end"] = max(words[-1]["start"] + median, seg["end"])
            else:
                seg["end"] = words[-1]["end"]
            last_speech_timestamp = seg["end"]
        seg["words"] = words
    return last_speech_timestamp


def words_end(segments: list[dict]) -> Optional[float]:
    """The end of the last word of `segments`, else the last segment's end (None: no segment)."""
    return next((w["end"] for s in reversed(segments) for w in reversed(s.get("words") or [])),
                segments[-1]["end"] if segments else None)


__all__ = ["PREPEND_PUNCTUATIONS", "APPEND_PUNCTUATIONS", "TOKENS_PER_SECOND", "MEDIAN_FILTER_WIDTH", "median_filter",
           "negative_dtw", "split_tokens_on_unicode", "split_tokens_on_spaces", "split_to_word_tokens",
           "alignment_matrix", "find_alignment", "merge_punctuations", "add_word_timestamps", "words_end"]
