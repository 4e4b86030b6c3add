"""A deterministic, varied text corpus for tokenizer agreement tests.

Hand-written lines cover the known hard cases (whitespace runs before digits, contractions, CJK,
emoji with joiners, combining accents, code, special-token strings written in plain text); a seeded
generator then mixes fragments of every kind into more lines.
"""
from __future__ import annotations

import random

HAND = [
    "Hello, world!",
    "hello world",
    " leading space",
    "  two leading spaces",
    "trailing space ",
    "trailing spaces   ",
    "The year 2024 had 366 days; 1234567890 is ten digits.",
    "a   1",
    "x  42 and   7 and    1000",
    "tabs\tand\t\ttabs",
    "line one\nline two\n\nline four",
    "\n\n\nstarts with newlines",
    "ends with newlines\n\n",
    "carriage\r\nreturn",
    "I'm sure you'll see they've done it, she'd said; it's John's.",
    "I'M SURE YOU'LL SEE THEY'VE DONE IT",
    "Ça va? Très bien, merci. Où est l'hôtel?",
    "Zürich, Köln, Göteborg, Ærø, Ñandú",
    "naïve café résumé coöperate",
    "Cafe\u0301 with a combining accent",
    "日本語のテキストです。東京は大きい。",
    "中文文本测试，你好世界！",
    "한국어 텍스트 테스트",
    "Русский текст: привет, мир!",
    "Ελληνικά γράμματα αβγδ",
    "עברית ועוד",
    "العربية نص",
    "हिन्दी पाठ",
    "ไทย ภาษา",
    "Emoji: 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️",
    "🤖 robots 🚀 rockets",
    "math: ∑ ∫ √ ∞ ≠ ≤ ≥ π ≈ 3.14159",
    "quotes “curly” ‘single’ «guillemets» — dash – en",
    "def foo(x: int) -> int:\n    return x * 2  # double",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "    indented four\n        indented eight",
    "if __name__ == \"__main__\":\n\tmain()",
    "const f = (a, b) => a ?? b || c && d;",
    "<html><body><div class=\"x\">text</div></body></html>",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "https://example.com/path?query=1&other=two#frag",
    "user@example.com sent 3 emails at 10:45pm",
    "$100.00 + €20,50 - £3 = ¥?",
    "0x1F 0b1010 1e-5 -3.5e+10 1_000_000",
    "!!!???...,,,;;;:::",
    "a-b_c.d/e\\f|g~h^i",
    "<|im_start|>user\nHi<|im_end|>",
    "<|endoftext|>after",
    "before<|endoftext|>",
    "</s> and <s> and <unk> and <pad>",
    "<bos>hello<eos>",
    "<start_of_turn>user\nhi<end_of_turn>",
    "<tool_call>{\"a\": 1}</tool_call>",
    "<think>hmm</think>",
    "<|fim_prefix|>def<|fim_suffix|>pass<|fim_middle|>",
    "<repo_name>x<file_sep>y",
    "[INST] instruction [/INST]",
    "\u00a0non-breaking\u00a0spaces\u2003em space",
    "zero\u200bwidth\u200djoiner",
    "     ",
    " ",
    "\t",
    "\n",
    "a",
    "1",
    "ab12cd34",
    "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism",
    "ThisIsCamelCase and snake_case_words and SCREAMING_CASE",
    "Mixed 日本 and English and 123 numbers",
    "😀a😀b😀",
    "\U0001F600\U0001F601 surrogates outside BMP \U00020000\U0002A6D6",
    "repeated aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "................................................................",
    "----------------------------------------",
    "1 2 3 4 5 6 7 8 9 10 11 12 100 1000 10000 100000",
    "   123   456   ",
    "   \n   \n",
    "x\n \n y",
    "The quick brown fox jumps over the lazy dog.",
    "Lorem ipsum dolor sit amet, consectetur adipiscing elit.",
    "¿Dónde está la biblioteca? ¡Aquí!",
    "ß ẞ ﬁ ﬂ ŉ",
    "Ǆ ǅ ǆ Å Å",
    "①②③ ⅠⅡⅢ ½ ¼ ²³",
    "١٢٣ ४५६ ໑໒",
]

FRAGMENTS = {
    "ascii": ["the", "quick", "model", "token", "Hello", "WORLD", "it's", "don't", "we'll", "a", "I"],
    "num": ["0", "7", "42", "123", "2024", "3.14", "1,000", "99999", "007"],
    "space": [" ", "  ", "   ", "\t", "\n", "\n\n", " \n", "    "],
    "punct": [".", ",", "!", "?", "...", ";", ":", "--", "(", ")", "[", "]", "{", "}", "\"", "'", "/", "#"],
    "accent": ["é", "ü", "ñ", "ø", "ç", "Å", "ő", "ž", "e\u0301"],
    "cjk": ["日本", "中文", "漢字", "テスト", "한국", "の", "是"],
    "emoji": ["😀", "👍", "🏽", "👨‍💻", "🎉", "❤️", "🇯🇵"],
    "code": ["def", "x=1", "==", "->", "::", "&&", "||", "{}", "[]", "();", "__init__", "self.x"],
    "special": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "</s>", "<s>", "<bos>", "<eos>", "<end_of_turn>"],
}


def corpus(n_generated: int = 520, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    kinds = list(FRAGMENTS)
    lines = list(HAND)
    for _ in range(n_generated):
        parts = []
        for _ in range(rng.randint(2, 14)):
            k = rng.choice(kinds)
            parts.append(rng.choice(FRAGMENTS[k]))
            if rng.random() < 0.5:
                parts.append(" " if rng.random() < 0.8 else rng.choice(FRAGMENTS["space"]))
        lines.append("".join(parts))
    return lines
