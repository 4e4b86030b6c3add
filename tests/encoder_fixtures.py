"""Tiny random encoder checkpoints (HF folders) for the encoder tests: BERT, RoBERTa, XLM-RoBERTa,
DistilBERT and ModernBERT, with or without a classification head, with a small tokenizer of the
family's kind (WordPiece, byte-level BPE, Unigram), optionally as a sentence-transformers folder.

    folder = make_encoder_folder(tmp_path, "bert", head="seq", num_labels=3)
    model_path = import_encoder(tmp_path, "roberta", head="token")   # folder imported to a .model

Needs torch and transformers (test dependencies only).
"""
from __future__ import annotations

import json
import os

FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "modernbert")
HEADS = (None, "seq", "token")

_WORDS = ("the a an of to in is was it he she they we you i and or not with for on at by from this that "
          "cat dog bird fish tree house car road water fire good bad big small new old hello world "
          "run runs running ran see saw look looked very much more most some any all one two three").split()


def _wordpiece():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    chars = list("abcdefghijklmnopqrstuvwxyz0123456789.,!?'-:;()")
    vocab = specials + chars + ["##" + c for c in chars if c.isalnum()] + _WORDS + ["##s", "##ing", "##ed", "##er"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(dict.fromkeys(vocab))}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    tok.decoder = decoders.WordPiece()
    return tok, dict(cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]")


def _byte_bpe(roberta_specials: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    if roberta_specials:
        specials, cls, sep, pad, unk, mask = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"], "<s>", "</s>", "<pad>", "<unk>", "<mask>"
    else:  # ModernBERT's spelling
        specials, cls, sep, pad, unk, mask = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"], "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("Ġ", "c"), ("a", "t"), ("Ġc", "at")]
    vocab = specials + alphabet + ["".join(m) for m in merges]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab))}
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if roberta_specials:
        tok.post_processor = processors.RobertaProcessing((sep, vocab[sep]), (cls, vocab[cls]))
    else:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, vocab[cls]), (sep, vocab[sep])])
    return tok, dict(cls_token=cls, sep_token=sep, pad_token=pad, unk_token=unk, mask_token=mask,
                     bos_token=cls, eos_token=sep)


def _unigram():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    pieces = [(t, 0.0) for t in specials]
    pieces += [("▁" + w, -5.0 - 0.01 * i) for i, w in enumerate(_WORDS)]
    pieces += [(c, -8.0) for c in "abcdefghijklmnopqrstuvwxyz0123456789.,!?'éüßあいうабв"] + [("▁", -3.0)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=3, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    return tok, dict(cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>", mask_token="<mask>",
                     bos_token="<s>", eos_token="</s>")


def make_tokenizer(family: str):
    """(tokenizers.Tokenizer, special tokens) of the family's kind."""
    if family in ("bert", "distilbert"):
        return _wordpiece()
    if family == "roberta":
        return _byte_bpe(True)
    if family == "modernbert":
        return _byte_bpe(False)
    if family == "xlm-roberta":
        return _unigram()
    raise ValueError(family)


def make_config(family: str, vocab_size: int, pad_id: int, hidden: int = 32, heads: int = 4, layers: int = 2,
                inter: int = 64, max_pos: int = 64, **extra):
    import transformers as tf

    if family == "bert":
        return tf.BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=layers,
                             intermediate_size=inter, max_position_embeddings=max_pos, pad_token_id=pad_id, **extra)
    if family in ("roberta", "xlm-roberta"):
        cls = tf.RobertaConfig if family == "roberta" else tf.XLMRobertaConfig
        return cls(vocab_size=vocab_size, hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=layers,
                   intermediate_size=inter, max_position_embeddings=max_pos + pad_id + 1, type_vocab_size=1,
                   pad_token_id=pad_id, bos_token_id=0, eos_token_id=2, **extra)
    if family == "distilbert":
        return tf.DistilBertConfig(vocab_size=vocab_size, dim=hidden, n_heads=heads, n_layers=layers, hidden_dim=inter,
                                   max_position_embeddings=max_pos, pad_token_id=pad_id, **extra)
    if family == "modernbert":
        return tf.ModernBertConfig(vocab_size=vocab_size, hidden_size=hidden, num_attention_heads=heads,
                                   num_hidden_layers=max(layers, 3), intermediate_size=inter, max_position_embeddings=max_pos,
                                   pad_token_id=pad_id, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                                   local_attention=8, global_attn_every_n_layers=2, **extra)
    raise ValueError(family)


def make_encoder_folder(root, family: str = "bert", head: str | None = None, num_labels: int = 2,
                        problem_type: str | None = None, dtype: str = "float32", seed: int = 0,
                        sentence_transformers: dict | None = None, name: str | None = None) -> str:
    """An HF folder (config.json, model.safetensors, tokenizer files) of a tiny random encoder.
    head: None (base model), "seq" (sequence classification) or "token" (token classification).
    sentence_transformers: {"mode": "mean", "normalize": True, "max_seq_length": 24} adds modules.json etc."""
    import torch
    import transformers as tf

    tok, special = make_tokenizer(family)
    vocab_size = tok.get_vocab_size()
    extra = {}
    if head is not None:
        extra["id2label"] = {i: f"label_{chr(97 + i)}" for i in range(num_labels)}
        extra["label2id"] = {v: k for k, v in extra["id2label"].items()}
        if problem_type:
            extra["problem_type"] = problem_type
    cfg = make_config(family, vocab_size, tok.token_to_id(special["pad_token"]), **extra)
    auto = {None: tf.AutoModel, "seq": tf.AutoModelForSequenceClassification,
            "token": tf.AutoModelForTokenClassification}[head]
    torch.manual_seed(seed)
    model = auto.from_config(cfg).eval()
    with torch.no_grad():  # non-trivial norms and biases (the default init makes them 1 and 0)
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    folder = os.path.join(os.fspath(root), name or f"{family}-{head or 'base'}-{dtype}")
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    fast = tf.PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=cfg.max_position_embeddings
                                      - (cfg.pad_token_id + 1 if family in ("roberta", "xlm-roberta") else 0), **special)
    fast.save_pretrained(folder)
    if sentence_transformers is not None:
        st = dict(sentence_transformers)
        mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
        if st.get("normalize"):
            mods.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
            os.makedirs(os.path.join(folder, "2_Normalize"), exist_ok=True)
        with open(os.path.join(folder, "modules.json"), "w") as f:
            json.dump(mods, f)
        os.makedirs(os.path.join(folder, "1_Pooling"), exist_ok=True)
        mode = st.get("mode", "mean")
        with open(os.path.join(folder, "1_Pooling", "config.json"), "w") as f:
            json.dump({"word_embedding_dimension": cfg.hidden_size if family != "distilbert" else cfg.dim,
                       "pooling_mode_cls_token": mode == "cls", "pooling_mode_mean_tokens": mode == "mean",
                       "pooling_mode_max_tokens": mode == "max", "pooling_mode_mean_sqrt_len_tokens": False}, f)
        if "max_seq_length" in st:
            with open(os.path.join(folder, "sentence_bert_config.json"), "w") as f:
                json.dump({"max_seq_length": st["max_seq_length"], "do_lower_case": False}, f)
    return folder


def import_encoder(root, family: str = "bert", head: str | None = None, quantize: str | None = None, **kw) -> str:
    """make_encoder_folder, then the HF importer; returns the .model path."""
    from cyb_llm.convert import import_model

    folder = make_encoder_folder(root, family, head, **kw)
    out = folder + (f"-{quantize}" if quantize else "") + ".model"
    import_model(folder, out, quantize=quantize, progress=False)
    return out
