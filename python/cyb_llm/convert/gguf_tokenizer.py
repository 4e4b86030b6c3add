"""Build a complete HF `tokenizer.json` from the tokenizer metadata of a GGUF file.

A GGUF file has no tokenizer.json: it stores the vocabulary (`tokenizer.ggml.tokens`), the token
types, the scores or merges, the special-token ids and the *name* of the pre-tokenizer
(`tokenizer.ggml.pre`). This module turns that into the tokenizer the original checkpoint shipped,
so that token ids equal the reference tokenizer's. docs/tokenizers.md describes every supported
pre-tokenizer and the rules used here.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ..errors import TokenizerError

# GGUF token types (llama.cpp's llama_token_type).
TOKEN_NORMAL = 1
TOKEN_UNKNOWN = 2
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5
TOKEN_BYTE = 6

# Pre-tokenizer regexes, by `tokenizer.ggml.pre` name (docs/tokenizers.md).
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# llama.cpp's fallback for a byte-level vocabulary whose pre-tokenizer is "default": four
# regexes applied one after the other, each splitting the pieces the previous one produced.
DEFAULT_BPE_SPLITS = (
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
)

BPE_PRE_TOKENIZERS = ("smollm", "qwen2", "deepseek-r1-qwen", "llama-bpe", "llama3", "gpt2", "default")
IGNORE_MERGES_PRE = ("llama-bpe", "llama3")

# Token texts that end a turn in the chat formats we know (besides the file's EOS/EOT ids).
END_OF_TURN_TEXTS = (
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end_of_text|>", "<|eom_id|>",
    "<end_of_turn>", "<|end|>", "<|return|>", "</s>",
)

GEMMA_FAMILY = ("gemma", "gemma2", "gemma3")


def bytes_to_unicode() -> dict[int, str]:
    """The byte -> printable character table of byte-level BPE (GPT-2): printable Latin-1 bytes map
    to themselves, every other byte to a character from U+0100 upwards, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table: dict[int, str] = {}
    extra = 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_CHARS = bytes_to_unicode()
_CHAR_BYTES = {c: b for b, c in _BYTE_CHARS.items()}


def byte_level_decode(token: str) -> str | None:
    """The text a byte-level token spells, or None when it is not written in the byte alphabet."""
    if not all(c in _CHAR_BYTES for c in token):
        return None
    try:
        return bytes(_CHAR_BYTES[c] for c in token).decode("utf-8")
    except UnicodeDecodeError:
        return None


def _component(setup) -> dict:
    """Serialize one pipeline component by setting it on a throwaway tokenizer."""
    t = Tokenizer(models.BPE({"a": 0}, []))
    setup(t)
    return json.loads(t.to_str())


@dataclass
class GGUFTokenizerInfo:
    """What the importer writes: the tokenizer.json, the [tokenizer] config table and the vocab."""

    tokenizer_json: str
    config: dict[str, Any]
    vocab: dict[str, Any]
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos/eos/unk/pad -> text


def vocab_section(tokens, merges=None, scores=None, types=None, special=None) -> dict[str, Any]:
    """The cyb `~~~vocab` section: `[tokens]` id = "text", `[merges]` rank = [left, right],
    and the optional `[scores]`, `[types]` (GGUF token types) and `[special]` (name = id)."""
    v: dict[str, Any] = {"tokens": {str(i): t for i, t in enumerate(tokens)}}
    if merges:
        v["merges"] = {str(i): list(m) for i, m in enumerate(merges)}
    if scores is not None:
        v["scores"] = {str(i): float(x) for i, x in enumerate(scores)}
    if types is not None:
        v["types"] = {str(i): int(x) for i, x in enumerate(types)}
    if special:
        v["special"] = dict(special)
    return v


def _generated_merges(tokens: list[str], rank_score: list[float]) -> list[list[str]]:
    """Merges implied by a SentencePiece BPE vocabulary: every split of a piece into two pieces that
    are both in the vocabulary, ranked best first by the score of the merged piece (SentencePiece
    merges the pair whose result scores highest), then longer left part, then longer right part."""
    index = {}
    for i, t in enumerate(tokens):
        index.setdefault(t, i)
    cands = []
    for i, piece in enumerate(tokens):
        if index.get(piece) != i or len(piece) < 2:
            continue
        local = []
        for k in range(1, len(piece)):
            left, right = piece[:k], piece[k:]
            li, ri = index.get(left), index.get(right)
            if li is not None and ri is not None:
                local.append((li, ri, left, right))
        local.sort()
        score = rank_score[i]
        for li, ri, left, right in local:
            cands.append((-score, -len(left), -len(right), len(cands), left, right))
    cands.sort()
    return [[c[4], c[5]] for c in cands]


def _eos_ids(tokens: list[str], types: list[int], meta: dict) -> list[int]:
    ids: list[int] = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"):
        v = meta.get(key)
        if v is not None and int(v) not in ids and 0 <= int(v) < len(tokens):
            ids.append(int(v))
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty == TOKEN_CONTROL and t in END_OF_TURN_TEXTS and i not in ids:
            ids.append(i)
    return ids


def build_from_gguf(meta: dict, arch: str) -> GGUFTokenizerInfo:
    """Build the tokenizer from GGUF metadata (`meta`: key -> decoded value)."""
    model = meta.get("tokenizer.ggml.model")
    tokens = meta.get("tokenizer.ggml.tokens")
    if model is None or tokens is None:
        raise TokenizerError("GGUF file has no tokenizer (tokenizer.ggml.model / tokenizer.ggml.tokens missing)")
    tokens = list(tokens)
    n = len(tokens)
    types = [int(t) for t in meta.get("tokenizer.ggml.token_type", [TOKEN_NORMAL] * n)]
    scores = meta.get("tokenizer.ggml.scores")
    scores = [float(s) for s in scores] if scores is not None else None
    merges_raw = meta.get("tokenizer.ggml.merges")
    pre = meta.get("tokenizer.ggml.pre", "default")

    def tid(key):
        v = meta.get(f"tokenizer.ggml.{key}")
        return int(v) if v is not None and 0 <= int(v) < n else None

    bos, eos, unk, pad = tid("bos_token_id"), tid("eos_token_id"), tid("unknown_token_id"), tid("padding_token_id")
    add_bos = meta.get("tokenizer.ggml.add_bos_token")
    add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))

    if model == "gpt2":
        tj, ttype, vocab_merges = _byte_level(tokens, types, merges_raw, pre)
        add_bos = bool(add_bos) if add_bos is not None else False
        vocab_parts = {"merges": vocab_merges, "types": types}
    elif model == "llama":
        # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise.
        add_bos = bool(add_bos) if add_bos is not None else True
        tj, ttype = _sentencepiece(tokens, types, scores, merges_raw, arch, meta, unk)
        vocab_parts = {"types": types, "scores": scores}
    else:
        raise TokenizerError(
            f"unsupported GGUF tokenizer model {model!r} (tokenizer.ggml.model); supported: 'gpt2', 'llama'"
        )

    # BOS/EOS rules live in the post-processor, as in HF checkpoints.
    if (add_bos and bos is not None) or (add_eos and eos is not None):
        single, pair, specials = [], [], []
        if add_bos and bos is not None:
            single.append(f"{tokens[bos]}:0")
            specials.append((tokens[bos], bos))
        single.append("$A:0")
        if add_eos and eos is not None:
            single.append(f"{tokens[eos]}:0")
            if (tokens[eos], eos) not in specials:
                specials.append((tokens[eos], eos))
        pair = single + [s.replace(":0", ":1").replace("$A", "$B") for s in single]
        proc = processors.TemplateProcessing(single=" ".join(single), pair=" ".join(pair), special_tokens=specials)
        tj["post_processor"] = _component(lambda t: setattr(t, "post_processor", proc))["post_processor"]

    text = json.dumps(tj, ensure_ascii=False)
    try:
        Tokenizer.from_str(text)
    except Exception as e:  # a tokenizer the library refuses is a bug in this builder or the file
        raise TokenizerError(f"built tokenizer.json does not load: {e}") from e

    special_ids = {"bos": bos, "eos": eos, "unk": unk, "pad": pad}
    vocab = vocab_section(tokens, special={k: v for k, v in special_ids.items() if v is not None}, **vocab_parts)
    config = {
        "type": ttype,
        "add_bos": bool(add_bos),
        "add_eos": add_eos,
        "eos_token_ids": _eos_ids(tokens, types, meta),
        "ggml_pre": pre if model == "gpt2" else None,
    }
    if model == "llama":
        config["add_space_prefix"] = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
        if arch in GEMMA_FAMILY and merges_raw is None:
            config["spm_merge_order"] = "file"  # merges derived in file order, not by score
    for k, v in (("bos_token_id", bos), ("pad_token_id", pad), ("unk_token_id", unk)):
        if v is not None:
            config[k] = v
    config = {k: v for k, v in config.items() if v is not None}
    specials_text = {k: tokens[v] for k, v in special_ids.items() if v is not None}
    return GGUFTokenizerInfo(text, config, vocab, specials_text)


def _added_token(i: int, content: str, special: bool) -> dict:
    return {
        "id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
        "normalized": False, "special": special,
    }


def _byte_level(tokens, types, merges_raw, pre):
    if merges_raw is None:
        raise TokenizerError("byte-level (gpt2) GGUF vocabulary without tokenizer.ggml.merges")
    if pre not in BPE_PRE_TOKENIZERS:
        raise TokenizerError(
            f"unsupported pre-tokenizer {pre!r} (tokenizer.ggml.pre); supported: {', '.join(BPE_PRE_TOKENIZERS)}"
        )
    merges = []
    for m in merges_raw:
        parts = m.split(" ")
        if len(parts) != 2:
            raise TokenizerError(f"malformed merge {m!r} in tokenizer.ggml.merges")
        merges.append(parts)

    byte_level_nore = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    normalizer = None
    if pre == "smollm":
        pt = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    elif pre in ("qwen2", "deepseek-r1-qwen"):
        normalizer = normalizers.NFC()
        pt = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"), byte_level_nore])
    elif pre in ("llama-bpe", "llama3"):
        pt = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"), byte_level_nore])
    elif pre == "gpt2":
        pt = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    else:  # "default"
        pt = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in DEFAULT_BPE_SPLITS] + [byte_level_nore]
        )

    def setup(t):
        t.pre_tokenizer = pt
        t.decoder = decoders.ByteLevel()
        t.post_processor = processors.ByteLevel(trim_offsets=False)
        if normalizer is not None:
            t.normalizer = normalizer

    comp = _component(setup)
    vocab = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED):
            text = byte_level_decode(t)
            if text is None:
                continue  # not spelled in the byte alphabet: a mislabelled entry, left as a plain token
            added.append(_added_token(i, text, ty == TOKEN_CONTROL))
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": comp["normalizer"],
        "pre_tokenizer": comp["pre_tokenizer"],
        "post_processor": comp["post_processor"],
        "decoder": comp["decoder"],
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
            "ignore_merges": pre in IGNORE_MERGES_PRE, "vocab": vocab, "merges": merges,
        },
    }
    return tj, "bpe", merges


def _sentencepiece(tokens, types, scores, merges_raw, arch, meta, unk):
    add_space_prefix = bool(meta.get("tokenizer.ggml.add_space_prefix", True))
    # A piece made only of spaces is stored with real spaces; the model looks pieces up with the
    # space written as U+2581, so such pieces are respelled.
    spelled = ["\u2581" * len(t) if t and " " in t and not t.strip() else t for t in tokens]
    if merges_raw is not None:
        merges = [m.split(" ", 1) for m in merges_raw]
    else:
        if arch in GEMMA_FAMILY or scores is None:
            # Gemma's scores do not follow the merge order; the order of the pieces in the file does.
            rank = [-float(i) for i in range(len(tokens))]
        else:
            rank = scores
        merges = _generated_merges(spelled, rank)

    def setup(t):
        if add_space_prefix:
            t.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
            t.decoder = decoders.Sequence([
                decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)
            ])
        else:
            t.normalizer = normalizers.Replace(" ", "\u2581")
            t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])

    comp = _component(setup)
    vocab = {}
    for i, t in enumerate(spelled):
        vocab[t] = i  # a later duplicate wins, as in a Python dict built from the list
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (TOKEN_CONTROL, TOKEN_UNKNOWN):
            added.append(_added_token(i, t, True))
        elif ty == TOKEN_USER_DEFINED and vocab.get(t) == i:
            added.append(_added_token(i, t, False))
    tj = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": comp["normalizer"],
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": comp["decoder"],
        "model": {
            "type": "BPE", "dropout": None, "unk_token": tokens[unk] if unk is not None else None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None, "fuse_unk": True,
            "byte_fallback": True, "ignore_merges": False, "vocab": vocab, "merges": merges,
        },
    }
    return tj, "spm"
