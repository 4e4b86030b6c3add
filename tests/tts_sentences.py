"""Varied English text for the TTS frontend tests (tests/test_tts_frontend.py).

Built deterministically from hand-written pieces: numbers, abbreviations, dates,
currency, percentages, quotes, unicode punctuation, parentheses, long and multiple
sentences, questions/exclamations, mixed case, URLs/emails, digits with commas and
the awkward inputs (empty, whitespace, punctuation only, control characters,
non-BMP characters). Each entry is one `text` handed to the phonemizer whole.
"""
from __future__ import annotations

_NUMBERS = [
    "0", "7", "13", "42", "100", "101", "999", "1000", "1001", "2024", "12345",
    "1,000", "1,234,567", "3.14", "0.5", "-17", "+3", "1st", "2nd", "3rd", "21st",
    "4th", "1/2", "3/4", "10^6", "007", "1e9", "99.999", "1,000,000,000",
]
_ABBREVIATIONS = [
    "Dr. Smith lives on Elm St. near the park.",
    "Mr. and Mrs. Jones met Prof. Lee at 5 p.m. yesterday.",
    "Bring fruit, e.g. apples, pears, etc. to the picnic.",
    "The meeting, i.e. the one on Monday, is cancelled.",
    "St. Louis is in Missouri, U.S.A.",
    "Lt. Col. Harris served with Sgt. Miller.",
    "See Fig. 3 and Vol. 2, pp. 10-12.",
    "Ms. Park works at Acme Inc. and Foo Ltd.",
    "It was approx. 5 km, vs. 3 mi. last time.",
    "Jan. Feb. Mar. Apr. Aug. Sept. Oct. Nov. Dec.",
    "NASA, the FBI and the UN met at the WHO HQ.",
    "He said OK, then ASAP, then FYI.",
]
_DATES = [
    "The date is 2024-03-15.", "Born on 12/25/1990 at noon.", "On March 3rd, 2021 we left.",
    "It happened in 1066 and again in 1999.", "The 1990s were loud.", "Meet me at 10:30.",
    "The train leaves at 7:05 a.m. sharp.", "Monday, January 1, 2001.", "In the '80s music changed.",
    "From 9 to 5, Mon-Fri.", "Q3 2023 results are out.", "Call before 23:59 on 31/12.",
]
_MONEY = [
    "It costs $3.50.", "That is €20 in total.", "£100 or ¥5000?", "Pay $1,299.99 now!",
    "A $5 bill and 25¢.", "The budget is $2.5 million.", "He owes me $0.99.",
    "Prices rose to $1,000,000.", "USD 40 or EUR 35.", "It was 15% off.",
    "Interest is 3.5% per year.", "Only 100% of 0% is 0%.", "Down 12.75% since May.",
]
_QUOTES_PUNCT = [
    'She said "hello" and left.', "He said 'goodbye' quietly.",
    "“Smart quotes” are ‘curly’ here.", "Wait… what?", "Well — I think so.",
    "It is a long–winded story.", "The cat (a tabby) slept.", "Lists [a, b] and {c, d}.",
    "Yes; no: maybe.", "One, two, three, four.", "Hmm...", "Really?!", "Stop!!!",
    "What??", "A -- B", "x/y", "rock & roll", "50/50 odds", "#hashtag and @mention",
    "«Bonjour», dit-il.", "¿Qué? ¡Sí!", "C'est la vie.", "Don't, won't, can't, shouldn't've.",
    "It's John's book, not the Smiths'.", "Mind the gap — please!", "A*B=C", "2+2=4",
    "Tab\there.", "Line one.\nLine two.", "Para one.\n\nPara two.", "a_b_c", "~tilde~",
    "back`tick`", "pipe | bar", "less < more > equal =", "\\backslash\\",
]
_QUESTIONS = [
    "Is this the real life?", "Where are you going?", "Why not!", "How much is it?",
    "Who? What? When? Where?", "Can you hear me now?", "Did you see that!",
    "Are we there yet? No. Are we there yet? No!", "What time is it?", "Really.",
]
_CASE = [
    "THIS IS ALL CAPS.", "this is all lower case.", "ThIs Is MiXeD cAsE.", "iPhone and eBay.",
    "McDonald's and O'Brien.", "The BBC and the bbc.", "HELLO world!", "CamelCaseWord here.",
]
_WEB = [
    "Visit https://example.com/path?x=1 today.", "Email me at john.doe@example.org please.",
    "Go to www.python.org for docs.", "ftp://files.example.net/a.txt is old.",
    "My handle is @piper_tts.", "See http://localhost:8080/.", "user@host",
    "The file is report_v2.pdf.", "Version 1.8.0 was released.", "Use C++ or C#.",
]
_WORDS = [
    "The quick brown fox jumps over the lazy dog.", "Hello, world.", "Text to speech is fun.",
    "Rhythm and rhyme.", "Colonel, choir, yacht, queue.", "Read the book; I read it yesterday.",
    "Live and let live.", "The lead pipe led nowhere.", "Tomato, potato.", "Nguyen, Siobhan, Saoirse.",
    "Supercalifragilisticexpialidocious!", "Antidisestablishmentarianism.", "A.", "I.", "a",
    "Wow", "Okay okay okay", "Ahem.", "Shh!", "Psst.", "Naïve café résumé.", "Über cool.",
    "Smörgåsbord and jalapeño.", "Zürich and São Paulo.", "Façade, coöperate.", "Ångström.",
]
_ODD = [
    "", " ", "   \t  \n ", ".", "...", "!?", ",", "—", "…", "()", "\"\"", "''", ". . .", "?!?!",
    "emoji 😀 here", "🎉🎉🎉", "math 𝒳 and 𝔘", "music 𝄞 note", "\u0007bell", "a\u0001b\u001fc",
    "null\u0000byte", "zero\u200bwidth", "soft\u00adhyphen", "rtl \u202etext\u202c here", "\ufeffbom start",
    "combining e\u0301 accent", "NFC é vs NFD e\u0301", "\u00a0nbsp\u00a0", "ﬁ ligature", "Ⅻ roman",
    "ｆｕｌｌｗｉｄｔｈ", "x\r\ny", "end\x7f", "\u2028line sep", "Greek αβγ.", "Cyrillic привет.",
    "Chinese 你好.", "Arabic مرحبا.", "Hebrew שלום.", "Japanese こんにちは.", "Korean 안녕.",
    "Thai สวัสดี.", "Hindi नमस्ते.", "lone \ud800 surrogate", "Le café, s'il vous plaît.",
    "Ich bin ein Berliner.", "The word schadenfreude is German.", "Déjà vu, again.",
]
_RAW = [
    "[[ hˈɛloʊ ]]", "Say [[ wˈɜːld ]] now.", "[[ə]] then text.", "text then [[ b ]]",
    "A [[ x ]] B [[ y ]] C.", "[[]]", "[[ ]] empty", "Unclosed [[ phonemes", "Sentence one. [[ tˈuː ]] Two.",
    "[[ unknownΩ ]]", "[[ aɪ ]]", "[[ starts like a block", "[[a]][[b]]", "x [[a]]. y", "[[ a\nb ]] c",
    "Two blocks [[ hˈɛ ]] [[ loʊ ]] and text.", "Question [[ wˈʌt ]]? Yes.", "tail [[ z ]]",
]
_MORE = [
    "Wait, what: really; no.", "First: second; third, fourth.", "He left... then came back.",
    "Three dots . . . and more.", "Ellipsis…then text.", "Dash—no spaces—here.", "“Quoted.” Then not.",
    "(Parenthetical sentence.) Next one.", "She asked, “Why?” and left!", "End with a colon:",
    "End with a semicolon;", "End with a comma,", "Numbers 1, 2, and 3.", "Version 2.0.1-beta.",
    "The year 2000 problem.", "At 3 o'clock.", "It's 98.6°F or 37°C.", "A 5-star hotel.",
    "Call 555-123-4567 now.", "ISBN 978-3-16-148410-0.", "The ratio is 16:9.", "He ran 26.2 miles.",
    "Over 9000!", "Chapter IV, verse XII.", "World War II ended in 1945.", "Louis XIV.",
    "Pi is about 3.14159.", "It's -40 degrees.", "From $5 to $10.", "#1 hit", "1 + 1 = 2",
    "£3.50 and €4,50.", "10 kg, 5 m, 3 s.", "5 ft 10 in.", "100 mph", "3 a.m.", "24/7 support.",
]
_TEMPLATES = [
    "I have {n} apples.", "{n} people came.", "Page {n}.", "The answer is {n}!", "Is it {n}?",
    "Add {n} and {n2}.", "Room {n}, floor {n2}.",
]
_LONG = (
    "This is a very long sentence that keeps going and going, with commas, clauses and "
    "subclauses, because the frontend must keep every clause of it in one sentence even when "
    "espeak-ng splits the text into clauses at each comma, semicolon; or colon: and it must "
    "not lose any words between the clauses no matter how many there are, how long they run, "
    "or how often the writer forgets to stop and take a breath before finishing the thought"
)


def sentences() -> list[str]:
    """The corpus: a few hundred varied texts, same order every call."""
    out: list[str] = []
    out += _ABBREVIATIONS + _DATES + _MONEY + _QUOTES_PUNCT + _QUESTIONS + _CASE + _WEB
    out += _WORDS + _ODD + _RAW + _MORE
    for i, n in enumerate(_NUMBERS):
        for j, t in enumerate(_TEMPLATES):
            if (i + j) % 3 == 0:
                out.append(t.format(n=n, n2=_NUMBERS[(i * 7 + j) % len(_NUMBERS)]))
    out.append(_LONG + ".")
    out.append(_LONG)  # no final terminator
    out.append(" ".join([_LONG + "."] * 4))  # ~ 2,000 characters, four sentences
    out.append(" ".join(_WORDS[:12]))  # many sentences in one text
    out.append(" ".join(_QUESTIONS))
    out.append("word " * 600)  # 3,000 characters with no punctuation at all
    # pairs: a sentence followed by another category's sentence
    pool = _ABBREVIATIONS + _DATES + _MONEY + _QUESTIONS + _WEB
    for k in range(0, len(pool) - 1, 3):
        out.append(pool[k] + " " + pool[k + 1])
    return out
